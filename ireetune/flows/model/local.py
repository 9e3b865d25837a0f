"""The model flow's phases in process: every phase on this host, measuring as it goes.

1. prepare: import the model (MLIR as is; ONNX through iree-import-onnx), make its inputs,
   compile and run the default (one body for both modes: flows/model/phases.py);
2. flags: search the target's global compiler flags on the whole model (flows/model/flag_phase.py,
   flags/model_search.py);
3. profile: compile once with per-dispatch benchmark dumps, count each dispatch's launches, time
   each dispatch and the whole model, and pick the hot set (`--coverage`, `--max-dispatches`;
   one body for both modes: flows/model/phases.py);
4. dispatches: tune each hot problem with the dispatch flow, keeping its top candidates even when
   none beats the default on its own;
5. variants: model-level selection (flows/model/local_select.py): each kept candidate alone and
   every dispatch's first candidate together become model variants, timed beside the default
   in one process, the pre-selected again in a fresh one, as in split mode; the winner (with
   the default model's outputs) is the accepted set;
6. decide: the flag phase's close runners-up judged beside its winner with the kept specs
   (flows/model/flag_finalists.py; one that wins replaces the flags), a final side-by-side
   check of the default and the tuned model (specs found harmful are dropped), the tuned flags
   file, the combined check of flags and spec, the database row;
7. report: report.txt and report.json.

The run is saved after every phase, and after every dispatch of the dispatch phase
(flows/model/state.py); `ireetune continue RUN` rebuilds it from its folder and runs the
phases after the last one saved, a dispatch phase cut short with the dispatches not done yet.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from ireetune.core.arguments import MAX_THRESHOLD
from ireetune.core.budget import (
    DispatchScheduler,
    DispatchTask,
    needed_dispatch_speedup,
)
from ireetune.core.errors import IreetuneError
from ireetune.core.records import CandidateRecord
from ireetune.database.keys import describe_device
from ireetune.database.model_results import ModelKey, ModelResult, hash_model, record_model_result
from ireetune.database.store import compiler_version, default_database_path
from ireetune.decision.stats import SpeedupEstimate
from ireetune.flags.file import write_flag_files
from ireetune.flags.model_search import (
    measure_combined,
)
from ireetune.flows.dispatch.options import TuneOptions
from ireetune.flows.dispatch.resume import resume_dispatch
from ireetune.flows.dispatch.run_options import OPTIONS_NAME, read_run_options
from ireetune.flows.dispatch.tuner import tune_dispatch
from ireetune.flows.model.flag_finalists import FlagChoice, judge_flag_finalists
from ireetune.flows.model.flag_phase import flag_phase, flag_search_request
from ireetune.flows.model.local_select import select_variants, selection_seconds
from ireetune.flows.model.phases import prepare, profile
from ireetune.flows.model.report import dispatch_outcomes, report
from ireetune.flows.model.run import (
    ModelTuneResult,
    ModelTuningRun,
    Pause,
    Phase,
    PhaseBody,
)
from ireetune.flows.model.state_restore import save_run
from ireetune.model.candidates import order_candidates
from ireetune.model.final_check import FinalCheck, FinalTiming, check_final_set
from ireetune.model.gate import best_possible_speedup, problem_share
from ireetune.model.headroom import NEAR_FASTEST, efficiencies, prior_cut
from ireetune.model.hot import DispatchProfile, HotSet
from ireetune.model.kin import (
    KIN_FOLDER,
    Extended,
    KeptCandidate,
    extend_with_kin,
    find_kin_profiles,
)
from ireetune.model.profile import write_profile
from ireetune.model.select import MODEL_RULE
from ireetune.report.result import TuneResult
from ireetune.targets import parse_target


def tune_dispatches(run: ModelTuningRun) -> Pause | None:
    """Tune the hot dispatches with the dispatch flow, as many as the time budget can also try
    in the model, the one the scheduler expects to gain most first, each within its slot of the
    phase; keep their best candidates for the model."""
    hot = run.hot_set
    scheduler = DispatchScheduler(None, LEAST_SLOT_S)
    # Largest expected gain first; equals keep the profile's order.
    ranked = sorted(
        (_task_of(hot, p) for p in hot.selected if p.name not in run.dispatches_done),
        key=scheduler.expected_gain,
        reverse=True,
    )
    profiles = {profile.name: profile for profile in hot.selected}
    found = efficiencies(hot.ranked)
    count, scheduler.ends_at = _dispatches_that_fit(run, len(ranked), time.monotonic())
    pending, left_out = ranked[:count], ranked[count:]
    for task in left_out:
        run.dispatch_notes[task.name] = _left_out_note(run, count, len(ranked))
        run.dispatches_done.append(task.name)
    while pending:
        task = scheduler.next_task(pending)
        slot_s = scheduler.slot_s(task, pending, time.monotonic())
        expected = scheduler.expected_gain(task)
        tuned = profiles[task.name]
        speedup, carried, default_ms = _tune_one_dispatch(run, tuned, slot_s, task.share)
        if speedup is not None:
            scale = default_ms / tuned.dispatch_ms if default_ms and tuned.dispatch_ms else 1.0
            gain = scheduler.learn(task, speedup, scale)
            plan = f"slot {slot_s:.0f} s, " if slot_s is not None else ""
            run.notes.append(
                f"{task.name}: {plan}expected to save {expected:.2%} of the model"
                + _headroom_note(found.get(task.name))
                + f"; its best candidate {speedup:.3f}x alone ({gain:.2%} of the model"
                + _session_note(tuned, default_ms, scale)
                + ")"
            )
        pending.remove(task)
        # Saved after each dispatch: a run stopped in this phase goes on with the next one.
        run.dispatches_done.append(task.name)
        back = None if carried else _kin_given_back(run, profiles[task.name], scheduler, pending)
        if back is not None:
            profiles[back.name] = back
        if left_out and _admit_left_out(run, scheduler, pending, left_out):
            for other in left_out:
                run.dispatch_notes[other.name] = _left_out_note(
                    run, len(ranked) - len(left_out), len(ranked)
                )
        save_run(run)
    return None


def _admit_left_out(
    run: ModelTuningRun,
    scheduler: DispatchScheduler,
    pending: list[DispatchTask],
    left_out: list[DispatchTask],
) -> bool:
    """Move the left-out dispatch expected to gain most to `pending` when what is left of the
    dispatch phase's share has room for it (`_room_for`): the dispatches tuned so far left part
    of their slots (a space found empty, a tuning that stopped early) or kept no candidate to
    try in the model (whose time the selection kept for them). Return whether one was
    admitted."""
    if not _room_for(run, scheduler, len(pending) + 1, time.monotonic()):
        return False
    task = scheduler.next_task(left_out)
    left_out.remove(task)
    pending.append(task)
    run.dispatches_done.remove(task.name)
    del run.dispatch_notes[task.name]
    run.notes.append(
        f"{task.name}: selected as well: the dispatches tuned before it left room in the "
        "dispatch phase (unspent slots, or no candidate to try in the model)"
    )
    return True


def _room_for(run: ModelTuningRun, scheduler: DispatchScheduler, count: int, now: float) -> bool:
    """Say whether `count` dispatches still to tune fit in what is left of the dispatch phase's
    share: each gets at least `LEAST_SLOT_S`, and the selection keeps what trying them and the
    ones tuned with candidates in the model needs. When they fit, the phase ends where that
    leaves the selection its time. Always without a budget."""
    if scheduler.ends_at is None:
        return True
    fitting, ends_at = _dispatches_that_fit(run, count, now)
    if fitting < count:
        return False
    scheduler.ends_at = ends_at
    return True


def _tuned_with_candidates(run: ModelTuningRun) -> int:
    """Return how many tuned dispatches the selection tries in the model: those that kept a
    candidate (a dispatch whose space was empty, or that measured none, has no variant)."""
    return sum(1 for specs in run.candidates.values() if specs)


def _kin_given_back(
    run: ModelTuningRun,
    tuned: DispatchProfile,
    scheduler: DispatchScheduler,
    pending: list[DispatchTask],
) -> DispatchProfile | None:
    """Select the largest kin of `tuned` whose problem no tuned dispatch holds, when `tuned`'s
    candidates were carried to none of its kin (none was faster alone, or their tiles do not
    divide the kin's sizes) and the time budget still leaves room to tune it and try it in the
    model beside the `pending` dispatches, and the share of the kin left untuned can clear the
    model rule (as the profile's gate asks); add it to them with that share. None otherwise. The hot set (and profile.json, which `ireetune continue` reads)
    then selects it too."""
    hot = run.hot_set
    tuned_problems = {p.problem for p in hot.ranked if p.name in run.candidates}
    left = [p for p in find_kin_profiles(tuned, hot.ranked) if p.problem not in tuned_problems]
    if not left:
        return None
    share = sum(p.total_ms for p in left) / max(hot.model_ms, hot.explained_ms)
    if best_possible_speedup(share) <= MODEL_RULE.threshold:
        return None  # As the profile's gate (model/gate.py): too small to clear the rule.
    if not _room_for(run, scheduler, len(pending) + 1, time.monotonic()):
        return None
    back = max(left, key=lambda p: (p.total_ms, p.name))
    pending.append(_task_of(hot, back, share))
    run.hot = replace(hot, selected=(*hot.selected, back))
    write_profile(run.run_dir, run.hot)
    run.notes.append(
        f"{back.name}: selected as well: {tuned.name}, its kin, carried its candidates to none "
        "of its kin"
    )
    return back


def _dispatches_that_fit(run: ModelTuningRun, count: int, now: float) -> tuple[int, float | None]:
    """Return how many of `count` dispatches to tune, and when the phase ends: the most whose
    least slots fit in the phase that leaves the selection what trying them (and the ones tuned
    before a continue) in the model needs (no budget: all of them, no end)."""
    tuned_before = _tuned_with_candidates(run)
    while count > 0:
        ends_at = run.scheduler.dispatch_phase_deadline(
            now, selection_seconds(run, tuned_before + count)
        )
        if ends_at is None or ends_at - now >= count * LEAST_SLOT_S:
            return count, ends_at
        count -= 1
    return 0, now


def _left_out_note(run: ModelTuningRun, count: int, hot: int) -> str:
    """Say why a hot dispatch was left out of the dispatch phase."""
    if count:
        return (
            f"not tuned: the time budget leaves room to tune and try in the model {count} of the "
            f"{hot} hot dispatches, the ones expected to gain most"
        )
    left = run.seconds_left() or 0.0
    return (
        f"not tuned: what is left of the time budget ({max(0.0, left):.0f} s) can not tune a "
        f"dispatch and still try it in the model (a compile of the model takes "
        f"{run.costs.compile_s:.0f} s)"
    )


# The least a dispatch's slot lasts: a compile of its candidates and a first pass on the
# 2-core machine (a 24-candidate matmul took 12 s).
LEAST_SLOT_S = 10.0


def _task_of(hot: HotSet, profile: DispatchProfile, share: float | None = None) -> DispatchTask:
    """Return a hot dispatch as the scheduler sees it: its family (the first word of its
    problem, as `conv_1x32x56x56...`), its group's share of the model (every dispatch of the
    problem and of its kin counts: its candidates configure them all; `share` when given) and
    what its tuning is expected to cut before any of its family was: from how far it runs from
    the model's fastest dispatches (model/headroom.py). Where that is known, the family is also
    split at half the fastest's throughput: a dense convolution at the ceiling teaches nothing
    about a depthwise one at a tenth of it."""
    found = efficiencies(hot.ranked)
    efficiency = found.get(profile.name)
    headroom = "" if efficiency is None else "/near" if efficiency >= NEAR_FASTEST else "/far"
    return DispatchTask(
        profile.name,
        profile.problem.split("_")[0] + headroom,
        problem_share(hot, profile) if share is None else share,
        prior_cut(profile, found),
    )


def _headroom_note(efficiency: float | None) -> str:
    """Say how far a dispatch ran from the model's fastest (model/headroom.py), where known."""
    if efficiency is None:
        return ""
    return f" (it ran at {efficiency:.0%} of the throughput the model's fastest dispatches reach)"


def _session_note(tuned: DispatchProfile, default_ms: float | None, scale: float) -> str:
    """Say, when the tuning session timed the default faster than the profile did (`scale`
    below 1, which needs both times), what the gain counts instead: the time the session's
    default loses."""
    if scale >= 1.0:
        return ""
    return (
        f", counted from its session's {default_ms:.4g} ms a launch for the default, not the "
        f"profile's {tuned.dispatch_ms:.4g} ms"
    )


def _tune_one_dispatch(
    run: ModelTuningRun, hot: DispatchProfile, slot_s: float | None, share: float = 1.0
) -> tuple[float | None, bool, float | None]:
    """Tune one hot dispatch within `slot_s` seconds (None: no limit; 0: none left); keep its
    best candidates, or say why it was not tuned. Return its best candidate's speedup alone (in
    its own session; 1.0 when none was measured), None when it was not tuned or its tuning
    failed; whether its candidates were carried to its kin (model/kin.py; True when it was
    not tuned: its kin have nothing to gain from another try); and its session's time of the
    default, ms a launch (None without one)."""
    options = run.options
    if run.budget_spent():
        run.dispatch_notes[hot.name] = "not tuned: time budget spent"
        return None, True, None
    if slot_s is not None and slot_s <= 0:
        run.dispatch_notes[hot.name] = (
            "not tuned: the dispatch phase's share of the time budget was spent (the rest "
            "is kept for trying the tuned dispatches in the model)"
        )
        return None, True, None
    needed = min(needed_dispatch_speedup(share, MODEL_RULE.threshold), MAX_THRESHOLD)
    try:
        result = _resume_killed_tuning(run, hot) or tune_dispatch(
            TuneOptions(
                input_path=hot.benchmark_path, target=options.target,
                num_candidates=options.num_candidates, output_dir=run.run_dir / "tuning",
                jobs=options.jobs, seed=options.seed, database_path=options.database_path,
                use_database=options.use_database, retune=options.retune,
                show_progress=options.show_progress, extra_flags=run.target.global_flags,
                devices=options.devices, time_budget_s=slot_s, confirm_above=needed,
                decide_on_dispatch_benchmark=True,
            ),
            run.executor,
        )  # fmt: skip
    except IreetuneError as failure:
        run.dispatch_notes[hot.name] = f"not tuned: {failure}"
        return None, True, None
    if result.reused:
        run.dispatch_notes[hot.name] = "stored result reused from the tuning database"
    if result.best is not None:
        run.winners[hot.name] = result.run_dir / result.best.spec_path
    kept = order_candidates(result.records, result.best)[: options.candidates_per_dispatch]
    own = [KeptCandidate.of(r, result.run_dir, result.baseline_ms) for r in kept]
    # Not to the kin tuned on their own (model/kin.py), whose own specs configure them.
    profiles = run.hot.ranked if run.hot is not None else (hot,)
    tuned = {p.problem for p in profiles if p.name in run.candidates}
    ranked = [p for p in profiles if p.problem not in tuned]
    extended = extend_with_kin(run.target, hot, ranked, own, run.run_dir / KIN_FOLDER)
    run.candidates[hot.name] = extended.specs
    if extended.note is not None:
        run.notes.append(f"{hot.name}: {extended.note}")
    extended.note_kin(hot.name, run.dispatch_notes)
    run.session_ms.update(session_times(extended, kept, result.baseline_ms))
    if not kept:
        run.dispatch_notes[hot.name] = "no candidate could be measured"
    elif not any(r.confirmed for r in result.records) and needed > 1.0:
        run.dispatch_notes[hot.name] = (
            f"stopped after its first pass: no candidate reached the {needed:.3f}x alone that "
            f"its {share:.1%} of the model needs to clear the model rule; its fastest are "
            "still tried in the model"
        )
    timed = [r.median_ms for r in result.records if r.median_ms and not r.is_baseline]
    carried = bool(extended.kin_names)
    if not timed or math.isnan(result.baseline_ms):
        return 1.0, carried, None
    return float(result.baseline_ms / min(timed)), carried, float(result.baseline_ms)


def session_times(
    extended: Extended, kept: Sequence[CandidateRecord], baseline_ms: float
) -> dict[Path, tuple[float, float]]:
    """Return the default's and each extended spec's time alone, from its candidate's record in
    the dispatch's own session (the report's "default ms" and "tuned ms"); none for a candidate
    stopped early, whose one call is not its time (ZFNet-512's kept `conv_256x25x25x5` read
    6.1 ms in its one call and ran at 0.49 of the default's time in the model, 2026-12-07), and
    none without the default's time."""
    if math.isnan(baseline_ms):
        return {}
    return {
        spec: (baseline_ms, record.median_ms)
        for spec, source in zip(extended.specs, extended.sources, strict=True)
        for record in (kept[source],)
        if record.median_ms and not record.stopped_early
    }


def _resume_killed_tuning(run: ModelTuningRun, hot: DispatchProfile) -> TuneResult | None:
    """Continue the dispatch's tuning where a killed run left it (`ireetune continue` of a model
    run stopped in the dispatch phase): its newest folder under tuning/ whose options name the
    dispatch's benchmark, resumed at the stage after the last one it saved. None when there is
    none, or when that run can not be resumed (finished, stopped in online rounds or before its
    specs were saved): the dispatch is then tuned again, in a new folder."""
    tuning = run.run_dir / "tuning"
    folders = [path.parent for path in tuning.glob(f"*/{OPTIONS_NAME}")]
    benchmark = hot.benchmark_path.resolve()
    for folder in sorted(folders, key=lambda path: path.stat().st_mtime, reverse=True):
        try:
            tuned = read_run_options(folder).input_path.resolve()
        except IreetuneError:
            continue  # Another dispatch's folder, or none this version can read: not this one.
        if tuned != benchmark:
            continue
        try:
            result = resume_dispatch(folder, run.executor, run.options.database_path)
        except IreetuneError as refusal:
            run.notes.append(f"{hot.name}: its killed tuning run was not resumed: {refusal}")
            return None
        run.notes.append(f"{hot.name}: its killed tuning run was resumed in {folder.name}")
        return result
    return None


def decide(run: ModelTuningRun) -> Pause | None:
    """Judge the flag phase's finalists with the kept specs (flows/model/flag_finalists.py),
    check the kept specs on the whole model, then the flags with them; record the result."""
    before = FlagChoice.of(run)
    judge_flag_finalists(run)
    run.final = final = _final_check(run)
    if before.flag_search is not run.flag_search and (final.tuned_spec is None or final.dropped):
        # The runner-up won with the specs it was judged with; without all of them it is only
        # a set the flag phase ranked below the winner.
        before.restore(run)
        run.notes.append(
            "the final check did not keep every spec with the runner-up's flags: the flag "
            "phase's winner is kept"
            + (", and the specs the selection kept checked again with it" if run.accepted else "")
        )
        run.final = final = _final_check(run)
    for name in [n for n in run.accepted if final.tuned_spec is None or n in final.dropped]:
        run.dispatch_notes[name] = (
            "candidate spec kept in selection, then dropped at the final check"
        )
        del run.accepted[name]
    combined, tuned_flags_path, tuned_vmfb = _finish_flags(run)
    run.result = ModelTuneResult(
        run.run_dir, final.default_ms, final.tuned_ms, final.tuned_spec, dispatch_outcomes(run),
        tuple(run.notes), final.estimate, run.target.global_flags, run.flag_search,
        tuned_flags_path, combined, run.under_tuning.mlir_path, run.import_estimate, tuned_vmfb,
    )  # fmt: skip
    return None


def _final_check(run: ModelTuningRun) -> FinalCheck:
    """Check the accepted specs together on the whole model against the run's default."""
    assert run.default_vmfb is not None
    # The harm search leaves the flags' combined check and the report their time; a comparison
    # still undecided may time more rounds while they leave the whole tail its time.
    now = time.monotonic()
    ends_at = run.scheduler.decide_deadline(now)
    extend_until = run.scheduler.extension_deadline(now, run.costs.load_s)
    return check_final_set(
        run.executor, run.under_tuning, run.run_dir, run.accepted, run.default_vmfb,
        FinalTiming(run.options.rounds, ends_at, extend_until), run.notes,
    )  # fmt: skip


def _finish_flags(
    run: ModelTuningRun,
) -> tuple[SpeedupEstimate | None, Path | None, Path | None]:
    """Write tuned_flags.txt, time the untouched default against the tuned model (flags, split
    import and spec as kept) when the run built it, record both; return the combined check,
    the flags file and the tuned model's binary (None: the run built none)."""
    model, options, run_dir, flag_search = (
        run.under_tuning,
        run.options,
        run.run_dir,
        run.flag_search,
    )
    assert run.final is not None and run.original_vmfb is not None
    assert run.default_vmfb is not None
    # A continued run describes the flag phase's timing again from the untouched target.
    flag_request = run.flag_request or flag_search_request(
        run, parse_target(options.target).with_global_flags(options.extra_flags)
    )
    tuned_spec_path = run.final.tuned_spec
    flags = model.target.global_flags
    runtime_flags = flag_search.runtime_flags if flag_search is not None else ()
    tuned_flags_path = write_flag_files(run_dir, flags, runtime_flags)
    combined = None
    # Against the untouched default whenever the run's default is not it (a flag set or the
    # split import kept): the run built the tuned model.
    final_vmfb = run.tuned_binary(tuned_spec_path)
    if final_vmfb is not None:
        if tuned_spec_path is not None:
            error = model.compile(tuned_spec_path, final_vmfb)
            assert not error, f"the tuned model compiled in the final check: {error}"
        combined, why = measure_combined(
            run.executor, run.original_vmfb, final_vmfb, flag_request, run_dir / "final",
            runtime_flags,
        )  # fmt: skip
        if combined is None:
            run.notes.append(f"the combined check of flags and spec failed: {why}")
    if options.use_database:
        record_model_result(
            options.database_path or default_database_path(),
            ModelKey(compiler_version(), model.target.name, describe_device(model.device), hash_model(model.mlir_path)),
            ModelResult(
                options.model_path.name, flags,
                flag_search.estimate.speedup if flag_search and flag_search.estimate else None,
                flag_search.estimate.low if flag_search and flag_search.estimate else None,
                flag_search.estimate.high if flag_search and flag_search.estimate else None,
                (flag_search.rule if flag_search else MODEL_RULE).name,
                tuned_spec_path.read_text() if tuned_spec_path else "",
                combined.speedup if combined else None, combined.low if combined else None,
                combined.high if combined else None, str(run_dir),
            ),
        )  # fmt: skip
    return combined, tuned_flags_path, final_vmfb


# The body of every phase of the model flow, in process.
LOCAL_PHASES: dict[Phase, PhaseBody] = {
    Phase.PREPARE: prepare,
    Phase.FLAGS: flag_phase,
    Phase.PROFILE: profile,
    Phase.DISPATCHES: tune_dispatches,
    Phase.VARIANTS: select_variants,
    Phase.DECIDE: decide,
    Phase.REPORT: report,
}
