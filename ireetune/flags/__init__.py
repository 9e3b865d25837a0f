"""Global compiler options as a search space: declared per target, proposed, checked, stored.

`space.py` holds the records (an option and its choices, a flag set) and the pure proposal
logic; `check.py` reads and validates flags a user writes; `file.py` the `tuned_flags.txt`
format; `store.py` the database table of a model's winning flags. The flag search itself is
`ireetune/model/flag_search.py` (whole model) and `ireetune/flags/dispatch_search.py` (one
dispatch benchmark). Each target declares its options in `targets/<target>/flags.py`.
"""
