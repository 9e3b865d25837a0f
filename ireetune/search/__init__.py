"""Search: the search-strategy role (`strategy.py`) and its strategies (`strategies/`, one module
each), the ranker (the learned cost model, `ranker.py`), trained from the database
(`ranker_training.py`), used and updated online (`learned_order.py`), and the recorded spaces it
learns from (`recorded.py`)."""
