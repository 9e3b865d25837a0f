"""Compiling and measuring at once, with the real iree-compile and the real worker."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from ireetune.benchmark.campaign import CampaignSettings, CandidateMeasurement
from ireetune.benchmark.runner import BenchmarkJob, BenchmarkStatus
from ireetune.compile.driver import CompileRequest
from ireetune.compile.overlap import MeasurePlan, Timeline, compile_and_measure
from ireetune.compile.pool import CompileBatch, CompileJob, default_jobs
from ireetune.core.records import CandidateRecord, CandidateStatus
from ireetune.executor import LocalExecutor
from ireetune.report.progress import StageProgress
from ireetune.report.recorder import RunRecorder
from tests.conftest import CPU_FLAGS, FAST_RUN_OPTIONS

SOURCES = 9


def _setup(matmul_benchmark: Path, run_dir: Path) -> tuple[RunRecorder, list[CompileJob]]:
    """Candidates whose binaries differ only by their source's name (locations are embedded),
    and one exact copy of the baseline's source (its binary duplicates the baseline's)."""
    for folder in ("sources", "binaries", "failures"):
        (run_dir / folder).mkdir(parents=True)
    jobs = []
    records = {}
    for candidate_id in range(SOURCES):
        name = "0" if candidate_id == SOURCES - 1 else str(candidate_id)
        folder = run_dir / "sources" / str(candidate_id)
        folder.mkdir()
        source = folder / f"dispatch_{name}.mlir"
        shutil.copyfile(matmul_benchmark, source)
        jobs.append(
            CompileJob(
                candidate_id,
                CompileRequest(
                    source, run_dir / "binaries" / f"{candidate_id}.vmfb", tuple(CPU_FLAGS),
                    ("--compile-from=executable-sources",),
                    reproducer_path=run_dir / "failures" / f"{candidate_id}_reproducer.mlir",
                ),
                run_dir / "failures" / f"{candidate_id}.log",
            )
        )  # fmt: skip
        records[candidate_id] = CandidateRecord(candidate_id, None, CandidateStatus.GENERATED)
    # Same name, other folder: the last candidate's binary equals the baseline's.
    jobs[-1] = replace(
        jobs[-1],
        request=replace(
            jobs[-1].request, source_path=run_dir / "sources" / "0" / "dispatch_0.mlir"
        ),
    )
    return RunRecorder(run_dir, {}, records), jobs


def test_measuring_starts_before_the_last_compile_ends(
    matmul_benchmark: Path, tmp_path: Path
) -> None:
    recorder, jobs = _setup(matmul_benchmark, tmp_path)
    timeline = Timeline()
    seen: list[CandidateMeasurement] = []

    def make_job(record: CandidateRecord) -> BenchmarkJob:
        return BenchmarkJob(record.candidate_id, tmp_path / record.binary_path)

    def on_measured(measurement: CandidateMeasurement) -> None:
        seen.append(measurement)
        assert recorder.records[measurement.candidate_id].status is CandidateStatus.COMPILED

    result = compile_and_measure(
        LocalExecutor(), recorder, CompileBatch(jobs, 1, 120.0), MeasurePlan(make_job, ["local-task"],
        CampaignSettings(**FAST_RUN_OPTIONS),
        on_measured), StageProgress(False), timeline=timeline,
    )  # fmt: skip
    # One compile at a time: the first candidates were measured while later ones compiled.
    assert min(timeline.measured_at.values()) < max(timeline.compiled_at.values())
    distinct = list(range(1, SOURCES - 1))
    assert sorted(m.candidate_id for m in seen) == distinct
    assert sorted(result.candidates) == distinct
    assert all(m.status is BenchmarkStatus.MEASURED for m in result.candidates.values())
    assert recorder.records[SOURCES - 1].status is CandidateStatus.NOT_APPLIED
    assert result.baselines["local-task"].confirmed_ms


def test_compile_jobs_default_to_the_cores_this_process_may_use() -> None:
    import os

    assert default_jobs() == len(os.sched_getaffinity(0))
