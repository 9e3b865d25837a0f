"""One dispatch run: the run object (state.py) handed through its stages, saved after each.

`options.py` declares a run's options; `tuner.py` composes the flow; `start.py` opens the run and
generates; `stages.py` holds specs, compile, measure and check; `decide.py` the one decide;
`flag_phase.py`, `reuse.py` and `recording.py` the flags, a stored winner, and the callbacks
that record; `resume.py` and `run_options.py` continue a killed run from its folder.
"""
