"""Storage: everything ireetune keeps across runs, beside the tuning database.

`store.py` the per-dispatch results (SQLite; `schema.py` creates, checks and upgrades the file,
`keys.py` names a result, `exchange.py` and `validate.py` export and import rows);
`model_results.py` a tuned model's flags and spec (a table of the same file); `space_cache.py`
the spaces and solutions kept per problem (`<database folder>/spaces/`); `ranker_files.py` the
rankers' folder and the machine facts kept for them (`<database folder>/models/`); `run_files.py`
the files of a run folder, read as untrusted data.
"""
