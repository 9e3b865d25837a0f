"""Search: candidate ordering with the ranker (the learned cost model, `ranker.py`), trained
from the database (`ranker_training.py`), used and updated online (`learned_order.py`), and the
recorded spaces it learns from (`recorded.py`)."""
