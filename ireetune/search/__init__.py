"""Learned search: the cost model, the candidate order it gives, and the recorded spaces.

`cost_model.py` ranks candidates by predicted speed, `model_store.py` trains and keeps cost
models from the database, `learned_order.py` orders (and re-ranks) candidates with one,
`recorded.py` and `evaluation.py` are measured samples of spaces and replays of an ordering.
"""
