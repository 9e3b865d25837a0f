"""The tuning database (SQLite) and the run folder's files: results that survive crashes.

`store.py` writes every candidate's fate as it arrives, `schema.py` the tables and their version,
`keys.py` the target and device parts of a key, `exchange.py` and `validate.py` export and import,
`run_files.py` reads a run folder's JSON files as untrusted data.
"""
