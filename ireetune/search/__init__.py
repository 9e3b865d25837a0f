"""Search: the search-strategy role (`strategy.py`) and its strategies (`strategies/`), the
learned cost model (`cost_model.py`, `model_store.py`, `learned_order.py`) and recorded spaces
(`recorded.py`, `evaluation.py`) to replay them on."""
