"""The llvm-cpu target: the machine's facts, one hand-written z3 search space per op family
(`common.py` what they share, `sizes.py` a contraction's sizes), the ordering heuristics and
the learned cost model's features (`features.py`)."""
