"""The dispatch profiler (`ireetune profile`, `ireetune.profile`): sweep, compile, verify, time.

`options.py` declares a run's options; `shapes.py` and `operations.py` turn dimension texts into
operations; `generate.py` writes each as a small model; `configs.py` the configurations to
profile; `build.py` is the compile phase and `measure.py` the runtime-only run phase, which meet
at `manifest.py`; `reference.py` checks outputs, `vendor.py` times torch's library, `peaks.py`
and `report.py` the results; `pipeline.py` runs both phases.
"""
