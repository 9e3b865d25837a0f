"""The flows: each runs the stages in order, and is what the Python API and the commands call.

`dispatch/` tunes one dispatch, `model/` a whole model, `handoff/` carries a run folder between
a compile host and a device host; `apply.py` compiles a model with a tuning result.
"""
