"""Tuning specs: build them with the IREE bindings (`builder.py`), read them back and find their
entry points (`source.py`), link (`link.py`), check (`check.py`), compare with a model's
dispatches (`inspect.py`, `coverage.py`), export the database's best (`export.py`) and compile a
model with one (`apply.py`)."""
