"""Benchmarking: a runtime-only worker process and the runner that supervises it.

Nothing in this package may import the IREE compiler or z3 at module level: the worker must run
on a machine that has only `iree-base-runtime` and `numpy` installed.
"""
