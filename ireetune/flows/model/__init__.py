"""One model run: the run object and its phases (run.py), in process or split across hosts.

`options.py` declares a run's options, `tuner.py` starts and continues runs; in process:
`local.py`, `local_select.py`, `local_state.py`, `report.py`; split: `split.py`,
`split_flags.py`, `split_device.py`, `split_state.py`, `split_report.py`.
"""
