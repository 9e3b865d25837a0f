"""Which timing a dispatch run on the CPU searches and decides on (flows/dispatch/start.py,
state.py): a standalone run times the reference program per call on real inputs; a run asked to
decide on the dispatch benchmark (the model flow's, `decide_on_dispatch_benchmark`) times the
benchmark batched, still checks its contenders' outputs on real inputs, and restores none of the
other basis's timings from the database."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ireetune.benchmark.timing import TimingKind
from ireetune.flows.dispatch.state import DISPATCH_BENCHMARK_DECIDES
from ireetune.flows.dispatch.tuner import TuneOptions, tune_dispatch
from ireetune.report.result import TuneResult
from tests.conftest import FAST_RUN_OPTIONS, TEST_TARGET


def _tune(benchmark: Path, folder: Path, **options: Any) -> TuneResult:
    """Tune the benchmark with three candidates into `folder`, with its database there."""
    return tune_dispatch(
        TuneOptions(
            input_path=benchmark, target=TEST_TARGET, num_candidates=3,
            output_dir=folder / "runs", database_path=folder / "tuning.sqlite",
            show_progress=False, **FAST_RUN_OPTIONS, **options,
        )
    )  # fmt: skip


def _timings(result: TuneResult) -> set[str]:
    """Return the timing kinds of the run's measured candidates, the default's included."""
    return {r.timing for r in result.records if r.median_ms is not None}


@pytest.fixture(scope="module")
def standalone(matmul_benchmark: Path, tmp_path_factory: pytest.TempPathFactory) -> TuneResult:
    return _tune(matmul_benchmark, tmp_path_factory.mktemp("standalone"))


def test_a_standalone_run_on_the_cpu_searches_and_decides_on_real_inputs(
    standalone: TuneResult,
) -> None:
    info = json.loads((standalone.run_dir / "results.json").read_text())
    assert (info["timing_basis"], info["rule"].split("/")[-2]) == ("real-input", "real-input")
    assert _timings(standalone) == {TimingKind.HOST_PER_CALL.value}
    assert DISPATCH_BENCHMARK_DECIDES not in standalone.notes


def test_a_run_asked_to_decide_on_the_benchmark_times_it_batched_and_checks_on_real_inputs(
    standalone: TuneResult, matmul_benchmark: Path
) -> None:
    """Under the same database key as the standalone run, whose real-input timings it does not
    restore. Every candidate is confirmed and a contender (no threshold), so that each one's
    outputs are checked on its reference program, which is not timed: the benchmark decides."""
    result = _tune(
        matmul_benchmark, standalone.run_dir.parent.parent, decide_on_dispatch_benchmark=True,
        threshold=0.0, confirm_top=3, hopeless_factor=1000.0,
    )  # fmt: skip
    info = json.loads((result.run_dir / "results.json").read_text())
    assert (info["timing_basis"], info["rule"].split("/")[-2]) == ("dispatch", "dispatch")
    assert "restored_from_database" not in info
    assert _timings(result) == {TimingKind.BATCHED.value}
    contenders = sorted(int(cid) for cid in info["decision"]["judgements"])
    measured = [r.candidate_id for r in result.records if r.median_ms and not r.is_baseline]
    assert contenders == sorted(measured) and contenders
    checked = {c["candidate_id"]: c["outputs_match"] for c in info["candidates"]}
    assert {cid: checked[cid] for cid in contenders} == {cid: True for cid in contenders}
    assert sorted(p.name for p in (result.run_dir / "verify").glob("reference_*.vmfb")) == [
        f"reference_{cid}.vmfb" for cid in (0, *contenders)
    ]
    assert "real_input_timings" not in info
    assert info["decision"]["winner"] in contenders
    assert "over the default on dispatch timing" in result.summary
    assert f"note: {DISPATCH_BENCHMARK_DECIDES}" in result.summary
