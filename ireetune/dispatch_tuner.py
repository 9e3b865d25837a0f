"""Tune one dispatch end to end: problem, space, specs, compile, benchmark, verify, spec out.

The stages each live in their own module; this one only sequences them and keeps the record of
every candidate up to date on disk (results.json and candidates.csv are rewritten after every
stage, so a crash of the tuner loses nothing already learned).
"""

from __future__ import annotations

import enum
import itertools
import json
import logging
import math
import shutil
import statistics
import tempfile
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from iree.compiler import ir
from iree.compiler.dialects import iree_codegen

from ireetune import __version__
from ireetune.benchmark.campaign import (
    CampaignSettings,
    CandidateMeasurement,
    EarlierResult,
    run_campaign,
)
from ireetune.benchmark.outcomes import apply_campaign, record_measurement
from ireetune.benchmark.runner import BenchmarkJob
from ireetune.compile.pool import CompileJob, CompileStatus, compile_all, hash_binary
from ireetune.database.keys import describe_device, describe_target
from ireetune.database.store import (
    FINAL_STATUSES,
    MEASURED_STATUSES,
    ResultKey,
    StoredResult,
    TuningDatabase,
    compiler_version,
    config_key,
    default_database_path,
    now_utc,
    problem_key,
)
from ireetune.errors import IreetuneError
from ireetune.frontend.dispatches import (
    dump_dispatches,
    is_dispatch_benchmark,
    parse_module,
    read_mlir_file,
    select_dispatch,
    strip_configurations,
)
from ireetune.handoff.export import StopAfter, export_for_benchmarking
from ireetune.model.select import is_faster
from ireetune.model.timing import run_models_side_by_side
from ireetune.problem.root_op import Problem, find_root_op, parse_problem
from ireetune.report.progress import StageProgress, progress_enabled
from ireetune.report.ranking import is_real_improvement, rank_candidates
from ireetune.report.records import (
    CandidateRecord,
    CandidateStatus,
    render_csv,
    write_results,
    write_text_atomically,
)
from ireetune.run_dir import create_run_dir
from ireetune.search.candidate import Knobs
from ireetune.spec.builder import MatcherEntry, build_spec, render_spec
from ireetune.targets import parse_target
from ireetune.targets.base import Target
from ireetune.tools import find_tool, first_error_line, run_tool
from ireetune.verify.compare import compare_outputs, make_random_inputs
from ireetune.verify.landing import prove_config_landed
from ireetune.verify.reference import build_reference_module
from ireetune.verify.runner import run_reference_programs

logger = logging.getLogger(__name__)

BASELINE_SPEC_TEXT = """\
module attributes {transform.with_named_sequence} {
  transform.named_sequence @__kernel_config(%variant: !transform.any_op {transform.readonly})
      -> !transform.any_op attributes {iree_codegen.tuning_spec_entrypoint} {
    transform.yield %variant : !transform.any_op
  }
}
"""
# Disagreement between dispatch-level and model-level timing of the baseline worth reporting.
MODEL_LEVEL_DISAGREEMENT = 0.20


class CandidateOrder(enum.Enum):
    """Which candidates of the sampled pool are compiled: the heuristic's best, or random ones."""

    HEURISTIC = "heuristic"
    RANDOM = "random"


@dataclass(frozen=True)
class TuneOptions:
    """Everything a dispatch tuning run can be asked to do."""

    input_path: Path
    target: str = "cpu"
    num_candidates: int = 32
    dispatch: str | None = None
    output_dir: Path = Path("ireetune_runs")
    jobs: int = 0
    seed: int = 0
    devices: tuple[str, ...] = ()
    repetitions: int = 5
    compile_timeout_s: float = 120.0
    min_repetition_s: float = 0.05
    hopeless_factor: float = 5.0
    verify_top: int = 3
    confirm_top: int = 4
    confirm_rounds: int = 3
    model_level_rounds: int = 7
    show_progress: bool | None = None
    database_path: Path | None = None
    use_database: bool = True
    retune: bool = False
    min_benchmark_timeout_s: float = 10.0
    pipelines: tuple[str, ...] = ()
    stop_after: StopAfter | None = None
    order: CandidateOrder = CandidateOrder.HEURISTIC


@dataclass(frozen=True)
class TuneResult:
    """What a run produced; `best_spec_path` is None when nothing beat the default."""

    run_dir: Path
    problem: Problem
    records: tuple[CandidateRecord, ...]
    baseline_ms: float
    best: CandidateRecord | None
    best_spec_path: Path | None
    compile_success_rate: float
    notes: tuple[str, ...] = field(default_factory=tuple)
    reused: bool = False


@dataclass
class _RunState:
    """The mutable bookkeeping of one run: records by id, written to disk on every save."""

    run_dir: Path
    info: dict[str, Any]
    records: dict[int, CandidateRecord]
    database: TuningDatabase | None = None
    result_key: ResultKey | None = None
    session: str = ""
    compilation_infos: dict[int, str] = field(default_factory=dict)
    restored: set[int] = field(default_factory=set)

    def update(self, record: CandidateRecord) -> None:
        """Keep a record and, past generation, write it to the database at once."""
        self.records[record.candidate_id] = record
        if self.database is None or self.result_key is None:
            return
        if record.status is CandidateStatus.GENERATED or record.candidate_id in self.restored:
            return
        self.database.write(
            StoredResult(
                key=self.result_key,
                config=config_key(None if record.is_baseline else record.knobs),
                compilation_info=self.compilation_infos.get(record.candidate_id, ""),
                status=record.status.value,
                reason=record.reason,
                times_ms=record.times_ms,
                median_ms=record.median_ms,
                min_ms=record.min_ms,
                max_ms=record.max_ms,
                spread=record.spread,
                baseline_ms=self.info.get("session_baseline_ms", {}).get(record.device),
                speedup=record.speedup,
                session=self.session,
                written_at=now_utc(),
            )
        )

    def save(self) -> None:
        ordered = sorted(self.records.values(), key=lambda r: r.candidate_id)
        write_results(self.run_dir / "results.json", self.info, ordered)
        write_text_atomically(self.run_dir / "candidates.csv", render_csv(ordered))


def _resolve_benchmark_file(options: TuneOptions, target: Target, scratch: Path) -> Path:
    text = read_mlir_file(options.input_path)
    if is_dispatch_benchmark(text):
        if options.dispatch is not None:
            raise IreetuneError("--dispatch applies to models; the input is already one dispatch")
        return options.input_path
    parse_module(text, ir.Context(), options.input_path)
    dispatches = dump_dispatches(options.input_path, target, scratch / "dispatches", timeout_s=600)
    chosen = select_dispatch(dispatches, options.dispatch)
    logger.info("tuning dispatch %d: %s", chosen.index, chosen.name)
    return chosen.path


def _check_backend(module: ir.Module, target: Target) -> ir.Attribute:
    variants = iree_codegen.get_executable_variant_ops(module)
    if len(variants) != 1:
        raise IreetuneError(
            f"expected one executable variant in the dispatch, found {len(variants)}"
        )
    variant_target = variants[0].attributes["target"]
    backend = str(variant_target).split('"')[1] if '"' in str(variant_target) else ""
    if backend != target.backend:
        raise IreetuneError(
            f"the dispatch was compiled for '{backend}' but the target is '{target.name}' "
            f"({target.backend}); dump it again for this target"
        )
    return variant_target


def _generate(
    target: Target,
    problem: Problem,
    variant_target: ir.Attribute,
    default_knobs: Knobs | None,
    options: TuneOptions,
) -> list[tuple[Knobs, float | None]]:
    pool_size = max(4 * options.num_candidates, 64)
    pool = list(
        itertools.islice(
            target.generate_candidates(problem, variant_target, default_knobs, options.seed),
            pool_size,
        )
    )
    if options.order is CandidateOrder.RANDOM:
        # The sampler's own order is already a seeded random walk over the space.
        return [(knobs, None) for knobs in pool[: options.num_candidates]]
    ordered = target.order_candidates(problem, pool, options.seed)[: options.num_candidates]
    return [(knobs, score) for knobs, score in ordered]


def _compile_flags(target: Target, spec_path: Path) -> tuple[str, ...]:
    return (
        *target.compile_flags(),
        "--compile-from=executable-sources",
        *target.spec_flags(spec_path),
    )


def tune_dispatch(options: TuneOptions) -> TuneResult:
    """Tune one dispatch; see the module docstring for the stages."""
    if options.num_candidates < 1:
        raise IreetuneError("--num-candidates must be at least 1")
    target = parse_target(options.target, options.pipelines)
    context = ir.Context()
    with tempfile.TemporaryDirectory(prefix="ireetune_") as scratch_name:
        scratch = Path(scratch_name)
        benchmark_path = _resolve_benchmark_file(options, target, scratch)
        module = parse_module(read_mlir_file(benchmark_path), context, benchmark_path)
        with context:
            root_op = find_root_op(module)
            problem = parse_problem(root_op)
            variant_target = _check_backend(module, target)
            target.prepare(problem, benchmark_path, scratch / "target", context)
            default_knobs = target.parse_default_knobs(problem, root_op)
        candidates = _generate(target, problem, variant_target, default_knobs, options)
        if not candidates:
            raise IreetuneError(
                f"the search space of {problem.signature} on {target.name} is empty"
            )
        devices = list(options.devices) or [target.runtime_device]
        database = _open_database(options)
        result_key = ResultKey(
            compiler_version(),
            describe_target(target.name, str(variant_target)),
            describe_device(devices[0]),
            problem_key(problem),
            problem.signature,
        )
        stored: dict[str, StoredResult] = {}
        if database is not None:
            stored = database.lookup(result_key)
            reusable = _best_stored(stored)
            if reusable is not None and not options.retune:
                return _reuse(options, target, context, problem, reusable, result_key)
            candidates = _add_stale_results(database, result_key, candidates)
        run_dir = create_run_dir(options.output_dir, problem.signature)
        try:
            return _run(
                options,
                target,
                context,
                benchmark_path,
                root_op,
                problem,
                default_knobs,
                candidates,
                run_dir,
                database,
                result_key,
                stored,
            )
        except BaseException:
            # Whatever happened, the folder must not look like a finished run.
            marker = run_dir / "results.json"
            if marker.exists():
                data = json.loads(marker.read_text())
                data["outcome"] = "failed"
                write_text_atomically(marker, json.dumps(data, indent=2) + "\n")
            (run_dir / "best_spec.mlir").unlink(missing_ok=True)
            raise
        finally:
            if database is not None:
                database.close()


def _open_database(options: TuneOptions) -> TuningDatabase | None:
    if not options.use_database:
        return None
    return TuningDatabase(options.database_path or default_database_path())


def _best_stored(stored: dict[str, StoredResult]) -> StoredResult | None:
    verified = [r for r in stored.values() if r.status == "verified" and r.speedup]
    return max(verified, key=lambda r: r.speedup or 0.0, default=None)


def _add_stale_results(
    database: TuningDatabase, key: ResultKey, candidates: list[tuple[Knobs, float | None]]
) -> list[tuple[Knobs, float | None]]:
    """Put verified winners from other compiler versions first: they are re-measured and
    re-verified like any candidate, never applied on trust."""
    known = {knobs for knobs, _ in candidates}
    stale = []
    for result in database.lookup_stale(key):
        knobs = result.knobs
        if knobs is not None and knobs not in known:
            stale.append((knobs, None))
            known.add(knobs)
    if stale:
        logger.warning("re-verifying %d stale result(s) from other compiler versions", len(stale))
    return [*stale, *candidates]


def _reuse(
    options: TuneOptions,
    target: Target,
    context: ir.Context,
    problem: Problem,
    stored: StoredResult,
    key: ResultKey,
) -> TuneResult:
    """Write a run folder from a stored verified result instead of tuning again."""
    run_dir = create_run_dir(options.output_dir, problem.signature)
    spec = build_spec([MatcherEntry(problem, stored.compilation_info)], context)
    best_spec_path = run_dir / "best_spec.mlir"
    best_spec_path.write_text(render_spec(spec))
    record = CandidateRecord(
        1,
        stored.knobs,
        CandidateStatus.VERIFIED,
        reason=f"stored result from {stored.written_at}",
        spec_path="best_spec.mlir",
        device=key.device,
        times_ms=stored.times_ms,
        median_ms=stored.median_ms,
        min_ms=stored.min_ms,
        max_ms=stored.max_ms,
        spread=stored.spread,
        speedup=stored.speedup,
    )
    baseline = CandidateRecord(
        0,
        None,
        CandidateStatus.MEASURED,
        reason="baseline of the stored result's session",
        median_ms=stored.baseline_ms,
        speedup=1.0,
    )
    note = (
        f"reused the stored result written {stored.written_at} for {problem.signature} on this "
        "target and device; pass --retune to tune again"
    )
    info = {
        "ireetune_version": __version__,
        "outcome": "reused",
        "input": str(options.input_path),
        "target": target.name,
        "device": key.device,
        "problem": problem.signature,
        "best_candidate": 1,
        "best_speedup": stored.speedup,
        "notes": [note],
    }
    write_results(run_dir / "results.json", info, [baseline, record])
    write_text_atomically(run_dir / "candidates.csv", render_csv([baseline, record]))
    return TuneResult(
        run_dir=run_dir,
        problem=problem,
        records=(baseline, record),
        baseline_ms=stored.baseline_ms or 0.0,
        best=record,
        best_spec_path=best_spec_path,
        compile_success_rate=1.0,
        notes=(note,),
        reused=True,
    )


def _run(
    options: TuneOptions,
    target: Target,
    context: ir.Context,
    benchmark_path: Path,
    root_op: ir.Operation,
    problem: Problem,
    default_knobs: Knobs | None,
    candidates: list[tuple[Knobs, float | None]],
    run_dir: Path,
    database: TuningDatabase | None,
    result_key: ResultKey,
    stored: dict[str, StoredResult],
) -> TuneResult:
    devices = list(options.devices) or [target.runtime_device]
    for folder in ("inputs", "specs", "binaries", "failures", "verify"):
        (run_dir / folder).mkdir()
    original_path = run_dir / "inputs" / "original_benchmark.mlir"
    shutil.copyfile(benchmark_path, original_path)
    stripped_path = run_dir / "inputs" / "stripped_benchmark.mlir"
    strip_configurations(original_path, stripped_path, timeout_s=options.compile_timeout_s)

    state = _RunState(
        run_dir,
        {
            "ireetune_version": __version__,
            "outcome": "running",
            "input": str(options.input_path),
            "target": target.name,
            "devices": devices,
            "problem": problem.signature,
            "seed": options.seed,
            "num_candidates": options.num_candidates,
            "compiler_version": result_key.compiler_version,
            "database": str(database.path) if database is not None else None,
        },
        {},
        database,
        result_key,
        uuid.uuid4().hex,
    )
    state.update(
        CandidateRecord(0, default_knobs, CandidateStatus.GENERATED, spec_path="specs/0_spec.mlir")
    )
    (run_dir / "specs" / "0_spec.mlir").write_text(BASELINE_SPEC_TEXT)
    for candidate_id, (knobs, score) in enumerate(candidates, start=1):
        info = target.compilation_info(problem, knobs, context)
        spec = build_spec([MatcherEntry(problem, info)], context)
        spec_name = f"specs/{candidate_id}_spec.mlir"
        (run_dir / spec_name).write_text(render_spec(spec))
        state.compilation_infos[candidate_id] = info
        state.update(
            CandidateRecord(
                candidate_id, knobs, CandidateStatus.GENERATED, score, spec_path=spec_name
            )
        )
        previous = stored.get(config_key(knobs))
        if previous is not None and previous.status in FINAL_STATUSES:
            _restore(state, candidate_id, previous)
    if state.restored:
        state.info["restored_from_database"] = sorted(state.restored)
        logger.warning(
            "resuming: %d candidate(s) already done in the database", len(state.restored)
        )
    state.save()

    notes: list[str] = []
    with StageProgress(progress_enabled(options.show_progress)) as progress:
        _compile_stage(options, target, stripped_path, state, progress)
        baseline = state.records[0]
        if baseline.status is not CandidateStatus.COMPILED:
            raise IreetuneError(f"the default configuration does not compile: {baseline.reason}")
        _classify_binaries(state)
        _fail_if_nothing_compiled(state, notes)
        if options.stop_after is StopAfter.COMPILE:
            export_for_benchmarking(
                target, context, root_op, problem, run_dir, state.records, state.info,
                campaign_settings(options), tuple(devices), options.seed, options.verify_top,
                options.compile_timeout_s, progress,
            )  # fmt: skip
            state.save()
            return _compiled_only_result(state, problem)
        baseline_ms = _benchmark_stage(options, devices, state, progress, notes)
        ranked = rank_candidates(list(state.records.values()))
        best = _verify_stage(
            options, target, context, root_op, problem, state, ranked, progress, notes
        )

    success_rate = float(state.info["compile_success_rate"])
    state.info["baseline_ms"] = baseline_ms
    measurable = [
        r
        for r in state.records.values()
        if not r.is_baseline
        and r.status in (CandidateStatus.MEASURED, CandidateStatus.VERIFIED, CandidateStatus.WRONG)
    ]
    if not measurable:
        state.info["outcome"] = "failed"
        state.info["notes"] = notes
        state.save()
        raise IreetuneError(f"no candidate could be measured; see {run_dir}/candidates.csv")

    best_spec_path: Path | None = None
    if best is not None:
        best_spec_path = run_dir / "best_spec.mlir"
        assert best.knobs is not None
        prove_config_landed(
            target, stripped_path, run_dir / best.spec_path,
            target.compilation_info(problem, best.knobs, context), run_dir / "verify" / "best_configuration", context,
        )  # fmt: skip
        shutil.copyfile(run_dir / best.spec_path, best_spec_path)
        state.info["outcome"] = "improved"
        state.info["best_candidate"] = best.candidate_id
        state.info["best_speedup"] = best.speedup
    else:
        state.info["outcome"] = "no-improvement"
        if not any("no spec written" in note for note in notes):
            notes.append(
                "no verified candidate beat the default configuration beyond the noise; no spec written"
            )
    state.info["notes"] = notes
    state.save()
    return TuneResult(
        run_dir=run_dir,
        problem=problem,
        records=tuple(sorted(state.records.values(), key=lambda r: r.candidate_id)),
        baseline_ms=baseline_ms,
        best=best,
        best_spec_path=best_spec_path,
        compile_success_rate=success_rate,
        notes=tuple(notes),
    )


def _compiled_only_result(state: _RunState, problem: Problem) -> TuneResult:
    """Describe a run stopped after compiling: no timings, no winner yet."""
    attempts = [r for r in state.records.values() if not r.is_baseline]
    compiled = [r for r in attempts if r.status is CandidateStatus.COMPILED]
    return TuneResult(
        run_dir=state.run_dir, problem=problem,
        records=tuple(sorted(state.records.values(), key=lambda r: r.candidate_id)),
        baseline_ms=math.nan, best=None, best_spec_path=None,
        compile_success_rate=len([r for r in attempts if r.binary_hash]) / len(attempts) if attempts else 0.0,
        notes=(f"{len(compiled)} distinct candidates ready to benchmark",),
    )  # fmt: skip


def _compile_stage(
    options: TuneOptions,
    target: Target,
    stripped_path: Path,
    state: _RunState,
    progress: StageProgress,
) -> None:
    run_dir = state.run_dir
    jobs = [
        CompileJob(
            candidate_id=record.candidate_id,
            source_path=stripped_path,
            output_path=run_dir / "binaries" / f"{record.candidate_id}.vmfb",
            flags=_compile_flags(target, run_dir / record.spec_path),
            log_path=run_dir / "failures" / f"{record.candidate_id}_compile.log",
            reproducer_path=run_dir / "failures" / f"{record.candidate_id}_reproducer.mlir",
        )
        for record in sorted(state.records.values(), key=lambda r: r.candidate_id)
        if record.candidate_id not in state.restored or record.status.value in MEASURED_STATUSES
    ]
    workers = options.jobs or len(__import__("os").sched_getaffinity(0))
    with progress.stage("compiling", len(jobs)):
        for outcome in compile_all(jobs, workers, options.compile_timeout_s):
            record = state.records[outcome.candidate_id]
            if outcome.candidate_id in state.restored:
                # Measured in an earlier run: this compile only provides the binary for the
                # confirmation round and verification.
                state.records[outcome.candidate_id] = replace(
                    record,
                    binary_path=f"binaries/{outcome.candidate_id}.vmfb"
                    if outcome.status is CompileStatus.COMPILED
                    else "",
                    binary_hash=outcome.binary_hash,
                )
                progress.advance()
                continue
            status = {
                CompileStatus.COMPILED: CandidateStatus.COMPILED,
                CompileStatus.FAILED: CandidateStatus.COMPILE_FAILED,
                CompileStatus.TIMED_OUT: CandidateStatus.COMPILE_TIMED_OUT,
            }[outcome.status]
            binary = (
                f"binaries/{outcome.candidate_id}.vmfb"
                if status is CandidateStatus.COMPILED
                else ""
            )
            state.update(
                replace(
                    record,
                    status=status,
                    reason=outcome.reason,
                    binary_path=binary,
                    binary_hash=outcome.binary_hash,
                    compile_seconds=outcome.seconds,
                )
            )
            progress.advance()
    state.save()


def _restore(state: _RunState, candidate_id: int, previous: StoredResult) -> None:
    """Take a candidate's result from the database instead of measuring it again."""
    state.restored.add(candidate_id)
    status = CandidateStatus(previous.status)
    if status is CandidateStatus.VERIFIED:
        # Verification is redone in this run against this run's baseline outputs.
        status = CandidateStatus.MEASURED
    state.records[candidate_id] = replace(
        state.records[candidate_id],
        status=status,
        reason=previous.reason or f"from the database ({previous.written_at})",
        device=state.info["devices"][0],
        times_ms=previous.times_ms,
        median_ms=previous.median_ms,
        min_ms=previous.min_ms,
        max_ms=previous.max_ms,
        spread=previous.spread,
        speedup=previous.speedup,
    )


def _fail_if_nothing_compiled(state: _RunState, notes: list[str]) -> None:
    """Record the compile success rate; stop the run when no candidate compiled."""
    attempts = [r for r in state.records.values() if not r.is_baseline]
    failed = (CandidateStatus.COMPILE_FAILED, CandidateStatus.COMPILE_TIMED_OUT)
    compiled = [r for r in attempts if r.status not in failed]
    state.info["compile_success_rate"] = len(compiled) / len(attempts) if attempts else 0.0
    if not compiled:
        state.info["outcome"] = "failed"
        state.info["notes"] = notes
        state.save()
        raise IreetuneError(
            f"no candidate compiled (0 of {len(attempts)}); see {state.run_dir}/failures"
        )


def _classify_binaries(state: _RunState) -> None:
    """Mark candidates whose binary equals the baseline's (not applied) or an earlier one's."""
    baseline_hash = state.records[0].binary_hash
    seen: dict[str, int] = {baseline_hash: 0}
    for candidate_id in sorted(state.records):
        record = state.records[candidate_id]
        if candidate_id in state.restored and record.binary_hash:
            seen.setdefault(record.binary_hash, candidate_id)
            continue
        if candidate_id == 0 or record.status is not CandidateStatus.COMPILED:
            continue
        if record.binary_hash == baseline_hash:
            state.update(
                replace(
                    record,
                    status=CandidateStatus.NOT_APPLIED,
                    reason="binary identical to the baseline: config not applied",
                )
            )
        elif record.binary_hash in seen:
            state.update(
                replace(
                    record,
                    status=CandidateStatus.DUPLICATE,
                    reason=f"binary identical to candidate {seen[record.binary_hash]}",
                )
            )
        else:
            seen[record.binary_hash] = candidate_id
    state.save()


def _benchmark_stage(
    options: TuneOptions,
    devices: list[str],
    state: _RunState,
    progress: StageProgress,
    notes: list[str],
) -> float:
    """Measure the compiled candidates on every device (see benchmark/campaign.py).

    Each measurement is recorded (and written to the database) as it arrives; the final speedups
    are relative to the baseline of the candidate's own device, from the confirmation round for
    the leaders. Candidates restored from the database take part in the first device's
    confirmation round when they lead.
    """
    run_dir = state.run_dir
    ordered = sorted(state.records.values(), key=lambda r: r.candidate_id)
    jobs = [
        BenchmarkJob(r.candidate_id, run_dir / r.binary_path)
        for r in ordered
        if not r.is_baseline and r.status is CandidateStatus.COMPILED
    ]
    earlier = [
        EarlierResult(BenchmarkJob(r.candidate_id, run_dir / r.binary_path), r.speedup)
        for r in ordered
        if r.candidate_id in state.restored and r.binary_path and r.speedup and not r.stopped_early
    ]

    def record(measurement: CandidateMeasurement) -> None:
        state.update(record_measurement(state.records[measurement.candidate_id], measurement))
        state.save()
        progress.advance()

    with progress.stage("benchmarking", len(jobs)):
        result = run_campaign(
            run_dir / state.records[0].binary_path, jobs, devices, campaign_settings(options),
            on_measured=record, earlier=earlier,
        )  # fmt: skip
    notes.extend(result.notes)
    changed, baseline_ms = apply_campaign(state.records, result, state.info)
    for updated in changed:
        state.update(updated)
    state.save()
    return baseline_ms


def campaign_settings(options: TuneOptions) -> CampaignSettings:
    """Return the benchmark settings a run's options ask for."""
    return CampaignSettings(
        repetitions=options.repetitions, min_repetition_s=options.min_repetition_s,
        hopeless_factor=options.hopeless_factor, confirm_top=options.confirm_top,
        confirm_rounds=options.confirm_rounds, min_timeout_s=options.min_benchmark_timeout_s,
    )  # fmt: skip


def _verify_stage(
    options: TuneOptions,
    target: Target,
    context: ir.Context,
    root_op: ir.Operation,
    problem: Problem,
    state: _RunState,
    ranked: list[CandidateRecord],
    progress: StageProgress,
    notes: list[str],
) -> CandidateRecord | None:
    """Check the fastest candidates' outputs against the default's; return the best that passes."""
    baseline = state.records[0]
    noise = float(state.info.get("baseline_noise", 0.0))
    confirmed_ids = {cid for ids in state.info.get("confirmed", {}).values() for cid in ids}
    if target.decides_at_model_level:
        # Dispatch-level speedups on uninitialised data only pre-select here: the leading
        # candidates are all verified and then timed on real inputs, which decides.
        contenders = [r for r in ranked if not r.stopped_early][: max(options.verify_top, 6)]
    else:
        contenders = [
            r
            for r in ranked
            if r.candidate_id in confirmed_ids and is_real_improvement(r.speedup or 0.0, noise)
        ][: options.verify_top]
    verify_dir = state.run_dir / "verify"
    reference_path = verify_dir / "reference.mlir"
    reference_path.write_text(str(build_reference_module(root_op, context)))
    shapes = [problem.lhs_shape, problem.rhs_shape]
    inputs = make_random_inputs(shapes, [problem.lhs_type, problem.rhs_type], seed=options.seed)
    inputs_path = verify_dir / "inputs.npz"
    np.savez(inputs_path, **{f"arg{i}": array for i, array in enumerate(inputs)})  # type: ignore[arg-type]
    to_build = [baseline, *contenders]
    with progress.stage("verifying", len(to_build)):
        hashes: dict[int, str] = {}
        for record in to_build:
            binary = verify_dir / f"reference_{record.candidate_id}.vmfb"
            result = run_tool(
                [
                    find_tool("iree-compile"),
                    str(reference_path),
                    *target.compile_flags(),
                    *target.spec_flags(state.run_dir / record.spec_path),
                    "-o",
                    str(binary),
                ],
                timeout_s=options.compile_timeout_s,
            )
            if result.returncode != 0:
                if record.is_baseline:
                    raise IreetuneError(
                        f"the reference program does not compile: {first_error_line(result.stderr)}"
                    )
                state.update(
                    replace(
                        record,
                        status=CandidateStatus.WRONG,
                        reason=f"reference program failed to compile: {first_error_line(result.stderr)}",
                    )
                )
                continue
            hashes[record.candidate_id] = hash_binary(binary)
        outputs = run_reference_programs(
            [
                (cid, verify_dir / f"reference_{cid}.vmfb", verify_dir / f"output_{cid}.npy")
                for cid in hashes
            ],
            device=baseline.device or target.runtime_device,
            inputs_path=inputs_path,
        )
        progress.advance(len(to_build))
    baseline_run = outputs.get(0)
    if baseline_run is None or baseline_run.output is None:
        raise IreetuneError("the default configuration's reference program failed to run")
    if baseline_run.median_ms is not None and state.records[0].median_ms:
        dispatch_ms = state.records[0].median_ms
        model_ms = baseline_run.median_ms
        state.info["model_level_baseline_ms"] = model_ms
        state.info["dispatch_level_baseline_ms"] = dispatch_ms
        if abs(model_ms - dispatch_ms) / dispatch_ms > MODEL_LEVEL_DISAGREEMENT:
            notes.append(
                f"baseline dispatch-level time {dispatch_ms:.4g} ms and model-level time {model_ms:.4g} ms "
                f"(same op on real inputs, including call overhead) differ by more than {MODEL_LEVEL_DISAGREEMENT:.0%}"
            )
    reduction = 1
    for size in problem.k_sizes:
        reduction *= size
    best: CandidateRecord | None = None
    for record in contenders:
        record = state.records[record.candidate_id]
        if record.status is CandidateStatus.WRONG:
            continue
        if hashes.get(record.candidate_id) == hashes.get(0):
            state.update(
                replace(record, reason="unverified: config did not change the reference program")
            )
            continue
        run = outputs.get(record.candidate_id)
        if run is None or run.output is None:
            state.update(
                replace(
                    record,
                    status=CandidateStatus.WRONG,
                    reason=f"reference program failed: {run.reason if run else 'no result'}",
                )
            )
            continue
        comparison = compare_outputs(
            baseline_run.output, run.output, problem.output_type, reduction
        )
        if comparison.matches:
            state.update(
                replace(
                    record, status=CandidateStatus.VERIFIED, max_abs_error=comparison.max_abs_error
                )
            )
            if best is None:
                best = state.records[record.candidate_id]
        else:
            state.update(
                replace(
                    record,
                    status=CandidateStatus.WRONG,
                    max_abs_error=comparison.max_abs_error,
                    reason=f"outputs differ from the default's: {comparison.mismatched} of {comparison.total} elements",
                )
            )
    if target.decides_at_model_level and best is not None:
        best = _decide_at_model_level(options, state, verify_dir, inputs_path, notes)
    state.save()
    return best


def _decide_at_model_level(
    options: TuneOptions, state: _RunState, verify_dir: Path, inputs_path: Path, notes: list[str]
) -> CandidateRecord | None:
    """Time the verified candidates' reference programs on real inputs, interleaved with the
    default's, and keep the fastest only if it beats the default there too.

    Dispatch benchmarks run on uninitialised buffers; on the CPU that can make a configuration
    look much faster or slower than on real data (denormals), so there the real-input timing
    decides.
    """
    verified = sorted(
        (r for r in state.records.values() if r.status is CandidateStatus.VERIFIED),
        key=lambda r: r.candidate_id,
    )
    models = [("0", verify_dir / "reference_0.vmfb")] + [
        (str(r.candidate_id), verify_dir / f"reference_{r.candidate_id}.vmfb") for r in verified
    ]
    device = state.records[0].device or state.info["devices"][0]
    runs = run_models_side_by_side(
        models, "main", inputs_path, verify_dir, device, options.model_level_rounds, repetitions=3
    )
    if not runs["0"].ok:
        notes.append(
            f"model-level check skipped: the default's program failed ({runs['0'].reason})"
        )
        return None
    baseline_times = runs["0"].times_ms
    baseline_ms = statistics.median(baseline_times)
    results: dict[str, dict[str, float | bool]] = {}
    best: CandidateRecord | None = None
    best_speedup = 0.0
    for record in verified:
        run = runs[str(record.candidate_id)]
        if not run.ok:
            continue
        median_ms = statistics.median(run.times_ms)
        faster = is_faster(baseline_times, run.times_ms)
        results[str(record.candidate_id)] = {
            "median_ms": median_ms, "speedup": baseline_ms / median_ms, "faster": faster,
        }  # fmt: skip
        if faster and baseline_ms / median_ms > best_speedup:
            best, best_speedup = record, baseline_ms / median_ms
    state.info["model_level"] = {"baseline_ms": baseline_ms, "candidates": results}
    if best is None:
        notes.append(
            "verified candidates were faster at dispatch level (uninitialised data) but not on real "
            "inputs, timed side by side with the default; no spec written"
        )
        return None
    state.info["model_level_speedup"] = best_speedup
    best_ms = float(results[str(best.candidate_id)]["median_ms"])
    notes.append(
        f"on real inputs, timed side by side: default {baseline_ms:.4g} ms, candidate "
        f"{best.candidate_id} {best_ms:.4g} ms ({best_speedup:.3f}x); the table's dispatch-level "
        "times use uninitialised buffers"
    )
    return best
