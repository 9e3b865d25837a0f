"""The executor is handed in: a flow's stages send every compile and measurement, as typed
requests, to the executor they were given (no global to look one up)."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

import ireetune.executor
import ireetune.executor.base
from ireetune.benchmark.runner import BenchmarkOutcome, BenchmarkSession
from ireetune.compile.pool import CompileBatch, CompileOutcome
from ireetune.core.records import TIMED_STATUSES
from ireetune.executor import LocalExecutor
from ireetune.flows.dispatch.tuner import TuneOptions, tune_dispatch
from ireetune.model.timing import ModelComparison, ModelRun
from ireetune.verify.runner import ReferenceBatch, ReferenceRun
from tests.conftest import FAST_RUN_OPTIONS, TEST_TARGET


class RecordingExecutor(LocalExecutor):
    """Runs everything on this host, and keeps each request it was given."""

    def __init__(self) -> None:
        self.requests: list[object] = []

    def compile(self, batch: CompileBatch) -> Iterator[CompileOutcome]:
        self.requests.append(batch)
        return super().compile(batch)

    def run_benchmarks(self, session: BenchmarkSession) -> Generator[BenchmarkOutcome, None, None]:
        self.requests.append(session)
        return super().run_benchmarks(session)

    def run_reference_programs(self, batch: ReferenceBatch) -> dict[int, ReferenceRun]:
        self.requests.append(batch)
        return super().run_reference_programs(batch)

    def run_models_side_by_side(self, comparison: ModelComparison) -> dict[str, ModelRun]:
        self.requests.append(comparison)
        return super().run_models_side_by_side(comparison)


def test_a_dispatch_run_compiles_and_measures_on_the_executor_it_is_handed(
    matmul_benchmark: Path, tmp_path: Path
) -> None:
    executor = RecordingExecutor()
    options = TuneOptions(
        input_path=matmul_benchmark, target=TEST_TARGET, num_candidates=3, seed=7,
        output_dir=tmp_path / "runs", **FAST_RUN_OPTIONS,
        confirm_top=3, use_database=False, show_progress=False,
        # Every candidate is confirmed and none is stopped early, and any one at least a
        # thousandth as fast is worth checking: the output check runs however loaded the machine.
        threshold=0.001, hopeless_factor=1000.0,
    )  # fmt: skip
    result = tune_dispatch(options, executor)
    # The candidates' compiles, their benchmark session and the output check of the contenders
    # all went to the executor handed in, in that order, each as its own typed request. (On the
    # CPU the search times the reference programs on real inputs: their binaries are the ones
    # the output check runs, so nothing is compiled for it.)
    kinds = [type(request).__name__ for request in executor.requests]
    assert kinds == ["CompileBatch", "BenchmarkSession", "ReferenceBatch"]
    (candidates, *_) = executor.requests
    assert isinstance(candidates, CompileBatch)
    assert sorted(job.candidate_id for job in candidates.jobs) == [
        r.candidate_id for r in result.records
    ]
    assert any(r.status in TIMED_STATUSES for r in result.records if not r.is_baseline)


def test_requests_are_frozen_and_there_is_no_executor_to_look_up(tmp_path: Path) -> None:
    session = BenchmarkSession([], "local-task", 2, 0, 60.0)
    with pytest.raises(AttributeError):
        session.device = "cuda://0"  # type: ignore[misc]
    for module in (ireetune.executor, ireetune.executor.base):
        assert not hasattr(module, "current_executor")
        assert not hasattr(module, "use_executor")
