"""The report of a model run, in process or split (one writer, `write_report`): report.txt for
people, report.json for the viewers. Both modes decide into a `ModelTuneResult` whose dispatch
rows `dispatch_outcomes` builds; a split run adds its round trips and its variants."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

from ireetune.core.files import write_text_atomically
from ireetune.core.records import MODEL_REPORT_FORMAT
from ireetune.flags.model_search import apply_command
from ireetune.flags.trials import FlagSearchResult, describe_trial, trial_row
from ireetune.flows.model.deployment import report_deployment
from ireetune.flows.model.flag_phase import RUNTIME_NOTE, SPLIT_FLAG_NOTE
from ireetune.flows.model.phases import weighs_hot_set
from ireetune.flows.model.run import DispatchOutcome, ModelTuneResult, ModelTuningRun, Pause
from ireetune.flows.model.state import Mode, SplitSection
from ireetune.model.headroom import efficiencies
from ireetune.model.hot import DispatchProfile, HotSet
from ireetune.model.kin import KIN_FOLDER, find_kin_profiles
from ireetune.model.profile import explain_profile
from ireetune.model.select import MODEL_RULE
from ireetune.targets import parse_target


def describe_flag_phase(search: FlagSearchResult | None, flags: Sequence[str]) -> list[str]:
    """Say what the flag phase kept (or that it did not run, and the flags given) and every
    set it tried: the report lines of both modes."""
    lines: list[str] = []
    if search is None:
        lines.append("flag phase: not run" + (f"; flags given: {' '.join(flags)}" if flags else ""))
    else:
        timed = sum(1 for t in search.trials if t.first is not None)
        skipped = sum(1 for t in search.trials if t.status.value in ("no-effect", "duplicate"))
        verdict = (
            f"kept {search.winner.label}: {search.estimate.describe()} over default flags"
            if search.estimate is not None
            else "no flag set beat the default flags by the rule; defaults kept"
        )
        lines.append(
            f"flag phase ({search.rule.name}): {verdict}; {len(search.trials) - 1} sets tried, "
            f"{skipped} with no effect on the binary or duplicates (not timed), {timed} timed"
        )
        lines.extend(f"  {describe_trial(t)}" for t in search.trials[1:])
        lines.append(f"  all trials: {search.trials_path}")
    return lines


def flag_search_json(search: FlagSearchResult | None) -> dict[str, object] | None:
    """Return the flag phase's result as report.json holds it (None: the phase did not run)."""
    if search is None:
        return None
    return {
        "winner": list(search.winner.flags), "rule": search.rule.name,
        "trials": [trial_row(t) for t in search.trials], "trials_file": str(search.trials_path),
    }  # fmt: skip


def _flag_report_lines(run: ModelTuningRun, result: ModelTuneResult) -> list[str]:
    """Say which global flags the tuned model uses, what they were worth, and how to apply them."""
    options = run.options
    lines = ["", *describe_flag_phase(result.flag_search, result.flags)]
    if run.mode is Mode.SPLIT:
        lines += _flag_notes(run.split_state)
    if result.combined is not None:
        lines.append(
            f"combined (the tuned model as kept) over the default: "
            f"{result.combined.describe()} ({result.combined.baseline_ms:.3f} -> "
            f"{result.combined.candidate_ms:.3f} ms, interleaved in one process)"
        )
    if result.tuned_flags_path is not None:
        lines.append(f"tuned flags: {result.tuned_flags_path}")
    if result.tuned_flags_path is not None or result.tuned_spec_path is not None:
        target = parse_target(options.target)
        lines.append(
            "apply: "
            + apply_command(
                result.mlir_path or options.model_path,
                target,
                result.tuned_flags_path,
                result.tuned_spec_path,
            )  # fmt: skip
        )
    return lines


def describe_coverage(hot: HotSet) -> str:
    """Say how many problems were selected and what share of the time they cover: of the
    model's measured time, or of the dispatch total where the dispatch benchmarks add up to
    more than the model takes."""
    basis = "the model's measured time" if hot.model_ms >= hot.explained_ms else "dispatch time"
    share = hot.covered_ms / max(hot.model_ms, hot.explained_ms, 1e-9)
    return f"{len(hot.selected)} dispatch problem(s) selected, covering {share:.0%} of {basis}"


# The note of a dispatch the hot set did not select (report/html_report.py reads it too).
NOT_SELECTED = "not selected"


def _not_selected(efficiency: float | None) -> str:
    """Say why a dispatch was not selected: where the hot set was weighed by headroom
    (model/headroom.py) and its efficiency is known, that others were expected to gain more.
    The same words for each such dispatch: the report's table groups them in one row."""
    if efficiency is None:
        return NOT_SELECTED
    return (
        f"{NOT_SELECTED}: others were expected to gain more (the hot set weighs each dispatch's "
        "time by how far it ran from the model's fastest dispatches)"
    )


def dispatch_outcomes(run: ModelTuningRun) -> tuple[DispatchOutcome, ...]:
    """Say what happened to each profiled dispatch (the tuned and selected ones in detail)."""
    hot = run.hot_set

    def columns(profile: DispatchProfile) -> tuple[float | None, float | None]:
        # Default and tuned come from the same session: the dispatch's own tuning run.
        spec = run.accepted.get(profile.name)
        if spec is not None and spec in run.session_ms:
            return run.session_ms[spec]
        return profile.dispatch_ms, None

    # The kin a kept spec carries its configuration to (model/kin.py), by dispatch name.
    carried = {
        kin.name: (name, spec)
        for name, spec in run.accepted.items()
        if spec.parent == run.run_dir / KIN_FOLDER
        for tuned in hot.ranked
        if tuned.name == name
        for kin in find_kin_profiles(tuned, hot.ranked)
    }

    found = efficiencies(hot.ranked) if weighs_hot_set(run.options, run.mode) else {}

    def kept(profile: DispatchProfile) -> tuple[str | None, str]:
        note = run.dispatch_notes.get(
            profile.name, "" if profile in hot.selected else _not_selected(found.get(profile.name))
        )
        if profile.name in run.accepted:
            return str(run.accepted[profile.name]), note
        if profile.name in carried:
            name, spec = carried[profile.name]
            return str(spec), f"configured by {name}'s kept spec (its kin)"
        return None, note

    return tuple(
        DispatchOutcome(
            name=p.name,
            problem=p.problem,
            invocations=p.invocations,
            share=p.total_ms / max(hot.model_ms, hot.explained_ms) if hot.model_ms else 0.0,
            default_ms=columns(p)[0],
            tuned_ms=columns(p)[1],
            kept_spec=kept(p)[0],
            note=kept(p)[1],
        )
        for p in hot.ranked
    )


def _headline(run: ModelTuningRun, result: ModelTuneResult) -> str:
    """Say what the specs were worth on the whole model, and how that was measured."""
    estimate = result.estimate
    if run.mode is Mode.SPLIT:
        if estimate is None:
            return "no variant made the model faster by the rule; no tuned spec written"
        measured = run.variant_verdict.variants if run.variant_verdict else None
        calls = measured["calls_per_round"] if measured else 1
        how = f"variant '{run.split_state.winner}', {estimate.rounds} rounds of {calls} calls each"
    else:
        how = f"{2 * run.options.rounds} calls each"
    return (
        ("specs, both under the tuned flags: " if result.flags else "")
        + f"default {result.default_ms:.3f} ms, tuned {result.tuned_ms:.3f} ms, speedup "
        + (estimate.describe() if estimate else f"{result.speedup:.3f}x")
        + f" (whole model, {how}, default and tuned interleaved in one process, 95% paired "
        "interval)"
    )


def _dispatch_rows(result: ModelTuneResult) -> list[str]:
    """The table of the profiled dispatches: share, launches, times, and what each got."""
    lines = [
        f"{'share':>6} {'runs':>4} {'default ms':>10} {'tuned ms':>9}  {'dispatch':<40} problem / note"
        "   (default and tuned ms of a tuned dispatch: its own tuning session)",
    ]
    for outcome in result.dispatches:
        if (
            outcome.share < 0.005
            and not outcome.kept_spec
            and outcome.note.startswith(NOT_SELECTED)
        ):
            continue
        lines.append(
            f"{outcome.share:>6.1%} {outcome.invocations:>4} {outcome.default_ms or 0:>10.4f} "
            f"{'-' if outcome.tuned_ms is None else f'{outcome.tuned_ms:.4f}':>9}  "
            f"{outcome.name[:40]:<40} {outcome.problem}"
            + (f" | {outcome.note}" if outcome.note else "")
        )
    return lines


def _split_lines(state: SplitSection) -> list[str]:
    """A split run's round trips, each phase's time per host, and its variants."""
    lines = [
        f"round trips: {state.round_trip}; compile host {state.host_seconds('compile'):.0f} s, "
        f"device {state.host_seconds('device'):.0f} s",
        *(f"  {t.phase:<12} {t.host:<8} {t.seconds:8.1f} s" for t in state.timings),
        "",
        "variants (each timed against the default; the confirmed ones decide):",
    ]
    for row in state.variants:
        figure = (
            f"{row.speedup:.3f}x [{row.speedup_low:.3f}, {row.speedup_high:.3f}]"
            if row.speedup is not None
            else "-"
        )
        lines.append(
            f"  {row.label:<8} {row.status:<12} {figure:<26} {row.verdict} "
            f"{row.why or row.reason}".rstrip()
        )
    return lines


def _split_json(state: SplitSection) -> dict[str, object]:
    """What report.json holds of a split run besides what both modes write."""
    assert state.profile is not None, "the device profiled the model"
    return {
        "flow": "split", "round_trips": state.round_trip,
        "timings": [timing.model_dump(mode="json") for timing in state.timings],
        "compile_s": state.host_seconds("compile"), "device_s": state.host_seconds("device"),
        "winner": state.winner,
        "variants": [row.model_dump(mode="json", exclude_unset=True) for row in state.variants],
        "flag_notes": _flag_notes(state),
        "profile_model_ms": statistics.median(state.profile.model_times_ms),
    }  # fmt: skip


def report(run: ModelTuningRun) -> Pause | None:
    """The report phase of both modes: report.txt and report.json; in process, the tuned model
    timed against ONNX Runtime too (a split run's device host has only the IREE runtime)."""
    write_report(run)
    if run.mode is Mode.IN_PROCESS:
        assert run.result is not None and run.original_vmfb is not None
        runtime_flags = run.flag_search.runtime_flags if run.flag_search is not None else ()
        report_deployment(
            run.under_tuning, run.options, run.original_vmfb, run.result, runtime_flags
        )
    note = remove_variant_binaries(run.run_dir)
    if note:
        add_report_note(run.run_dir, note)
    return None


def remove_variant_binaries(run_dir: Path) -> str:
    """Delete the selection's variant binaries once the run is decided and reported; return a
    note saying what went ("" when nothing did).

    Each is a whole model with some dispatches' specs: ZFNet-512's selection left ten of 333 MiB
    (3.6 GB). The tuned model is built again from the report's `apply` line; each variant's spec
    stays beside where its binary was, and `selection/trials.json` keeps its binary's hash.
    """
    folder = run_dir / "selection"
    binaries = sorted(folder.glob("*.vmfb")) if folder.is_dir() else []
    freed = 0
    for binary in binaries:
        freed += binary.stat().st_size
        binary.unlink()
    if not binaries:
        return ""
    return (
        f"removed the selection's {len(binaries)} variant binaries ({freed / 1e6:.0f} MB); "
        "their specs stay beside them (selection/NAME_spec.mlir)"
    )


def add_report_note(run_dir: Path, note: str) -> None:
    """Add a note to the end of the run's report.txt and to report.json's notes."""
    text_path, json_path = run_dir / "report.txt", run_dir / "report.json"
    write_text_atomically(text_path, text_path.read_text() + f"note: {note}\n")
    payload = json.loads(json_path.read_text())
    payload["notes"] = [*payload.get("notes", []), note]
    write_text_atomically(json_path, json.dumps(payload, indent=2, default=str) + "\n")


def write_report(run: ModelTuningRun) -> None:
    """Write the run's report.txt and report.json from its result and hot set."""
    options, hot, result, run_dir = run.options, run.hot_set, run.result, run.run_dir
    assert result is not None, "the decide phase makes the result"
    split = run.mode is Mode.SPLIT
    wall_s = time.monotonic() - run.started
    devices = (
        run.split_state.devices
        if split
        else list(options.devices) or [parse_target(options.target).runtime_device]
    )
    lines = [
        f"model: {options.model_path}   target: {options.target}"
        + (f"   devices: {', '.join(devices)}   (split flow)" if split else ""),
        _headline(run, result),
        explain_profile(hot),
        f"rule: {MODEL_RULE.name}; {describe_coverage(hot)}"
        if split
        else f"tuning wall time {wall_s:.0f} s; {describe_coverage(hot)}",
        *(_split_lines(run.split_state) if split else []),
        "",
        *_dispatch_rows(result),
    ]
    lines.extend(f"note: {n}" for n in result.notes)
    if result.tuned_spec_path is not None:
        lines.append(f"tuned spec: {result.tuned_spec_path}")
    lines.extend(_flag_report_lines(run, result))
    write_text_atomically(run_dir / "report.txt", "\n".join(lines) + "\n")
    estimate, combined = result.estimate, result.combined
    payload = {
        "format": MODEL_REPORT_FORMAT,
        "model": str(options.model_path),
        "target": options.target,
        # The model and its dispatches were profiled and timed on the first; candidates on all.
        "devices": devices,
        "default_ms": result.default_ms,
        "tuned_ms": result.tuned_ms,
        "speedup": result.speedup,
        "speedup_low": estimate.low if estimate else None,
        "speedup_high": estimate.high if estimate else None,
        "rule": MODEL_RULE.name,
        "wall_s": wall_s,
        "tuned_spec": str(result.tuned_spec_path) if result.tuned_spec_path else None,
        "notes": list(result.notes),
        "dispatches": [outcome.__dict__ for outcome in result.dispatches],
        "dispatch_notes": dict(run.dispatch_notes),
        "flags": list(result.flags),
        "tuned_flags": str(result.tuned_flags_path) if result.tuned_flags_path else None,
        "flag_search": flag_search_json(result.flag_search),
        "combined_speedup": combined.speedup if combined else None,
        "combined_low": combined.low if combined else None,
        "combined_high": combined.high if combined else None,
        **(_split_json(run.split_state) if split else {}),
    }  # fmt: skip
    write_text_atomically(
        run_dir / "report.json", json.dumps(payload, indent=2, default=str) + "\n"
    )


def _flag_notes(state: SplitSection) -> list[str]:
    """Say what the split flow's flag phase left out, or why it did not run."""
    step = state.flags
    if not step.searched:
        return [f"note: flags not searched: {step.why}"] if step.why else []
    return [f"note: {SPLIT_FLAG_NOTE}", f"note: {RUNTIME_NOTE}"]
