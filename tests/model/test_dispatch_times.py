"""The profile's timing of dispatch benchmarks (`model/dispatch_times.py`), on real benchmarks of
two dumped dispatches, timed on local-task."""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path

import pytest

from ireetune.benchmark.runner import BenchmarkOutcome, BenchmarkSession, BenchmarkStatus
from ireetune.compile.driver import build_request, run_compile
from ireetune.executor.base import LocalExecutor
from ireetune.model import dispatch_times
from ireetune.targets import parse_target
from tests.conftest import ARGMAX_MODEL, MATMUL_MODEL, dump_benchmarks


class RecordingExecutor(LocalExecutor):
    """A local executor that keeps each benchmark session's jobs and every outcome."""

    def __init__(self) -> None:
        super().__init__()
        self.sessions: list[list[int]] = []
        self.outcomes: list[BenchmarkOutcome] = []

    def run_benchmarks(self, session: BenchmarkSession) -> Generator[BenchmarkOutcome, None, None]:
        assert isinstance(session.jobs, list), "the profile's sessions are lists of jobs"
        self.sessions.append([job.candidate_id for job in session.jobs])
        for outcome in super().run_benchmarks(session):
            self.outcomes.append(outcome)
            yield outcome


def _binary(folder: Path, model: str) -> Path:
    (benchmark,) = dump_benchmarks(model, folder)
    binary = folder / "dispatch.vmfb"
    result = run_compile(
        build_request(
            parse_target("cpu"), benchmark, binary,
            phase_flags=("--compile-from=executable-sources",), timeout_s=120,
        )
    )  # fmt: skip
    assert result.ok, result.error_line
    return binary


def test_the_dispatches_that_take_most_of_a_run_are_timed_again_and_keep_their_fastest_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    binaries = {
        3: _binary(tmp_path / "matmul", MATMUL_MODEL),
        7: _binary(tmp_path / "argmax", ARGMAX_MODEL),
    }
    monkeypatch.setattr(dispatch_times, "RETIME_TOP", 1)
    executor = RecordingExecutor()

    # The argmax launches 1000 times a run: it takes most of it, whatever its time a launch.
    timings = dispatch_times.time_dispatch_benchmarks(
        executor, binaries, "local-task", {3: 1, 7: 1000}
    )

    assert executor.sessions == [[3, 7], [7] * dispatch_times.RETIME_ROUNDS]
    medians: dict[int, list[float]] = {}
    for outcome in executor.outcomes:
        assert outcome.status is BenchmarkStatus.MEASURED, outcome.reason
        medians.setdefault(outcome.candidate_id, []).append(
            sorted(outcome.times_ms)[len(outcome.times_ms) // 2]
        )
    assert len(medians[7]) == 1 + dispatch_times.RETIME_ROUNDS
    assert timings == {3: medians[3][0], 7: min(medians[7])}
