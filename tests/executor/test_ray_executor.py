"""The Ray executor on a real local Ray cluster (2 CPUs): the same run as the local executor,
and a run that completes although Ray workers and the measuring actor are killed under it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import ray

from ireetune.benchmark.runner import (
    BenchmarkJob,
    BenchmarkSession,
    BenchmarkStatus,
    JobDeadlines,
    JobFeed,
)
from ireetune.compile.driver import CompileStatus, build_request
from ireetune.compile.pool import CompileBatch, CompileJob
from ireetune.core.records import TIMED_STATUSES, CandidateStatus
from ireetune.executor import ExecutorKind, RaySettings
from ireetune.executor.ray_executor import FAULT_VARIABLE, RayExecutor
from ireetune.flows.dispatch.options import StopAfter
from ireetune.flows.dispatch.tuner import TuneOptions, TuneResult, tune_dispatch
from ireetune.targets import parse_target
from tests.conftest import FAST_RUN_OPTIONS, MATMUL_MODEL, REPOSITORY


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    # One cluster for the module: Ray takes seconds to start. The executor finds it running and
    # leaves it running.
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ray_model") / "matmul.mlir"
    path.write_text(MATMUL_MODEL)
    return path


@pytest.fixture(scope="module")
def compiled_here(model: Path, tmp_path_factory: pytest.TempPathFactory) -> TuneResult:
    """The candidates compiled by the local executor (a `--stop-after compile` run)."""
    folder = tmp_path_factory.mktemp("compiled_here")
    return _tune(model, folder, ExecutorKind.LOCAL, stop_after=StopAfter.COMPILE)


def _tune(model: Path, output_dir: Path, executor: ExecutorKind, **changes: object) -> TuneResult:
    options = TuneOptions(
        input_path=model, target="cpu", num_candidates=3, output_dir=output_dir, seed=7,
        **FAST_RUN_OPTIONS, confirm_top=2,
        model_level_rounds=2, use_database=False, show_progress=False, executor=executor,
    )  # fmt: skip
    return tune_dispatch(replace(options, **changes))  # type: ignore[arg-type]


# The outcomes of the compile stage: failed, timed out, identical to the baseline, a duplicate.
COMPILE_OUTCOMES = (
    CandidateStatus.COMPILE_FAILED,
    CandidateStatus.COMPILE_TIMED_OUT,
    CandidateStatus.NOT_APPLIED,
    CandidateStatus.DUPLICATE,
)


def _compile_facts(result: TuneResult) -> list[tuple[int, str, str]]:
    """Each candidate's id, configuration and compile outcome (not its timing; not its binary's
    hash, which embeds the path the source was compiled from)."""
    return [
        (
            r.candidate_id,
            json.dumps(r.knobs, sort_keys=True, default=str) if r.knobs is not None else "",
            r.status.value if r.status in COMPILE_OUTCOMES else "compiled",
        )
        for r in result.records
    ]


def _measuring_folders() -> set[Path]:
    """The measuring actors' folders on this node (the local cluster's actors share its
    temporary folder)."""
    return set(Path(tempfile.gettempdir()).glob("ireetune_ray_measure_*"))


def test_a_ray_run_equals_a_local_run(ray_cluster: None, model: Path, tmp_path: Path) -> None:
    before = _measuring_folders()
    local = _tune(model, tmp_path / "local", ExecutorKind.LOCAL)
    on_ray = _tune(model, tmp_path / "ray", ExecutorKind.RAY)
    # The binaries and inputs shipped to the measuring actor went with the run.
    assert _measuring_folders() == before
    assert _compile_facts(on_ray) == _compile_facts(local)
    # Every candidate that compiled was measured and checked on Ray as it was locally.
    timed = {r.status for r in on_ray.records if r.status not in COMPILE_OUTCOMES}
    assert timed <= TIMED_STATUSES
    assert on_ray.baseline_ms > 0
    # The same run folder: the same files, with the binaries the driver wrote from Ray's bytes.
    files = [sorted(p.relative_to(r.run_dir) for p in r.run_dir.rglob("*.vmfb")) for r in (local, on_ray)]  # fmt: skip
    assert files[0] == files[1] and files[1]


def test_ray_compiles_of_one_source_compare_by_hash(
    ray_cluster: None, compiled_here: TuneResult, tmp_path: Path
) -> None:
    # Tasks on any worker compile a source from one path, so equal inputs give equal binaries
    # (the binary embeds the path), and the baseline check and duplicate check keep working.
    run_dir = compiled_here.run_dir
    jobs = [
        CompileJob(
            index,
            build_request(
                parse_target("cpu"),
                run_dir / "inputs" / "stripped_benchmark.mlir",
                tmp_path / f"{index}.vmfb",
                phase_flags=("--compile-from=executable-sources",),
                spec_path=run_dir / "specs" / f"{spec}_spec.mlir",
            ),
            tmp_path / f"{index}.log",
        )  # fmt: skip
        for index, spec in enumerate((0, 1, 0, 1))
    ]
    executor = RayExecutor(RaySettings())
    try:
        outcomes = sorted(
            executor.compile(CompileBatch(jobs, 2, 120.0)), key=lambda o: o.candidate_id
        )
    finally:
        executor.close()
    hashes = [o.binary_hash for o in outcomes]
    assert [o.status for o in outcomes] == [CompileStatus.COMPILED] * 4
    assert hashes[0] == hashes[2] != hashes[1] == hashes[3]
    assert [(tmp_path / f"{i}.vmfb").read_bytes() for i in (0, 2)] == 2 * [
        (tmp_path / "0.vmfb").read_bytes()
    ]


def test_a_killed_compile_worker_is_retried_and_the_run_completes(
    ray_cluster: None,
    model: Path,
    compiled_here: TuneResult,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    marker = tmp_path / "killed"
    monkeypatch.setenv(FAULT_VARIABLE, json.dumps({"compile": "2_spec.mlir", "marker": str(marker)}))  # fmt: skip
    on_ray = _tune(model, tmp_path / "ray", ExecutorKind.RAY, stop_after=StopAfter.COMPILE)
    assert marker.exists()
    assert _compile_facts(on_ray) == _compile_facts(compiled_here)


def test_a_compile_lost_on_every_try_is_recorded_and_the_run_goes_on(
    ray_cluster: None, model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FAULT_VARIABLE, json.dumps({"compile": "2_spec.mlir"}))
    result = _tune(
        model, tmp_path / "ray", ExecutorKind.RAY, stop_after=StopAfter.COMPILE,
        ray=RaySettings(compile_retries=1),
    )  # fmt: skip
    lost = result.records[2]
    assert lost.status is CandidateStatus.COMPILE_FAILED
    assert lost.reason.startswith("lost on the Ray cluster (WorkerCrashedError)")
    assert (result.run_dir / "failures" / "2_compile.log").exists()
    others = [r.status for r in result.records if r.candidate_id != 2]
    assert CandidateStatus.COMPILE_FAILED not in others


def _measuring_actor_pid(executor: RayExecutor) -> int:
    """Return the process of the local-task measuring actor (starting it if needed)."""
    return int(executor.ray.get(executor._actor("local-task").node_pid.remote())[1])


def test_a_killed_measuring_actor_is_restarted_and_measures_the_rest(
    ray_cluster: None, compiled_here: TuneResult, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiled = compiled_here
    binaries = [r for r in compiled.records if r.binary_path]
    jobs = [BenchmarkJob(r.candidate_id, compiled.run_dir / r.binary_path) for r in binaries]
    victim = jobs[1].candidate_id
    marker = tmp_path / "killed"
    monkeypatch.setenv(FAULT_VARIABLE, json.dumps({"measure": victim, "marker": str(marker)}))
    before = _measuring_folders()
    executor = RayExecutor(RaySettings())
    try:
        first_pid = _measuring_actor_pid(executor)
        outcomes = list(executor.run_benchmarks(BenchmarkSession(jobs, "local-task", 2, 1, 60.0)))
        second_pid = _measuring_actor_pid(executor)
    finally:
        executor.close()
    assert marker.exists() and first_pid != second_pid
    # Neither the dead actor's files nor its successor's stay behind.
    assert _measuring_folders() == before
    assert [o.candidate_id for o in outcomes] == [j.candidate_id for j in jobs]
    assert {o.status for o in outcomes} == {BenchmarkStatus.MEASURED}
    assert {o.device for o in outcomes} == {"local-task"}


def test_a_session_fed_while_it_runs_keeps_what_the_baseline_taught(
    ray_cluster: None, compiled_here: TuneResult
) -> None:
    # A benchmark session's jobs arrive as it runs (the campaign's JobFeed): the actor gets them
    # in chunks, and the later chunks time with the baseline's screened batch, while a
    # confirmation job keeps its own batch.
    compiled = compiled_here
    binaries = [r for r in compiled.records if r.binary_path]
    jobs = [BenchmarkJob(r.candidate_id, compiled.run_dir / r.binary_path) for r in binaries]
    feed = JobFeed([jobs[0]])
    executor = RayExecutor(RaySettings())
    try:
        outcomes = executor.run_benchmarks(
            BenchmarkSession(
                feed, "local-task", 2, 0, 60.0, min_repetition_s=0.01,
                timeout_after_first=lambda first: JobDeadlines(60.0, 60.0, 1.0, 2, 5.0),
                screen_fraction=0.5,
            )
        )  # fmt: skip
        baseline = next(outcomes)
        for job in jobs[1:]:
            feed.add(job)
        feed.add(replace(jobs[0], batch=3, early_stop=False))
        feed.close()
        rest = list(outcomes)
    finally:
        executor.close()
    assert baseline.status is BenchmarkStatus.MEASURED
    assert [o.candidate_id for o in rest] == [j.candidate_id for j in jobs[1:]] + [0]
    assert {o.status for o in rest} == {BenchmarkStatus.MEASURED}
    screened = max(1, baseline.batch // 2)
    assert [o.batch for o in rest] == [screened] * (len(jobs) - 1) + [3]


def test_without_ray_the_command_says_how_to_install_it(model: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\n"
        "class _NoRay:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'ray' or name.startswith('ray.'):\n"
        "            raise ImportError('no ray here')\n"
        "sys.meta_path.insert(0, _NoRay())\n"
    )
    repository = REPOSITORY
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker), str(repository)])}
    completed = subprocess.run(
        [sys.executable, "-m", "ireetune.cli", "tune-dispatch", str(model), "--executor", "ray",
         "--no-db", "--output-dir", str(tmp_path / "runs")],
        env=environment, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert completed.returncode != 0
    assert (
        completed.stderr.strip()
        .splitlines()[-1]
        .endswith("--executor ray needs Ray: pip install 'ireetune[ray]' (or pip install ray)")
    )
    assert "Traceback" not in completed.stderr


def test_ray_options_need_the_ray_executor(model: Path, tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "ireetune.cli", "tune-dispatch", str(model), "--ray-address",
         "auto", "--no-db", "--output-dir", str(tmp_path / "runs")],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert completed.returncode != 0
    assert "--ray-address and --ray-*-resource need --executor ray" in completed.stderr
    assert "Traceback" not in completed.stderr
