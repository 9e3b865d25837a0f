"""The decision stage: pure functions over typed measurement facts.

`facts.py` turns measurements into each candidate's facts, `rules.py` names who is a contender,
who passes which check and who wins, `stats.py` and `medians.py` give speedups with confidence
intervals, `thresholds.py` the speedups the rules ask for. Every flow (the in-process dispatch
tuner, the split flow's `finish`, the model tuner's selection) reaches its verdicts here, so two
flows given the same measurements can never pick different winners.
"""
