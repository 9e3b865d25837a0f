"""Benchmarking: time compiled candidates against the baseline, and survive any of them.

`worker.py` times dispatch benchmarks in a runtime-only process; `runner.py` supervises it
(crashes, hangs, per-candidate timeouts); `campaign.py` measures a run's candidates on one or
more devices against each device's own baseline and confirms the leaders in interleaved rounds;
`outcomes.py` folds a campaign into the candidates' records; `stats.py` and `timing.py` hold the
statistics of repeated timings and how each was taken.

Nothing in this package may import the IREE compiler or z3 at module level: the worker must run
on a machine that has only `iree-base-runtime` and `numpy` installed.
"""
