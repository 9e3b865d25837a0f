"""Tuning specs: build them with the IREE bindings, read, check, inspect, link and apply them.

`builder.py` builds a spec, `source.py` reads one, `check.py` checks its anatomy, `inspect.py`
and `coverage.py` say what its matchers match, `link.py` links several, `export.py` builds one
from the database, `apply.py` compiles a model with one and proves its configurations landed.
"""
