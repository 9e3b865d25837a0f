"""The stages of a dispatch run, each a function of the run (flows/dispatch/state.py).

    specs      the reference program and one spec per candidate   spec/builder.py
    compile    every candidate (online: round by round)           compile/stage.py
    measure    the campaign, or the database's finished one       benchmark/campaign.py
    check      the contenders' outputs, real-input timings        verify/stage.py
    (rounds)   a round measured, the next one picked: online      search/learned_order.py
               search, or a time budget's next part                search/climb.py

`decide_stage` (flows/dispatch/decide.py) ends the run; `dispatch_tuner.dispatch_stages` puts them
in order for the sequencer (flows/sequence.py); `--stop-after compile` ends after compile with the export of the
folder another host benchmarks (flows/handoff/export.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ireetune.benchmark.campaign import (
    CampaignResult,
    CandidateMeasurement,
    EarlierResult,
    measures_on_host,
    run_campaign,
)
from ireetune.benchmark.outcomes import apply_campaign, campaign_timings, record_measurement
from ireetune.benchmark.runner import BenchmarkJob
from ireetune.compile.driver import CompileRequest, build_request
from ireetune.compile.overlap import MeasurePlan, compile_and_measure
from ireetune.compile.pool import CompileBatch
from ireetune.compile.stage import (
    classify_binaries,
    compile_candidates,
    compile_jobs_for,
    compile_success_rate,
)
from ireetune.core.candidate import Knobs
from ireetune.core.errors import IreetuneError
from ireetune.core.records import CandidateRecord, CandidateStatus
from ireetune.core.target import Target
from ireetune.decision.facts import facts_from_campaign, with_outputs, with_real_input
from ireetune.decision.rules import (
    CandidateFacts,
    choose_contenders,
    contender_limit,
)
from ireetune.decision.stats import Basis
from ireetune.executor import Executor
from ireetune.flows.dispatch.budget import (
    confirm_rounds_that_fit,
    may_start_part,
    note_part_timing,
)
from ireetune.flows.dispatch.options import TuneOptions
from ireetune.flows.dispatch.state import DispatchRun, campaign_settings, first_notes
from ireetune.model.real_inputs import time_on_real_inputs
from ireetune.report.progress import StageProgress
from ireetune.report.recorder import RunRecorder
from ireetune.report.reuse import (
    facts_from_stored_campaign,
    restore_candidates,
)
from ireetune.search.strategy import Rounds
from ireetune.spec.builder import build_configuration_spec
from ireetune.verify.stage import (
    ReferenceSetup,
    check_outputs,
    compile_references,
    reference_jobs,
    write_reference,
)

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


def specs_stage(run: DispatchRun) -> None:
    """Write the reference program and one spec per candidate; restore what the database has."""
    run.reference = write_reference(
        run.dispatch.root_op, run.context, run.problem, run.run_dir / "verify", run.options.seed
    )
    _write_specs(run, run.candidates)
    run.restored = restore_candidates(run.recorder, run.stored)
    run.notes = first_notes(run)


def compile_stage(run: DispatchRun) -> None:
    """Compile every candidate not done yet; where the device is not the host's CPU, measure
    each binary while the rest compile."""
    options, recorder = run.options, run.recorder
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
        _time_at_dispatch_level_if_reference_ignores_configs(run, restored)
    run.success_rate = compile_success_rate(recorder)


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
        confirming = replace(options, confirm_rounds=confirm_rounds_that_fit(run))
        campaign = run.overlapped or _benchmark(run.executor, confirming, run.devices, recorder, run.restored, _real_inputs(run), run.progress)  # fmt: skip
        run.notes.extend(campaign.notes)
        run.facts = facts_from_campaign(campaign, basis)
    else:
        run.facts = stored_facts
        run.notes.append(
            "resumed: every timing came from the database's finished campaign; the checks ran again"
        )
    recorder.record_facts(run.facts)
    preselect = rule.real_input_decides and not run.real_input_search
    limit = contender_limit(options.verify_top, preselect)
    run.contenders = choose_contenders(list(run.facts.values()), rule, limit)


def check_stage(run: DispatchRun) -> None:
    """Check the contenders' outputs and, where real inputs decide, time them there."""
    with run.progress.stage("checking", len(run.contenders) + 1):
        run.facts = _check(run, run.facts, run.contenders)
        run.progress.advance(len(run.contenders) + 1)


def _real_inputs(run: DispatchRun) -> ReferenceSetup | None:
    """Return the real inputs candidates are timed on, if the run searches there."""
    return run.reference if run.real_input_search else None


def _write_specs(run: DispatchRun, candidates: list[tuple[Knobs, float | None]]) -> None:
    """Write one spec per candidate; candidate 0, the default, gets a spec that matches nothing."""
    recorder = run.recorder
    (recorder.run_dir / "specs" / "0_spec.mlir").write_text(BASELINE_SPEC_TEXT)
    recorder.update(
        CandidateRecord(
            0, run.dispatch.default_knobs, CandidateStatus.GENERATED, spec_path="specs/0_spec.mlir"
        )
    )
    _append_specs(run, candidates)


def _append_specs(run: DispatchRun, candidates: list[tuple[Knobs, float | None]]) -> list[int]:
    """Write one spec per new candidate, numbered after the last; return their ids."""
    recorder, problem, context = run.recorder, run.problem, run.context
    run_dir = recorder.run_dir
    first_id = max(recorder.records) + 1
    prologue = run.target.spec_prologue(problem)
    for candidate_id, (knobs, score) in enumerate(candidates, start=first_id):
        configuration = run.configuration(knobs)
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


# Why a run searching on real inputs falls back to the dispatch benchmark.
REFERENCE_IGNORES_CONFIGS = (
    "no candidate's reference program compiled to a binary of its own ({counts}): compiled "
    "alone, the root op is rewritten before configurations apply (IREE collapses its loops or "
    "data-tiles it), while the dispatch takes them; candidates are timed on the dispatch "
    "benchmark instead"
)
_IGNORED = (
    CandidateStatus.NOT_APPLIED,
    CandidateStatus.COMPILE_FAILED,
    CandidateStatus.COMPILE_TIMED_OUT,
)


def _time_at_dispatch_level_if_reference_ignores_configs(
    run: DispatchRun, restored: set[int]
) -> None:
    """Where the search times on real inputs and no new candidate's reference program compiled
    to a binary of its own, compile the candidates again from the dispatch benchmark and time
    them there. The reference program then does not carry configurations that the dispatch
    does: a 1x1 NCHW convolution's contraction keeps two spatial loops in the model's dispatch,
    which IREE collapses into one when the op is compiled alone (the matcher no longer matches:
    every binary is the default's); under data tiling the op alone is data-tiled and the
    configuration lost (every compile fails). Timing those would measure nothing of the
    candidates."""
    recorder = run.recorder
    fresh = [r for cid, r in recorder.records.items() if cid and cid not in restored]
    if (
        not run.real_input_search
        or restored - {0}
        or not fresh
        or any(r.status not in _IGNORED for r in fresh)
    ):
        return
    counts = ", ".join(
        f"{sum(r.status is status for r in fresh)} {status.value}"
        for status in _IGNORED
        if any(r.status is status for r in fresh)
    )
    run.real_input_search = False
    recorder.info["timing_basis"] = Basis.DISPATCH.value
    run.notes.append(REFERENCE_IGNORES_CONFIGS.format(counts=counts))
    for record in [recorder.records[0], *fresh]:
        if record.status is CandidateStatus.COMPILED or record.status in _IGNORED:
            recorder.records[record.candidate_id] = replace(
                record, status=CandidateStatus.GENERATED, reason="", binary_path="",
                binary_hash="", compile_seconds=None,
            )  # fmt: skip
    requests = _compile_plan(run.target, recorder, run.reference, False, restored)
    compile_candidates(
        run.executor, recorder, requests, restored, run.workers, run.options.compile_timeout_s,
        run.progress,
    )  # fmt: skip
    if recorder.records[0].status is not CandidateStatus.COMPILED:
        raise IreetuneError(
            f"the default configuration does not compile: {recorder.records[0].reason}"
        )
    classify_binaries(recorder, restored)


def measure_round_stage(run: DispatchRun) -> None:
    """A round but the last (an online search's, or a time budget's part): compile and time the
    candidates not done yet (first pass only); the run then treats them as a resumed run treats
    the ones it found in the database: measured, taking part in the confirmation round. The
    flow's `learn_from_round` callback (flows/dispatch/recording.py) hands them to the rounds.
    Once the time budget ended the run, nothing is left to do."""
    if run.budget is not None and run.budget.ended:
        return
    recorder, done = run.recorder, set(run.restored)
    early = replace(run.options, confirm_rounds=0)
    requests = _compile_plan(run.target, recorder, run.reference, run.real_input_search, done)
    compile_candidates(
        run.executor, recorder, requests, done, run.workers, early.compile_timeout_s, run.progress
    )
    if recorder.records[0].status not in (CandidateStatus.COMPILED, CandidateStatus.MEASURED):
        raise IreetuneError(
            f"the default configuration does not compile: {recorder.records[0].reason}"
        )
    classify_binaries(recorder, done)
    _time_at_dispatch_level_if_reference_ignores_configs(run, done)
    if any(r.status is CandidateStatus.COMPILED for cid, r in recorder.records.items() if cid and cid not in done):  # fmt: skip
        part = _benchmark(run.executor, early, run.devices, recorder, done, _real_inputs(run), run.progress)  # fmt: skip
        note_part_timing(run, part.seconds, campaign_timings(part))
    run.restored = done | set(recorder.records)
    run.restored.discard(0)


def pick_round_stage(run: DispatchRun) -> None:
    """Online search, or a run with a time budget: write the specs of the next round (the best
    of what remains of the pool under the model as last updated; a budget's next part, its
    leader's neighbours first: search/climb.py) if the task scheduler says it can end in time,
    with what the strategy noted of it; restore what the database has of them."""
    assert run.search is not None, "only an online search or a time budget has rounds"
    chosen = run.search.next_round()
    if may_start_part(run, len(chosen)):
        run.notes.extend(run.search.notes)
        _append_specs(run, chosen)
        run.restored |= restore_candidates(run.recorder, run.stored)


def round_stages(search: Rounds | None) -> tuple[Callable[[DispatchRun], None], ...]:
    """Return the stages of the rounds after the first, of an online search or of a run with a
    time budget (none without either)."""
    rounds = search.rounds_left if search is not None else 0
    return (measure_round_stage, pick_round_stage) * rounds


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
    plan = MeasurePlan(
        _job_maker(recorder.run_dir, reference), devices, campaign_settings(options),
        _recording(recorder, None),
    )  # fmt: skip
    result = compile_and_measure(executor, recorder, batch, plan, progress)
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
    if run.rule.real_input_decides and not real_input_search:
        passing = [cid for cid in contenders if checks.results.get(cid, (None, ""))[0] is True]
        if passing:
            programs = {cid: binaries[cid][0] for cid in (0, *passing)}
            estimates, raw = time_on_real_inputs(
                run.executor, {cid: p for cid, p in programs.items() if p is not None}, reference.inputs_path, verify_dir, device, run.options.model_level_rounds,
            )  # fmt: skip
            recorder.info["real_input_timings"] = raw
            facts = with_real_input(facts, estimates)
    return facts
