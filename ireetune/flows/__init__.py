"""The flows: each runs the stages in order, through the one sequencer (`sequence.py`), and is
what the Python API and the commands call.

`dispatch/` tunes one dispatch, `model/` a whole model, `handoff/` is the folder between a
compile host and a device host; `continue_folder.py` tells the kinds of run folder apart, for
`ireetune continue` (compile host) and `ireetune measure` (device host); `apply.py` compiles a
model with a tuning result.
"""
