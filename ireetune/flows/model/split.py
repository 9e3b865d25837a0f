"""The model flow's phases split between a compile host and a runtime-only device host.

The run folder is a state machine (the split section of `model_run.json`, state.py). This host runs every phase
that compiles; where a phase needs the device it writes `device_step.json` and the run pauses.
The device host runs `ireetune device-step RUN`, which does whatever the manifest lists, and each
`ireetune continue RUN` here reads the device's results and runs the phases again: a phase
keeps what is recorded as done and goes on where it stopped.

    prepare     import, inputs, the default model (one body for both modes: phases.py)
    flags       the target's known-good flag sets (or --try-flags), each compiled once and sorted
                by hash; [device] the distinct binaries timed against the default, interleaved
                in one process, the fastest timed again in a fresh session; the flag rule
                decides, and every later phase compiles with the winner (flag_phase.py)
    profile     the dispatch benchmarks (dumped, compiled, launches counted), and the candidates
                of the dispatches a static ranking puts first (FLOPs x launches): one
                dispatch-level benchmark folder each; then [device] profile the model and every
                dispatch, measure every dispatch folder; the measured hot set (one body for both
                modes: phases.py)
    dispatches  only when the measured hot set names a dispatch the static ranking missed: its
                folder, measured in one more round trip
    variants    each hot dispatch's verified winner and runners-up (flows/handoff/finish.py, the
                decision stage) become model variants: each alone, the winners together and
                each later rank's candidates together;
                [device] every variant timed against the default, interleaved in one process;
                the fastest by point estimate timed again in a fresh session
    decide      the decision stage's rule (MODEL_RULE) on the fresh session's intervals and the
                outputs; the winner's spec is `tuned_spec.mlir`
    report      report.txt and report.json

Two round trips when the static ranking covers the hot set, and one more for the flag phase when
it has a binary to time. Every phase can be run again after a kill: finished sub-steps are
recorded in the run file and kept. A folder whose model, device manifest or results do not match
the hashes recorded is refused with one line (split_device.py writes the manifests and reads the
results back).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from pathlib import Path

from ireetune.compile.driver import CompileStatus
from ireetune.compile.pool import default_jobs
from ireetune.core.errors import IreetuneError
from ireetune.decision.rules import Decision
from ireetune.decision.stats import SpeedupEstimate
from ireetune.executor.base import Executor
from ireetune.flags.file import FLAGS_FILE_NAME, write_flag_files
from ireetune.flows.handoff.finish import finish_run
from ireetune.flows.handoff.model_folder import LabelledBinary, VariantTask, hash_file
from ireetune.flows.model.flag_phase import flag_phase
from ireetune.flows.model.phases import compile_folders, prepare, profile
from ireetune.flows.model.report import dispatch_outcomes, report
from ireetune.flows.model.run import ModelTuneResult, ModelTuningRun, Pause, Phase, PhaseBody
from ireetune.flows.model.split_device import (
    default_model_of,
    load_outputs,
    record_time,
    relative_to_run,
    send_to_device,
)
from ireetune.flows.model.state import (
    SplitSection,
    SplitVariantFile,
)
from ireetune.flows.model.state_restore import save_run
from ireetune.model.candidates import order_candidates
from ireetune.model.hot import DispatchProfile
from ireetune.model.kin import KIN_FOLDER, KeptCandidate, extend_with_kin, find_kin_profiles
from ireetune.model.outputs import outputs_match
from ireetune.model.prepare import ModelUnderTuning
from ireetune.model.select import MODEL_RULE
from ireetune.model.timing import repetitions_for
from ireetune.model.variant_build import compile_variants
from ireetune.model.variants import (
    VariantPlan,
    VariantVerdict,
    decide_variants,
    first_session_estimate,
    plan_variants,
)


def complete_dispatches(run: ModelTuningRun) -> Pause | None:
    """Compile the folders of hot dispatches the static ranking missed; pause until every hot
    dispatch's folder was measured."""
    state = run.split_state
    if _variants_measured(run):
        return None
    # A group whose folder the ranking before the profile compiled for another kin is covered.
    hot = [_measured_of_group(run, p) for p in run.hot_set.selected]
    missing = [p for p in hot if p.problem not in state.folders]
    if missing:
        compile_folders(run, missing)
        record_time(state, "candidates", "compile", time.monotonic() - run.started)
    # Folders of hot problems that no device step has measured yet (compiled just now, or
    # before a kill) go out in one more round trip.
    unmeasured = sorted(
        {state.folders[p.problem] for p in hot if state.folders.get(p.problem)}
        - set(state.folder_outcomes)
    )  # fmt: skip
    if unmeasured:
        return send_to_device(run, folders=unmeasured)
    return None


def build_variants(run: ModelTuningRun) -> Pause | None:
    """Link and compile the model variants and pause for the device to time them (none: go on
    to decide without variants)."""
    if _variants_measured(run):
        return None
    variants = _compile_variants(run)
    record_time(run.split_state, "variants", "compile", time.monotonic() - run.started)
    if variants is None:
        return None
    return send_to_device(run, variants=variants)


def decide(run: ModelTuningRun) -> Pause | None:
    """Decide among the confirmed variants; write tuned_spec.mlir (if one won)."""
    run_dir, state = run.run_dir, run.split_state
    variants = (
        run.device_results["variants"]
        if run.device_results is not None and _variants_measured(run)
        else None
    )
    labels = [row.label for row in state.variants]
    decision: Decision | None = None
    estimates: dict[str, SpeedupEstimate | None] = {}
    winner_label = None
    if variants is not None:
        first = variants["first"]
        default_outputs = load_outputs(run_dir / first["default"]["outputs"])
        outputs_of = {
            label: outputs_match(default_outputs, load_outputs(run_dir / entry["outputs"]))
            if entry.get("outputs")
            else (False, entry.get("reason") or "did not run")
            for label, entry in first.items()
            if label != "default"
        }
        decision, estimates = decide_variants(variants, labels, outputs_of)
        for row in state.variants:
            judgement = decision.judgements.get(labels.index(row.label) + 1)
            estimate = estimates.get(row.label)
            measured = first.get(row.label)
            row.outputs_match = outputs_of.get(row.label, (None, ""))[0]
            row.confirmed = row.label in variants["contenders"]
            row.speedup = estimate.speedup if estimate else None
            row.speedup_low = estimate.low if estimate else None
            row.speedup_high = estimate.high if estimate else None
            row.verdict = judgement.verdict.value if judgement else ""
            row.why = judgement.reason if judgement else (measured or {}).get("reason", "")
            first_estimate = first_session_estimate(variants, row.label)
            row.first_speedup = first_estimate.speedup if first_estimate else None
            if not judgement and first_estimate and not row.why:
                row.why = f"not pre-selected: first session {first_estimate.speedup:.3f}x" + (
                    "" if row.outputs_match else ", outputs differ"
                )
        if decision.winner is not None:
            winner_label = labels[decision.winner - 1]
    if winner_label is not None:
        shutil.copyfile(
            run_dir / "variants" / f"{winner_label}_spec.mlir", run_dir / "tuned_spec.mlir"
        )
    # The tuned model's global flags (the user's, then the flag phase's winner), as in process.
    flags = run.target.global_flags
    write_flag_files(run_dir, flags, ())
    state.winner, state.rule = winner_label, MODEL_RULE.name
    record_time(state, "decide", "compile", time.monotonic() - run.started)
    save_run(run)
    run.variant_verdict = VariantVerdict(variants, decision, estimates)
    # The winner's specs by the dispatch each tunes (none in a folder older than that record).
    winner = next((row for row in state.variants if row.label == winner_label), None)
    run.accepted = (
        {name: run_dir / spec for name, spec in zip(winner.dispatches, winner.specs, strict=True)}
        if winner is not None and winner.dispatches
        else {}
    )
    estimate = estimates.get(winner_label) if winner_label else None
    default_ms = (
        estimate.baseline_ms if estimate else state.profile.model_ms if state.profile else 0.0
    )
    assert run.model_file is not None, "the prepare phase imports the model"
    run.result = ModelTuneResult(
        run_dir, default_ms, estimate.candidate_ms if estimate else default_ms,
        run_dir / "tuned_spec.mlir" if winner_label else None, dispatch_outcomes(run),
        tuple(run.notes), estimate, flags, run.flag_search,
        run_dir / FLAGS_FILE_NAME if flags else None, None, run_dir / run.model_file.mlir,
    )  # fmt: skip
    return None


# The body of every phase of the model flow, split between a compile and a device host.
SPLIT_PHASES: dict[Phase, PhaseBody] = {
    Phase.PREPARE: prepare,
    Phase.FLAGS: flag_phase,
    Phase.PROFILE: profile,
    Phase.DISPATCHES: complete_dispatches,
    Phase.VARIANTS: build_variants,
    Phase.DECIDE: decide,
    Phase.REPORT: report,
}


# --- What the phases share -------------------------------------------------------------------


def _variants_measured(run: ModelTuningRun) -> bool:
    """Say whether the device has timed this run's model variants (then only deciding is left)."""
    results = run.device_results
    return results is not None and "variants" in results and bool(run.split_state.variants)


def compile_variant_rows(
    executor: Executor,
    model: ModelUnderTuning,
    plans: Sequence[VariantPlan],
    run_dir: Path,
    state: SplitSection,
    jobs: int,
) -> tuple[list[SplitVariantFile], list[LabelledBinary]]:
    """Compile the variants into `run_dir/variants`; return the run file's rows for them and the
    binaries to time (a variant whose binary equals the default model's is "not-applied")."""
    variant_dir = run_dir / "variants"
    variant_dir.mkdir(exist_ok=True)
    default_hash = hash_file(run_dir / default_model_of(state))
    rows: list[SplitVariantFile] = []
    built: list[LabelledBinary] = []
    for plan, outcome in compile_variants(executor, model, plans, variant_dir, jobs):
        row = SplitVariantFile(
            label=plan.label, specs=[relative_to_run(run_dir, s) for s in plan.specs],
            spec=f"variants/{plan.label}_spec.mlir", status=outcome.status.value,
            reason=outcome.reason,
        )  # fmt: skip
        if outcome.status is CompileStatus.COMPILED and outcome.binary_hash == default_hash:
            row.status, row.reason = "not-applied", "the binary equals the default model's"
        elif outcome.status is CompileStatus.COMPILED:
            built.append(LabelledBinary(plan.label, f"variants/{plan.label}.vmfb"))
        rows.append(row)
    return rows, built


def _measured_of_group(run: ModelTuningRun, selected: DispatchProfile) -> DispatchProfile:
    """Return the dispatch of `selected`'s group to tune it through: itself when its folder was
    compiled, else a kin whose folder the device measured, else one whose folder was compiled
    (the ranking before the profile estimates costs and may have compiled another member than
    the measured profile selects), else itself."""
    state = run.split_state

    def measured(profile: DispatchProfile) -> bool:
        folder = state.folders.get(profile.problem, "")
        return bool(folder) and state.folder_outcomes.get(folder) == "measured"

    if selected.problem in state.folders:
        return selected
    kin = find_kin_profiles(selected, run.hot_set.ranked)
    compiled = [profile for profile in kin if state.folders.get(profile.problem)]
    return next((p for p in compiled if measured(p)), compiled[0] if compiled else selected)


def _ranked_specs(
    run: ModelTuningRun, hot: DispatchProfile, folder: Path, limit: int
) -> tuple[list[Path], str]:
    """Finish a measured dispatch folder; return its candidate specs, verified winner first
    (those faster alone first carried to the dispatch's kin, as in process: model/kin.py)."""
    result = finish_run(folder)
    ranked = order_candidates(result.records, result.best)[:limit]
    note = (
        f"dispatch winner {result.best.candidate_id}: {result.decision.winner_estimate.describe()}"
        if result.best is not None and result.decision and result.decision.winner_estimate
        else "no candidate won at dispatch level; the fastest measured are tried in the model"
    )
    kept = [KeptCandidate.of(r, folder, result.baseline_ms) for r in ranked]
    extended = extend_with_kin(run.target, hot, run.hot_set.ranked, kept, run.run_dir / KIN_FOLDER)
    extended.note_kin(hot.name, run.dispatch_notes)
    return extended.specs, note if extended.note is None else f"{note}; {extended.note}"


def _compile_variants(run: ModelTuningRun) -> VariantTask | None:
    """Link and compile the model variants; None when no hot dispatch has a candidate."""
    options, run_dir, state = run.options, run.run_dir, run.split_state
    candidates: list[tuple[str, list[Path]]] = []
    notes = run.dispatch_notes
    for selected in run.hot_set.selected:
        hot = _measured_of_group(run, selected)
        if hot is not selected:
            notes[selected.name] = f"tuned through its kin {hot.name}, whose folder was measured"
        folder = state.folders.get(hot.problem, "")
        outcome = state.folder_outcomes.get(folder, "not measured")
        if not folder or outcome != "measured":
            notes[hot.name] = notes.get(hot.name) or f"not tuned: {outcome}"
            continue
        try:
            specs, note = _ranked_specs(run, hot, run_dir / folder, options.candidates_per_dispatch)
        except IreetuneError as failure:
            notes[hot.name] = f"not tuned: {failure}"
            continue
        notes[hot.name] = note
        if specs:
            candidates.append((hot.name, specs))
    plans = plan_variants(candidates)
    if not plans:
        return None
    model = run.under_tuning
    variant_rows, built = compile_variant_rows(
        run.executor, model, plans, run_dir, state, options.jobs or default_jobs()
    )
    # Each variant's dispatches, in the order of its specs (a joint one: those of its rank).
    names = [name for name, _ in candidates]
    dispatches_of = {p.label: [names[i] for i in p.members] for p in plans}
    for row in variant_rows:
        row.dispatches = dispatches_of[row.label]
    state.variants = variant_rows
    save_run(run)
    if not built:
        return None
    assert state.profile is not None, "the device profiled the model"
    model_ms = state.profile.model_ms
    return VariantTask(
        tuple(built), rounds=options.rounds, calls_per_round=repetitions_for(model_ms),
        confirm_top=3, confirm_rounds=max(2 * options.rounds, 10), threshold=MODEL_RULE.threshold,
    )  # fmt: skip
