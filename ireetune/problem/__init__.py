"""Op-family knowledge: a dispatch's root op, parsed into a typed problem of its family.

`root_op.py` finds the root op; `registry.py` holds the families (generic code finds a
problem's family there, never by class); `family.py` is the interface every family implements;
one module per family (`contraction.py`, `batch_contraction.py`, `convolution.py`,
`attention.py`, `reduction.py`, `elementwise.py`) and what some share (`matmul.py`,
`generic.py`); `op_kind.py` names an op that is not tuned.
"""
