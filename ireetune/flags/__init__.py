"""Global compiler options as a search space: declared per target, proposed, checked.

`ireetune/core/flag_space.py` holds the records (an option and its choices, a flag set) and the
pure proposal logic (the target protocol speaks of them, so they sit in the core layer);
`check.py` reads and validates flags a user writes; `file.py` the `tuned_flags.txt` and
`runtime_flags.txt` formats (a model's winning flags are stored by `database/model_results.py`).
The flag search itself is `model_search.py` (whole model: `strategy.py` searches the declared
options from the known-good sets, `runtime.py` the device's runtime options on the winner) and
`dispatch_search.py` (one dispatch benchmark: the known-good sets only). Each target declares
its options in `targets/<target>/flags.py`.
"""
