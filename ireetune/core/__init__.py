"""The core layer: what every stage shares, and the helpers that import nothing above them.

Records and protocols: `target.py` (the target protocol and its search spaces), `records.py`
(a candidate's fate), `candidate.py`, `features.py`, `flag_space.py`, `fields.py`. Options:
`options.py` (options declared once as dataclass fields, the parser generated from them),
`arguments.py` and `common_options.py` (argument types, shared options), `errors.py` (the one
user-facing exception). Files and processes: `files.py` (atomic writes), `input_files.py`,
`input_archive.py`, `output_paths.py`, `run_dir.py`, `scratch.py`, `tools.py` (IREE's tools),
`child_process.py` and `worker_protocol.py` (children that never outlive the tuner).

Nothing here imports a stage; every stage may import from here (docs/architecture.md).
"""
