"""The decision stage: pure functions over typed measurement facts.

Every flow (the in-process dispatch tuner, the split flow's `finish`, the model tuner's
selection) reaches its verdicts here, so two flows given the same measurements can never pick
different winners.
"""
