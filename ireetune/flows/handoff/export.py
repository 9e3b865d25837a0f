"""Finish the compile step of a split run: reference programs, random inputs and the manifest."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from ireetune.compile.driver import CompileStatus, build_request
from ireetune.compile.pool import CompileBatch, CompileJob, default_jobs
from ireetune.core.records import CandidateRecord, CandidateStatus
from ireetune.flows.dispatch.options import References
from ireetune.flows.handoff.manifest import (
    FolderCandidate,
    Manifest,
    VerifySettings,
    write_manifest,
)
from ireetune.problem.registry import family_of
from ireetune.report.result import TuneResult
from ireetune.verify.reference import build_reference_module

if TYPE_CHECKING:
    from ireetune.flows.dispatch.state import DispatchRun


def export_stage(run: DispatchRun) -> None:
    """Stop after compiling: write the folder another host benchmarks, and the run's result (no
    timings, no winner yet). `measure` (on the device host) and `continue` carry the run on
    from there (flows/continue_folder.py)."""
    export_for_benchmarking(run)
    recorder = run.recorder
    recorder.info["notes"] = run.notes
    attempts = [r for r in recorder.records.values() if not r.is_baseline]
    compiled = [r for r in attempts if r.status is CandidateStatus.COMPILED]
    run.result = TuneResult(
        run_dir=recorder.run_dir, problem=run.problem, records=tuple(recorder.ordered()),
        baseline_ms=math.nan, best=None, best_spec_path=None,
        compile_success_rate=len([r for r in attempts if r.binary_hash]) / len(attempts) if attempts else 0.0,
        notes=(*run.notes, f"{len(compiled)} distinct candidates ready to benchmark"),
    )  # fmt: skip


def export_for_benchmarking(run: DispatchRun) -> Path:
    """Write the folder's manifest and, with References.ALL, every distinct candidate's
    reference program (compiled on the run's executor).

    Which candidates win is only known after benchmarking elsewhere: the reference program (the
    root op on real inputs, see verify/reference.py) is compiled for each of them now, or with
    References.LEADERS for the leaders only, by `continue` after the benchmarking side chose them
    (flows/handoff/references.py). The random inputs are not written: the benchmarking side draws
    them from the same seed.
    """
    target, problem, run_dir, records = run.target, run.problem, run.run_dir, run.recorder.records
    options, rule, settings = run.options, run.rule, run.campaign_settings
    references = options.references
    verify_dir = run_dir / "verify"
    verify_dir.mkdir(exist_ok=True)
    reference_path = verify_dir / "reference.mlir"
    reference_path.write_text(
        str(build_reference_module(run.dispatch.root_op, run.context, problem))
    )

    to_measure = [
        r for r in records.values() if r.is_baseline or r.status is CandidateStatus.COMPILED
    ]
    deferred = references is References.LEADERS
    jobs = [
        CompileJob(
            candidate_id=record.candidate_id,
            request=build_request(
                target,
                reference_path,
                verify_dir / f"reference_{record.candidate_id}.vmfb",
                spec_path=run_dir / record.spec_path,
                reproducer_path=run_dir
                / "failures"
                / f"{record.candidate_id}_reference_reproducer.mlir",
            ),
            log_path=run_dir / "failures" / f"{record.candidate_id}_reference_compile.log",
        )
        for record in sorted(to_measure, key=lambda r: r.candidate_id)
        if not deferred
    ]
    hashes: dict[int, str] = {}
    batch = CompileBatch(jobs, default_jobs(), options.compile_timeout_s)
    with run.progress.stage("compiling reference programs", len(jobs)):
        for outcome in run.executor.compile(batch):
            if outcome.status is CompileStatus.COMPILED:
                hashes[outcome.candidate_id] = outcome.binary_hash
            run.progress.advance()

    def entry(record: CandidateRecord) -> FolderCandidate:
        compiled = record.candidate_id in hashes
        return FolderCandidate(
            record.candidate_id,
            record.binary_path,
            f"verify/reference_{record.candidate_id}.vmfb" if compiled else "",
            hashes.get(record.candidate_id, ""),
        )

    arguments = family_of(problem).reference_inputs(problem)
    manifest = Manifest(
        problem=problem.signature,
        target=target.name,
        devices=tuple(run.devices),
        repetitions=settings.repetitions,
        min_repetition_s=settings.min_repetition_s,
        hopeless_factor=settings.hopeless_factor,
        confirm_top=settings.confirm_top,
        confirm_rounds=settings.confirm_rounds,
        baseline=entry(records[0]),
        candidates=tuple(
            entry(r) for r in sorted(to_measure, key=lambda r: r.candidate_id) if not r.is_baseline
        ),
        verify=VerifySettings(
            options.seed,
            arguments.shapes,
            arguments.types,
            arguments.output_type,
            arguments.reduction_size,
            options.verify_top,
        ),
        benchmark_timeout_s=settings.min_timeout_s,
        threshold=rule.threshold,
        real_input_decides=rule.real_input_decides,
        real_input_rounds=options.model_level_rounds,
        global_flags=target.global_flags,
        references_deferred=deferred,
    )
    run.recorder.info["outcome"] = "compiled"
    run.recorder.info["references"] = references.value
    return write_manifest(run_dir, manifest)
