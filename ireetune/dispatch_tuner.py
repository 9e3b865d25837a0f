"""Tune one dispatch end to end: problem, space, specs, compile, benchmark, check, decide, spec.

This module loads the dispatch, generates and orders its candidates, reuses a stored winner or
starts the run folder, then hands the run (dispatch_run/state.py) through its stages
(dispatch_run/stages.py), each a function of the run, saved after every one:

    load the dispatch           frontend/dispatches.py
    generate and order          targets/<target>/ (search space, ordering)
    reuse or resume             report/reuse.py
    specs                       spec/builder.py
    compile                     compile/stage.py
    measure                     benchmark/campaign.py, benchmark/outcomes.py
    check outputs, real inputs  verify/stage.py
    decide                      dispatch_run/decide.py over decision/ (the one rule every flow calls)
    record                      report/recorder.py (results.json, candidates.csv, database)
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import shutil
import tempfile
import uuid
from dataclasses import replace
from pathlib import Path

from iree.compiler import ir

from ireetune import __version__
from ireetune.compile.pool import default_jobs
from ireetune.core.candidate import Knobs
from ireetune.core.files import write_text_atomically
from ireetune.core.records import CandidateRecord, CandidateStatus
from ireetune.core.target import OpConfiguration, Target
from ireetune.database.keys import describe_device, describe_target
from ireetune.database.store import (
    ResultKey,
    StoredResult,
    TuningDatabase,
    compiler_version,
    default_database_path,
    problem_key,
)
from ireetune.decision.rules import (
    DecisionRule,
)
from ireetune.decision.stats import Basis
from ireetune.dispatch_options import CandidateOrder, StopAfter, TuneOptions
from ireetune.dispatch_run.stages import (
    check_stage,
    compile_stage,
    decide_stage,
    measure_stage,
    specs_stage,
)
from ireetune.dispatch_run.state import DispatchRun, Stage, campaign_settings, run_stages, save_run
from ireetune.errors import IreetuneError
from ireetune.executor import Executor, open_executor
from ireetune.flags.check import check_flags_with_compiler
from ireetune.flags.dispatch_search import DispatchFlagSearch, search_flags_for_input
from ireetune.flags.file import FLAGS_FILE_NAME, write_flags_file
from ireetune.flags.trials import FlagSearchResult, trial_row
from ireetune.frontend.load import LoadedDispatch, load_dispatch
from ireetune.handoff.export import export_for_benchmarking
from ireetune.problem.registry import family_of
from ireetune.problem.root_op import Problem
from ireetune.report.progress import StageProgress, progress_enabled
from ireetune.report.recorder import RunRecorder
from ireetune.report.result import TuneResult
from ireetune.report.reuse import (
    find_reusable,
    stale_candidates,
)
from ireetune.report.summary import SummaryHeading, render_summary
from ireetune.run_dir import check_output_dir, create_run_dir
from ireetune.search.learned_order import OnlineSearch, order_pool, plan_rounds
from ireetune.spec.builder import build_configuration_spec
from ireetune.targets import parse_target
from ireetune.verify.compare import check_inputs

logger = logging.getLogger(__name__)


def decision_rule(target: Target, options: TuneOptions) -> DecisionRule:
    """Return the rule this target's verdicts are reached (and reused) under."""
    return DecisionRule(
        threshold=options.threshold, real_input_decides=target.decides_at_model_level
    )


def tune_dispatch(options: TuneOptions, executor: Executor | None = None) -> TuneResult:
    """Tune one dispatch; see the module docstring for the stages.

    Compiles and measurements run on `executor` when a flow that runs several dispatches hands
    in its own; else on the one `options` choose, started for this run and closed after it.
    """
    if options.num_candidates < 1:
        raise IreetuneError("--num-candidates must be at least 1")
    check_output_dir(options.output_dir)
    if executor is not None:
        return _tune_dispatch(options, executor)
    with open_executor(options.executor, options.ray) as own:
        return _tune_dispatch(options, own)


def _tune_dispatch(options: TuneOptions, executor: Executor) -> TuneResult:
    target = parse_target(options.target, options.pipelines).with_global_flags(options.extra_flags)
    check_flags_with_compiler(options.extra_flags, target, "--flags")
    if not options.search_flags:
        return _tune(options, target, executor)
    output_existed = options.output_dir.exists()
    flags_dir = create_run_dir(options.output_dir, f"flags_{options.input_path.stem}")
    try:
        flag_search = search_flags_for_input(
            executor, options.input_path,
            DispatchFlagSearch(
                target, options.threshold, campaign_settings(options),
                options.jobs or default_jobs(), options.compile_timeout_s, options.seed,
                options.model_level_rounds,
            ),
            flags_dir,
        )  # fmt: skip
    except BaseException:
        # A search refused before it wrote anything (inputs no one can make) leaves no folder.
        if not any(flags_dir.iterdir()):
            flags_dir.rmdir()
            if not output_existed and not any(options.output_dir.iterdir()):
                options.output_dir.rmdir()
        raise
    target = target.with_global_flags((*options.extra_flags, *flag_search.winner.flags))
    return _attach_flag_search(_tune(options, target, executor), flag_search)


def _tune(options: TuneOptions, target: Target, executor: Executor) -> TuneResult:
    """Tune one dispatch for a target that carries every global flag of the run."""
    if options.use_database:
        # What is slow to read again (a GPU space) is kept beside the database.
        target.use_cache_folder(
            (options.database_path or default_database_path()).parent / "spaces"
        )
    context = ir.Context()
    with tempfile.TemporaryDirectory(prefix="ireetune_") as scratch_name:
        dispatch = load_dispatch(
            options.input_path, options.dispatch, target, Path(scratch_name), context
        )
        # Refuse what the output check cannot make inputs for before any work or run folder.
        reference_inputs = family_of(dispatch.problem).reference_inputs(dispatch.problem)
        check_inputs(reference_inputs.shapes, reference_inputs.types, "the dispatch's inputs")
        devices = list(options.devices) or [target.runtime_device]
        rule = decision_rule(target, options)
        database = (
            None
            if not options.use_database
            else TuningDatabase(options.database_path or default_database_path())
        )
        # Results under global flags are keyed apart: the same config may compile differently.
        variant_key = str(dispatch.variant_target) + "".join(f" {f}" for f in target.global_flags)
        candidates, ordering, search = _generate(target, dispatch, options, database)
        result_key = ResultKey(
            compiler_version(), describe_target(target.name, variant_key),
            describe_device(devices[0]), problem_key(dispatch.problem), dispatch.problem.signature,
        )  # fmt: skip
        stored: dict[str, StoredResult] = {}
        try:
            if database is not None:
                stored = database.lookup(result_key)
                reusable = find_reusable(stored, rule.name)
                if reusable is not None and not options.retune and options.stop_after is None:
                    return _reuse(options, target, context, dispatch.problem, reusable, result_key)
                candidates = stale_candidates(database, result_key, candidates)
            run_dir = create_run_dir(options.output_dir, dispatch.problem.signature)
            run = DispatchRun(
                executor, options, target, context, dispatch, devices, rule, database, result_key,
                stored, search, workers=options.jobs or default_jobs(),
            )  # fmt: skip
            try:
                return _run(run, run_dir, candidates, ordering)
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


def _attach_flag_search(result: TuneResult, flag_search: FlagSearchResult) -> TuneResult:
    """Record the flag search that chose the run's global flags in its results and summary."""
    verdict = (
        f"kept {flag_search.winner.label}: {flag_search.estimate.describe()} over default flags"
        if flag_search.estimate is not None
        else "no flag set beat the default flags by the rule; defaults kept"
    )
    line = f"flag search: {verdict} (trials: {flag_search.trials_path})"
    results_path = result.run_dir / "results.json"
    if results_path.exists():
        data = json.loads(results_path.read_text())
        data["flag_search"] = {
            "winner": list(flag_search.winner.flags), "rule": flag_search.rule.name,
            "trials_file": str(flag_search.trials_path),
            "trials": [trial_row(t) for t in flag_search.trials],
        }  # fmt: skip
        write_text_atomically(results_path, json.dumps(data, indent=2) + "\n")
    summary = result.summary + line + "\n"
    write_text_atomically(result.run_dir / "summary.txt", summary)
    return replace(result, notes=(*result.notes, line), summary=summary)


def _generate(
    target: Target, dispatch: LoadedDispatch, options: TuneOptions, database: TuningDatabase | None
) -> tuple[list[tuple[Knobs, float | None]], str, OnlineSearch | None]:
    """Draw the pool and keep the N candidates the chosen order puts first; say how it ordered.

    With a learned model (and `online`), only the first round is chosen here; the online search
    returned picks the later rounds from the rest of the pool as measurements arrive.
    """
    pool_size = max(4 * options.num_candidates, 64)
    try:
        pool = list(
            itertools.islice(
                target.generate_candidates(
                    dispatch.problem, dispatch.variant_target, dispatch.default_knobs, options.seed
                ),
                pool_size,
            )
        )
    except IreetuneError:
        raise
    except Exception as error:
        # A space that cannot be built is this dispatch's failure, with its reason: a model run
        # records it and goes on with the other dispatches.
        raise IreetuneError(
            f"the search space of {dispatch.problem.signature} on {target.name} could not be "
            f"built: {type(error).__name__}: {' '.join(str(error).split())}"
        ) from error
    if not pool:
        raise IreetuneError(
            f"the search space of {dispatch.problem.signature} on {target.name} is empty"
        )
    if options.order is CandidateOrder.RANDOM:
        # The sampler's own order is already a seeded random walk over the space.
        return [(knobs, None) for knobs in pool[: options.num_candidates]], "random", None
    ordered, ordering, model = order_pool(
        target, dispatch.problem, str(dispatch.variant_target), pool, options.seed, database,
        options.order.value,
    )  # fmt: skip
    rounds = plan_rounds(min(options.num_candidates, len(ordered)))
    if model is not None and options.online and len(rounds) > 1 and options.stop_after is None:
        search = OnlineSearch(target, dispatch.problem, model, ordered, rounds, options.seed)
        note = f"{ordering}; online, rounds of {'+'.join(map(str, rounds))}"
        return [(knobs, score) for knobs, score in search.first_round], note, search
    return [(knobs, score) for knobs, score in ordered[: options.num_candidates]], ordering, None


def _run(
    run: DispatchRun, run_dir: Path, candidates: list[tuple[Knobs, float | None]], ordering: str
) -> TuneResult:
    """Start the run folder, then run the stages in order, the run saved after each."""
    options = run.options
    run.real_input_search = (
        run.target.searches_on_real_inputs(run.problem) and options.stop_after is None
    )
    run.candidates = candidates
    run.recorder = _start_recording(run, run_dir)
    run.recorder.info["ordering"] = ordering
    stages: tuple[Stage, ...] = (
        (specs_stage, compile_stage, export_stage)
        if options.stop_after is StopAfter.COMPILE
        else (specs_stage, compile_stage, measure_stage, check_stage, decide_stage)
    )
    with StageProgress(progress_enabled(options.show_progress)) as progress:
        run.progress = progress
        run_stages(run, stages, (save_run,))
    assert run.result is not None
    return run.result


def export_stage(run: DispatchRun) -> None:
    """Stop after compiling: write the folder another host benchmarks (handoff/export.py)."""
    export_for_benchmarking(run)
    run.recorder.info["notes"] = run.notes
    run.result = _compiled_only_result(run.recorder, run.problem, run.notes)


def _start_recording(run: DispatchRun, run_dir: Path) -> RunRecorder:
    """Lay out the run folder, copy the dispatch in and start its record (results.json)."""
    options, target, dispatch = run.options, run.target, run.dispatch
    for folder in ("inputs", "specs", "binaries", "failures", "verify"):
        (run_dir / folder).mkdir()
    original_path = run_dir / "inputs" / "original_benchmark.mlir"
    shutil.copyfile(dispatch.benchmark_path, original_path)
    from ireetune.frontend.dispatches import strip_configurations

    strip_configurations(
        original_path,
        run_dir / "inputs" / "stripped_benchmark.mlir",
        timeout_s=options.compile_timeout_s,
    )
    info = {
        "ireetune_version": __version__,
        "outcome": "running",
        "input": str(options.input_path),
        "target": target.name,
        "devices": run.devices,
        "problem": dispatch.problem.signature,
        "seed": options.seed,
        "num_candidates": options.num_candidates,
        "compiler_version": run.result_key.compiler_version,
        "database": str(run.database.path) if run.database is not None else None,
        "rule": run.rule.name,
        "timing_basis": (Basis.REAL_INPUT if run.real_input_search else Basis.DISPATCH).value,
        "global_flags": list(target.global_flags),
    }
    if target.global_flags:
        write_flags_file(run_dir / FLAGS_FILE_NAME, target.global_flags)
    return RunRecorder(run_dir, info, database=run.database, result_key=run.result_key, session=uuid.uuid4().hex, rule=run.rule.name)  # fmt: skip


def _reuse(
    options: TuneOptions,
    target: Target,
    context: ir.Context,
    problem: Problem,
    stored: StoredResult,
    key: ResultKey,
) -> TuneResult:
    """Write a run folder from a stored winner (reached here, under this rule) instead of tuning."""
    run_dir = create_run_dir(options.output_dir, problem.signature)
    configuration = (
        target.configuration(problem, stored.knobs, context)
        if stored.knobs is not None
        else OpConfiguration(stored.compilation_info)
    )
    best_spec_path = run_dir / "best_spec.mlir"
    best_spec_path.write_text(
        build_configuration_spec(problem, configuration, target.spec_prologue(problem), context)
    )
    record = CandidateRecord(
        1, stored.knobs, CandidateStatus.VERIFIED, reason=f"stored winner from {stored.written_at}",
        spec_path="best_spec.mlir", device=key.device, times_ms=stored.times_ms, median_ms=stored.median_ms,
        min_ms=stored.min_ms, max_ms=stored.max_ms, spread=stored.spread, speedup=stored.speedup,
        speedup_low=stored.speedup_low, speedup_high=stored.speedup_high, basis=stored.basis,
        confirmed=stored.confirmed, outputs_match=stored.outputs_match,
        real_input_speedup=stored.real_input_speedup, real_input_low=stored.real_input_low,
        real_input_high=stored.real_input_high, verdict=stored.verdict,
    )  # fmt: skip
    baseline = CandidateRecord(
        0, None, CandidateStatus.MEASURED, reason="baseline of the stored result's session",
        median_ms=stored.baseline_ms, speedup=1.0,
    )  # fmt: skip
    note = (
        f"reused the stored winner written {stored.written_at} for {problem.signature} on this "
        "target and device; pass --retune to tune again"
    )
    info = {
        "ireetune_version": __version__, "outcome": "reused", "input": str(options.input_path),
        "target": target.name, "device": key.device, "problem": problem.signature,
        "best_candidate": 1, "best_speedup": stored.speedup, "rule": stored.rule,
        "spec_written": True, "why": "a stored winner under the same rule", "notes": [note],
        "global_flags": list(target.global_flags),
    }  # fmt: skip
    if target.global_flags:
        write_flags_file(run_dir / FLAGS_FILE_NAME, target.global_flags)
    recorder = RunRecorder(run_dir, info, {0: baseline, 1: record})
    recorder.save()
    heading = SummaryHeading(problem.signature, target.name, stored.baseline_ms or math.nan, 1.0)
    summary = render_summary(heading, (baseline, record), record, [note])
    write_text_atomically(run_dir / "summary.txt", summary)
    return TuneResult(
        run_dir=run_dir, problem=problem, records=(baseline, record), baseline_ms=stored.baseline_ms or 0.0,
        best=record, best_spec_path=best_spec_path, compile_success_rate=1.0, notes=(note,), reused=True,
        summary=summary,
    )  # fmt: skip


def _compiled_only_result(recorder: RunRecorder, problem: Problem, notes: list[str]) -> TuneResult:
    """Describe a run stopped after compiling: no timings, no winner yet."""
    attempts = [r for r in recorder.records.values() if not r.is_baseline]
    compiled = [r for r in attempts if r.status is CandidateStatus.COMPILED]
    return TuneResult(
        run_dir=recorder.run_dir, problem=problem, records=tuple(recorder.ordered()),
        baseline_ms=math.nan, best=None, best_spec_path=None,
        compile_success_rate=len([r for r in attempts if r.binary_hash]) / len(attempts) if attempts else 0.0,
        notes=(*notes, f"{len(compiled)} distinct candidates ready to benchmark"),
    )  # fmt: skip
