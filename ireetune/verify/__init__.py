"""Verification: a candidate's outputs must equal the default configuration's.

`reference.py` builds a standalone program around a dispatch's root op; `compare.py` makes
random inputs and compares outputs; `runner.py` and the runtime-only `worker.py` run the
programs; `stage.py` is the checks' stage of a dispatch run; `landing.py` proves a spec's
configuration reached the compiler.
"""
