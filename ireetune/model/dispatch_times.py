"""The profile's timing of each compiled dispatch benchmark (runtime only: the device step of a
split model run imports it without the compiler)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ireetune.benchmark.runner import BenchmarkJob, BenchmarkSession, BenchmarkStatus

if TYPE_CHECKING:
    from ireetune.executor.base import Executor


def time_dispatch_benchmarks(
    executor: Executor, binaries: Mapping[int, Path], device: str
) -> dict[int, float]:
    """Time each compiled dispatch benchmark once on `device`; return the median ms of each."""
    timings: dict[int, float] = {}
    session = BenchmarkSession(
        [BenchmarkJob(index, path) for index, path in sorted(binaries.items())],
        device,
        repetitions=3,
        batch=0,
        timeout_s=120,
        min_repetition_s=0.02,
    )
    for outcome in executor.run_benchmarks(session):
        if outcome.status is BenchmarkStatus.MEASURED:
            timings[outcome.candidate_id] = statistics.median(outcome.times_ms)
    return timings
