"""Compile here, benchmark there: the self-contained folder between the two, and its two ends.

`manifest.py` (runtime-only) describes the folder; `export.py` writes it after compiling;
`benchmark_folder.py` measures and verifies it with only the runtime installed; `finish.py`
reads the measurements back, picks the winner and writes its spec.
"""
