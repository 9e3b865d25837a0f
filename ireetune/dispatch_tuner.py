"""Tune one dispatch end to end: problem, space, specs, compile, benchmark, check, decide, spec.

This module only sequences the stages; each lives in its own module:

    load the dispatch           frontend/dispatches.py
    generate and order          targets/<target>/ (search space, ordering)
    reuse or resume             report/reuse.py
    write specs                 spec/builder.py
    compile                     compile/stage.py
    benchmark                   benchmark/campaign.py, benchmark/outcomes.py
    check outputs, real inputs  verify/stage.py
    decide                      decision/ (the one rule every flow calls)
    record                      report/recorder.py (results.json, candidates.csv, database)
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import math
import shutil
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from iree.compiler import ir

from ireetune import __version__
from ireetune.benchmark.campaign import (
    CampaignResult,
    CandidateMeasurement,
    EarlierResult,
    measures_on_host,
    run_campaign,
)
from ireetune.benchmark.outcomes import apply_campaign, record_measurement
from ireetune.benchmark.runner import BenchmarkJob
from ireetune.compile.driver import CompileRequest, build_request
from ireetune.compile.overlap import compile_and_measure
from ireetune.compile.pool import CompileBatch, default_jobs
from ireetune.compile.stage import (
    classify_binaries,
    compile_candidates,
    compile_jobs_for,
    compile_success_rate,
)
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
from ireetune.decision.facts import facts_from_campaign, with_outputs, with_real_input
from ireetune.decision.rules import (
    CandidateFacts,
    DecisionRule,
    choose_contenders,
)
from ireetune.decision.stats import Basis
from ireetune.dispatch_options import CandidateOrder, StopAfter, TuneOptions
from ireetune.dispatch_run.decide import RunOutline, decide, write_verdict
from ireetune.dispatch_run.state import DispatchRun, Stage, campaign_settings, run_stages, save_run
from ireetune.errors import IreetuneError
from ireetune.executor import Executor, open_executor
from ireetune.flags.check import check_flags_with_compiler
from ireetune.flags.dispatch_search import search_flags_for_input
from ireetune.flags.file import FLAGS_FILE_NAME, write_flags_file
from ireetune.flags.trials import FlagSearchResult, trial_row
from ireetune.frontend.load import LoadedDispatch, load_dispatch
from ireetune.handoff.export import export_for_benchmarking
from ireetune.model.real_inputs import time_on_real_inputs
from ireetune.problem.registry import family_of
from ireetune.problem.root_op import Problem
from ireetune.report.progress import StageProgress, progress_enabled
from ireetune.report.recorder import RunRecorder
from ireetune.report.result import TuneResult
from ireetune.report.reuse import (
    facts_from_stored_campaign,
    find_reusable,
    restore_candidates,
    stale_candidates,
)
from ireetune.report.summary import render_summary
from ireetune.run_dir import check_output_dir, create_run_dir
from ireetune.search.learned_order import OnlineSearch, order_pool, plan_rounds
from ireetune.spec.builder import build_configuration_spec
from ireetune.targets import parse_target
from ireetune.verify.compare import check_inputs
from ireetune.verify.landing import prove_config_landed
from ireetune.verify.stage import (
    ReferenceSetup,
    check_outputs,
    compile_references,
    reference_jobs,
    write_reference,
)

logger = logging.getLogger(__name__)

BASELINE_SPEC_TEXT = """\
module attributes {transform.with_named_sequence} {
  transform.named_sequence @__kernel_config(%variant: !transform.any_op {transform.readonly})
      -> !transform.any_op attributes {iree_codegen.tuning_spec_entrypoint} {
    transform.yield %variant : !transform.any_op
  }
}
"""
# Disagreement between dispatch-level and real-input timing of the baseline worth reporting.
MODEL_LEVEL_DISAGREEMENT = 0.20
# Where real inputs decide but the search ran on dispatch benchmarks, this many leaders at least
# are checked on real inputs.
REAL_INPUT_PRESELECTION = 6


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
            executor, options.input_path, target, flags_dir,
            options.threshold, campaign_settings(options), options.jobs or default_jobs(),
            options.compile_timeout_s, options.seed, options.model_level_rounds,
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


def specs_stage(run: DispatchRun) -> None:
    """Write the reference program and one spec per candidate; restore what the database has."""
    run.reference = write_reference(
        run.dispatch.root_op, run.context, run.problem, run.run_dir / "verify", run.options.seed
    )
    _write_specs(
        run.recorder, run.target, run.context, run.problem, run.dispatch.default_knobs,
        run.candidates,
    )  # fmt: skip
    run.restored = restore_candidates(run.recorder, run.stored)
    run.notes = list(run.target.space_for(run.problem).space_notes())


def compile_stage(run: DispatchRun) -> None:
    """Compile every candidate (online: round by round, each round but the last measured too);
    where the device is not the host's CPU, measure each binary while the rest compile."""
    options, recorder = run.options, run.recorder
    if run.search is not None:
        run.restored = _measure_early_rounds(run, run.search)
    restored = run.restored
    # On real inputs the reference program is what is timed; else the dispatch benchmark.
    requests = _compile_plan(run.target, recorder, run.reference, run.real_input_search, restored)
    if should_overlap(options, run.devices) and not restored and run.search is None and options.stop_after is None:  # fmt: skip
        batch = CompileBatch(compile_jobs_for(recorder, requests), run.workers, options.compile_timeout_s)  # fmt: skip
        run.overlapped = _compile_and_benchmark(run.executor, options, run.devices, recorder, batch, _real_inputs(run), run.progress)  # fmt: skip
        recorder.info["overlap"] = True
    else:
        compile_candidates(
            run.executor, recorder, requests, restored, run.workers, options.compile_timeout_s,
            run.progress,
        )  # fmt: skip
    if recorder.records[0].status not in (CandidateStatus.COMPILED, CandidateStatus.MEASURED):
        raise IreetuneError(
            f"the default configuration does not compile: {recorder.records[0].reason}"
        )
    if run.overlapped is None:
        classify_binaries(recorder, restored)
    run.success_rate = compile_success_rate(recorder)


def export_stage(run: DispatchRun) -> None:
    """Stop after compiling: write the folder another host benchmarks (handoff/export.py)."""
    export_for_benchmarking(run)
    run.recorder.info["notes"] = run.notes
    run.result = _compiled_only_result(run.recorder, run.problem, run.notes)


def measure_stage(run: DispatchRun) -> None:
    """Measure the compiled candidates (or take a finished campaign from the database), turn
    the timings into facts and choose the contenders the checks look at."""
    options, recorder, rule = run.options, run.recorder, run.rule
    basis = Basis.REAL_INPUT if run.real_input_search else Basis.DISPATCH
    stored_facts = (
        facts_from_stored_campaign(recorder, run.stored, run.restored, basis)
        if len(run.devices) == 1 and run.overlapped is None
        else None
    )
    if stored_facts is None:
        campaign = run.overlapped or _benchmark(run.executor, options, run.devices, recorder, run.restored, _real_inputs(run), run.progress)  # fmt: skip
        run.notes.extend(campaign.notes)
        run.facts = facts_from_campaign(campaign, basis)
    else:
        run.facts = stored_facts
        run.notes.append(
            "resumed: every timing came from the database's finished campaign; the checks ran again"
        )
    recorder.record_facts(run.facts)
    limit = max(options.verify_top, REAL_INPUT_PRESELECTION) if rule.real_input_decides and not run.real_input_search else options.verify_top  # fmt: skip
    run.contenders = choose_contenders(list(run.facts.values()), rule, limit)


def check_stage(run: DispatchRun) -> None:
    """Check the contenders' outputs and, where real inputs decide, time them there."""
    with run.progress.stage("checking", len(run.contenders) + 1):
        run.facts = _check(run, run.facts, run.contenders)
        run.progress.advance(len(run.contenders) + 1)


def decide_stage(run: DispatchRun) -> None:
    """Pick the winner by the rule, write its spec, the run's record and its summary."""
    recorder = run.recorder
    decision = decide(recorder, run.facts, run.contenders, run.rule)
    measurable = [
        r for r in recorder.records.values()
        if not r.is_baseline and r.status in (CandidateStatus.MEASURED, CandidateStatus.VERIFIED, CandidateStatus.WRONG)
    ]  # fmt: skip
    if not measurable:
        recorder.info["outcome"] = "failed"
        recorder.info["notes"] = run.notes
        recorder.save()
        raise IreetuneError(f"no candidate could be measured; see {run.run_dir}/candidates.csv")
    outline = RunOutline(
        run.problem, run.target.name, recorder.records[0].median_ms or math.nan, run.success_rate
    )
    run.result = write_verdict(
        recorder, decision, outline, functools.partial(_prove_landed, run), run.notes
    )


def _prove_landed(run: DispatchRun, best: CandidateRecord) -> None:
    """Prove the winner's configuration lands in the compiled dispatch (verify/landing.py)."""
    assert best.knobs is not None
    run_dir, context = run.run_dir, run.context
    prove_config_landed(
        run.target, run_dir / "inputs" / "stripped_benchmark.mlir", run_dir / best.spec_path,
        run.target.compilation_info(run.problem, best.knobs, context),
        run_dir / "verify" / "best_configuration", context,
    )  # fmt: skip


def _real_inputs(run: DispatchRun) -> ReferenceSetup | None:
    """Return the real inputs candidates are timed on, if the run searches there."""
    return run.reference if run.real_input_search else None


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


def _write_specs(
    recorder: RunRecorder,
    target: Target,
    context: ir.Context,
    problem: Problem,
    default_knobs: Knobs | None,
    candidates: list[tuple[Knobs, float | None]],
) -> None:
    """Write one spec per candidate; candidate 0, the default, gets a spec that matches nothing."""
    run_dir = recorder.run_dir
    (run_dir / "specs" / "0_spec.mlir").write_text(BASELINE_SPEC_TEXT)
    recorder.update(
        CandidateRecord(0, default_knobs, CandidateStatus.GENERATED, spec_path="specs/0_spec.mlir")
    )
    _append_specs(recorder, target, context, problem, candidates)


def _append_specs(
    recorder: RunRecorder,
    target: Target,
    context: ir.Context,
    problem: Problem,
    candidates: list[tuple[Knobs, float | None]],
) -> list[int]:
    """Write one spec per new candidate, numbered after the last; return their ids."""
    run_dir = recorder.run_dir
    first_id = max(recorder.records) + 1
    prologue = target.spec_prologue(problem)
    for candidate_id, (knobs, score) in enumerate(candidates, start=first_id):
        configuration = target.configuration(problem, knobs, context)
        spec_name = f"specs/{candidate_id}_spec.mlir"
        (run_dir / spec_name).write_text(
            build_configuration_spec(problem, configuration, prologue, context)
        )
        recorder.compilation_infos[candidate_id] = configuration.compilation_info
        recorder.update(
            CandidateRecord(
                candidate_id, knobs, CandidateStatus.GENERATED, score, spec_path=spec_name
            )
        )
    recorder.save()
    return list(range(first_id, first_id + len(candidates)))


def _compile_plan(
    target: Target,
    recorder: RunRecorder,
    reference: ReferenceSetup,
    real_input_search: bool,
    restored: set[int],
) -> dict[int, CompileRequest]:
    """Return each candidate's compile: the reference program on real inputs, else the stripped
    dispatch benchmark, with its spec."""
    run_dir = recorder.run_dir
    if real_input_search:
        source = reference.source_path
        phase_flags: tuple[str, ...] = ()
    else:
        source = run_dir / "inputs" / "stripped_benchmark.mlir"
        phase_flags = ("--compile-from=executable-sources",)
    return {
        r.candidate_id: build_request(
            target,
            source,
            run_dir / "binaries" / f"{r.candidate_id}.vmfb",
            phase_flags=phase_flags,
            spec_path=run_dir / r.spec_path,
            reproducer_path=run_dir / "failures" / f"{r.candidate_id}_reproducer.mlir",
        )  # fmt: skip
        for r in recorder.records.values()
        # A restored candidate needs its binary only when it was measured (it may lead); one
        # compiled in an earlier round of this run has it already.
        if (r.candidate_id not in restored or r.speedup is not None) and not r.binary_path
    }


def _measure_early_rounds(run: DispatchRun, search: OnlineSearch) -> set[int]:
    """Online search: compile and time each round but the last (first pass only), then let the
    model, updated on every measurement so far, pick the next round from the rest of the pool.

    Returns the candidates done so far; the run then treats them as a resumed run treats the
    ones it found in the database: measured, taking part in the confirmation round.
    """
    recorder, reference, progress = run.recorder, run.reference, run.progress
    done = set(run.restored)
    early = replace(run.options, confirm_rounds=0)
    while search.rounds_left > 0:
        requests = _compile_plan(run.target, recorder, reference, run.real_input_search, done)
        compile_candidates(
            run.executor, recorder, requests, done, run.workers, early.compile_timeout_s, progress
        )
        if recorder.records[0].status not in (CandidateStatus.COMPILED, CandidateStatus.MEASURED):
            raise IreetuneError(
                f"the default configuration does not compile: {recorder.records[0].reason}"
            )
        classify_binaries(recorder, done)
        if any(r.status is CandidateStatus.COMPILED for cid, r in recorder.records.items() if cid and cid not in done):  # fmt: skip
            _benchmark(run.executor, early, run.devices, recorder, done, reference if run.real_input_search else None, progress)  # fmt: skip
        done.update(recorder.records)
        done.discard(0)
        chosen = search.next_round(_measurements(recorder))
        _append_specs(recorder, run.target, run.context, run.problem, list(chosen))
        done.update(restore_candidates(recorder, run.stored))
    return done


def _measurements(recorder: RunRecorder) -> list[tuple[Knobs, float | None]]:
    """Every tried candidate's time relative to its round's default (1/speedup), None if it
    failed; a config that did not apply runs as the default. Duplicates teach nothing new."""
    found: list[tuple[Knobs, float | None]] = []
    for record in recorder.ordered():
        if record.is_baseline or record.knobs is None:
            continue
        if record.status is CandidateStatus.MEASURED and record.speedup:
            found.append((record.knobs, 1.0 / record.speedup))
        elif record.status is CandidateStatus.NOT_APPLIED:
            found.append((record.knobs, 1.0))
        elif record.status not in (CandidateStatus.DUPLICATE, CandidateStatus.GENERATED, CandidateStatus.COMPILED):  # fmt: skip
            found.append((record.knobs, None))
    return found


def should_overlap(options: TuneOptions, devices: list[str]) -> bool:
    """Whether to measure while compiling: when asked, else only where no device is the host's
    CPU (there the compiles would take the cores being measured; see compile/overlap.py)."""
    if options.overlap is not None:
        return options.overlap
    return not any(measures_on_host(device) for device in devices)


def _benchmark(
    executor: Executor,
    options: TuneOptions,
    devices: list[str],
    recorder: RunRecorder,
    restored: set[int],
    reference: ReferenceSetup | None,
    progress: StageProgress,
) -> CampaignResult:
    """Measure the compiled candidates on every device (benchmark/campaign.py), recording each."""
    job = _job_maker(recorder.run_dir, reference)
    ordered = recorder.ordered()
    jobs = [job(r) for r in ordered if not r.is_baseline and r.status is CandidateStatus.COMPILED and r.candidate_id not in restored]  # fmt: skip
    earlier = [
        EarlierResult(job(r), r.speedup)
        for r in ordered
        if r.candidate_id in restored and r.binary_path and r.speedup and not r.stopped_early
    ]
    with progress.stage("benchmarking", len(jobs)):
        result = run_campaign(executor, job(recorder.records[0]), jobs, devices, campaign_settings(options), on_measured=_recording(recorder, progress), earlier=earlier)  # fmt: skip
    _fold_campaign(recorder, result)
    return result


def _compile_and_benchmark(
    executor: Executor,
    options: TuneOptions,
    devices: list[str],
    recorder: RunRecorder,
    batch: CompileBatch,
    reference: ReferenceSetup | None,
    progress: StageProgress,
) -> CampaignResult:
    """Compile every candidate and measure each while the rest compile (compile/overlap.py)."""
    result = compile_and_measure(
        executor, recorder, batch, _job_maker(recorder.run_dir, reference), devices, campaign_settings(options),
        _recording(recorder, None), progress,
    )  # fmt: skip
    _fold_campaign(recorder, result)
    return result


def _job_maker(
    run_dir: Path, reference: ReferenceSetup | None
) -> Callable[[CandidateRecord], BenchmarkJob]:
    """Return how a compiled candidate becomes a benchmark job (on real inputs when given)."""
    inputs = reference.inputs_path if reference is not None else None

    def job(record: CandidateRecord) -> BenchmarkJob:
        return BenchmarkJob(
            record.candidate_id, run_dir / record.binary_path, inputs, "main" if inputs else ""
        )

    return job


def _recording(
    recorder: RunRecorder, progress: StageProgress | None
) -> Callable[[CandidateMeasurement], None]:
    """Return the callback that records (and saves) each first-pass measurement."""

    def on_measured(measurement: CandidateMeasurement) -> None:
        recorder.update(record_measurement(recorder.records[measurement.candidate_id], measurement))
        recorder.save()
        if progress is not None:
            progress.advance()

    return on_measured


def _fold_campaign(recorder: RunRecorder, result: CampaignResult) -> None:
    """Record a finished campaign: every measurement, the baselines and the confirmation."""
    changed, _ = apply_campaign(recorder.records, result, recorder.info)
    recorder.baseline_ms_by_device = {
        b.device: b.reference_ms for b in result.baselines.values() if not b.error
    }
    for updated in changed:
        recorder.update(updated)
    recorder.save()


def _check(
    run: DispatchRun, facts: dict[int, CandidateFacts], contenders: list[int]
) -> dict[int, CandidateFacts]:
    """Check the contenders' outputs and, where real inputs decide, time them there."""
    if not contenders:
        return facts
    target, recorder, reference, notes = run.target, run.recorder, run.reference, run.notes
    real_input_search = run.real_input_search
    run_dir = recorder.run_dir
    verify_dir = run_dir / "verify"
    device = recorder.records[0].device or target.runtime_device
    if real_input_search:
        # The candidates' binaries are their reference programs already.
        binaries: dict[int, tuple[Path | None, str]] = {
            cid: (run_dir / recorder.records[cid].binary_path, recorder.records[cid].binary_hash)
            for cid in (0, *contenders)
        }
    else:
        jobs = reference_jobs(
            target, reference, {cid: run_dir / recorder.records[cid].spec_path for cid in (0, *contenders)},
            verify_dir, run_dir / "failures",
        )  # fmt: skip
        binaries = compile_references(
            run.executor, CompileBatch(jobs, run.workers, run.options.compile_timeout_s)
        )
        if binaries[0][0] is None:
            raise IreetuneError(f"the reference program does not compile: {binaries[0][1]}")
    checks = check_outputs(run.executor, run.problem, binaries, reference, device)
    if checks.baseline_error:
        notes.append(f"outputs could not be checked: {checks.baseline_error}")
    for cid, error in checks.max_abs_errors.items():
        recorder.records[cid] = replace(recorder.records[cid], max_abs_error=error)
    facts = with_outputs(facts, checks.results)
    dispatch_ms = recorder.records[0].median_ms
    if checks.baseline_ms is not None and dispatch_ms and not real_input_search:
        recorder.info["model_level_baseline_ms"] = checks.baseline_ms
        if abs(checks.baseline_ms - dispatch_ms) / dispatch_ms > MODEL_LEVEL_DISAGREEMENT:
            notes.append(
                f"baseline dispatch-level time {dispatch_ms:.4g} ms and real-input time {checks.baseline_ms:.4g} ms "
                f"differ by more than {MODEL_LEVEL_DISAGREEMENT:.0%}"
            )
    if target.decides_at_model_level and not real_input_search:
        passing = [cid for cid in contenders if checks.results.get(cid, (False, ""))[0]]
        if passing:
            programs = {cid: binaries[cid][0] for cid in (0, *passing)}
            estimates, raw = time_on_real_inputs(
                run.executor, {cid: p for cid, p in programs.items() if p is not None}, reference.inputs_path, verify_dir, device, run.options.model_level_rounds,
            )  # fmt: skip
            recorder.info["real_input_timings"] = raw
            facts = with_real_input(facts, estimates)
    return facts


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
    summary = render_summary(problem.signature, target.name, (baseline, record), stored.baseline_ms or math.nan, 1.0, record, [note], None)  # fmt: skip
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
