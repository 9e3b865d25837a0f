"""One dispatch run: the state its stages hand on (state.py) and the one decide (decide.py)."""
