"""Compile here, benchmark there: the self-contained folder between two hosts, and its ends.

`manifest.py` and `model_folder.py` (runtime-only) describe a dispatch and a model folder;
`export.py` writes it; `benchmark_folder.py` and `device_step.py` measure it with the runtime
only; `finish.py`, `references.py` and `continue_run.py` read it back and decide;
`folder_flags.py` and `folder_trust.py` the rule that a folder is data.
"""
