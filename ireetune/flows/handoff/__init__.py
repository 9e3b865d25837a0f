"""Compile here, benchmark there: the self-contained folder between the two, and its two ends.

`manifest.py` (runtime-only) describes the folder; `export.py` writes it after compiling;
`benchmark_folder.py` measures and verifies it with only the runtime installed; `references.py`
compiles the leaders' reference programs the device host asks for, and `finish.py` reads the
measurements back, picks the winner and writes its spec. `model_folder.py` and `device_step.py`
are the same two ends for a split model run; `folder_trust.py` and `folder_flags.py` the rule
that a folder is data.
"""
