"""One model run: the run object and its phases (`run.py`), in process or split across hosts.

`options.py` declares a run's options (`options_file.py` the same options as its files hold),
`tuner.py` starts and continues runs; `flag_phase.py` is the flag phase of both modes (in
process it ends with `import_choice.py`: the model as given or its grouped convolutions split) and
`report.py` is the report writer of both modes; `state.py` declares the run file of both modes
(`model_run.json`) and `state_restore.py` writes it and rebuilds the run from it; in process:
`local.py`, `local_select.py`; split: `split.py`, `split_device.py`; `deployment.py` times the
tuned model against ONNX Runtime at the end.
"""
