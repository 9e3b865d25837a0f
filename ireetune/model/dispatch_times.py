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

# The dispatches that hold the most time (per launch, times `launches`) are timed again in this
# many more rounds, interleaved, and each keeps the median of its fastest round. A dispatch's
# time can move 4x from one round to the next on a shared machine: inception_v2's im2col gather
# (`elementwise_7x7x3x3x224`, a memory-bound scatter) was 0.185, 0.768, 0.225 and 0.250 ms in
# four rounds on the 2-core development machine (2026-12-05), and the profile of its run, one
# round, put it at 0.896 ms: 5.4% of the model, the scheduler's slot spent on a gain not there.
RETIME_ROUNDS = 2
RETIME_TOP = 24


def time_dispatch_benchmarks(
    executor: Executor,
    binaries: Mapping[int, Path],
    device: str,
    launches: Mapping[int, int] | None = None,
) -> dict[int, float]:
    """Time each compiled dispatch benchmark on `device`, then the RETIME_TOP that take most of
    a model's run (ms a launch times its `launches`, 1 where not given) in RETIME_ROUNDS more
    interleaved rounds; return each one's median ms of its fastest round."""
    rounds: dict[int, list[float]] = {}
    _time_round(executor, dict(sorted(binaries.items())), device, 1, rounds)
    counts = launches or {}
    top = sorted(rounds, key=lambda index: -rounds[index][0] * counts.get(index, 1))[:RETIME_TOP]
    _time_round(executor, {index: binaries[index] for index in top}, device, RETIME_ROUNDS, rounds)
    return {index: min(medians) for index, medians in rounds.items()}


def _time_round(
    executor: Executor,
    binaries: Mapping[int, Path],
    device: str,
    count: int,
    rounds: dict[int, list[float]],
) -> None:
    """Time `binaries` in `count` interleaved rounds of one session; add each one's median ms of
    each round to `rounds`."""
    if not binaries:
        return
    session = BenchmarkSession(
        [BenchmarkJob(index, path) for _ in range(count) for index, path in binaries.items()],
        device,
        repetitions=3,
        batch=0,
        timeout_s=120,
        min_repetition_s=0.02,
    )
    for outcome in executor.run_benchmarks(session):
        if outcome.status is BenchmarkStatus.MEASURED:
            rounds.setdefault(outcome.candidate_id, []).append(statistics.median(outcome.times_ms))
