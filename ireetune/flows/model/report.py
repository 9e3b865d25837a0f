"""The report of a model run, in process (`write_report`) or split (`write_split_report`):
report.txt for people, report.json for the viewers; the flag phase is described alike in both."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Sequence

from ireetune.core.files import write_text_atomically
from ireetune.core.records import MODEL_REPORT_FORMAT
from ireetune.flags.file import FLAGS_FILE_NAME
from ireetune.flags.model_search import apply_command
from ireetune.flags.trials import FlagSearchResult, describe_trial, trial_row
from ireetune.flows.model.flag_phase import RUNTIME_NOTE, SPLIT_FLAG_NOTE
from ireetune.flows.model.options import ModelTuneOptions
from ireetune.flows.model.run import ModelTuneResult, ModelTuningRun
from ireetune.flows.model.state import SplitSection
from ireetune.model.hot import HotSet
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


def _flag_report_lines(options: ModelTuneOptions, result: ModelTuneResult) -> list[str]:
    """Say which global flags the tuned model uses, what they were worth, and how to apply them."""
    lines = ["", *describe_flag_phase(result.flag_search, result.flags)]
    if result.combined is not None:
        lines.append(
            f"combined (tuned flags and spec) over default flags without spec: "
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


def write_report(run: ModelTuningRun) -> None:
    """Write the run's report.txt and report.json from its result and hot set."""
    options, hot, result, run_dir = run.options, run.hot_set, run.result, run.run_dir
    assert result is not None
    wall_s = time.monotonic() - run.started
    lines = [
        f"model: {options.model_path}   target: {options.target}",
        ("specs, both under the tuned flags: " if result.flags else "")
        + f"default {result.default_ms:.3f} ms, tuned {result.tuned_ms:.3f} ms, speedup "
        + (result.estimate.describe() if result.estimate else f"{result.speedup:.3f}x")
        + f" (whole model, {2 * options.rounds} calls each, default and tuned interleaved in one "
        "process, 95% paired interval)",
        explain_profile(hot),
        f"tuning wall time {wall_s:.0f} s; {describe_coverage(hot)}",
        "",
        f"{'share':>6} {'runs':>4} {'default ms':>10} {'tuned ms':>9}  {'dispatch':<40} problem / note"
        "   (default and tuned ms of a tuned dispatch: its own tuning session)",
    ]
    for outcome in result.dispatches:
        if outcome.share < 0.005 and not outcome.kept_spec and outcome.note == "not selected":
            continue
        lines.append(
            f"{outcome.share:>6.1%} {outcome.invocations:>4} {outcome.default_ms or 0:>10.4f} "
            f"{'-' if outcome.tuned_ms is None else f'{outcome.tuned_ms:.4f}':>9}  "
            f"{outcome.name[:40]:<40} {outcome.problem}"
            + (f" | {outcome.note}" if outcome.note else "")
        )
    lines.extend(f"note: {n}" for n in result.notes)
    if result.tuned_spec_path is not None:
        lines.append(f"tuned spec: {result.tuned_spec_path}")
    lines.extend(_flag_report_lines(options, result))
    text = "\n".join(lines) + "\n"
    write_text_atomically(run_dir / "report.txt", text)
    payload = {
        "format": MODEL_REPORT_FORMAT,
        "model": str(options.model_path),
        "target": options.target,
        # The model and its dispatches were profiled and timed on the first; candidates on all.
        "devices": list(options.devices) or [parse_target(options.target).runtime_device],
        "default_ms": result.default_ms,
        "tuned_ms": result.tuned_ms,
        "speedup": result.speedup,
        "speedup_low": result.estimate.low if result.estimate else None,
        "speedup_high": result.estimate.high if result.estimate else None,
        "rule": MODEL_RULE.name,
        "wall_s": wall_s,
        "tuned_spec": str(result.tuned_spec_path) if result.tuned_spec_path else None,
        "notes": list(result.notes),
        "dispatches": [outcome.__dict__ for outcome in result.dispatches],
        "flags": list(result.flags),
        "tuned_flags": str(result.tuned_flags_path) if result.tuned_flags_path else None,
        "flag_search": flag_search_json(result.flag_search),
        "combined_speedup": result.combined.speedup if result.combined else None,
        "combined_low": result.combined.low if result.combined else None,
        "combined_high": result.combined.high if result.combined else None,
    }  # fmt: skip
    write_text_atomically(
        run_dir / "report.json", json.dumps(payload, indent=2, default=str) + "\n"
    )


# --- The split run's report ---------------------------------------------------------------


def write_split_report(run: ModelTuningRun) -> None:
    """Write report.txt and report.json of a decided split run."""
    run_dir, state, options, hot = run.run_dir, run.split_state, run.options, run.hot_set
    assert run.variant_verdict is not None, "the decide phase reaches the verdict"
    verdict = run.variant_verdict
    flags = run.target.global_flags
    flags_path = run_dir / FLAGS_FILE_NAME if flags else None
    variants = verdict.variants
    winner = state.winner
    estimate = verdict.estimates.get(winner) if winner else None
    compile_s = sum(t.seconds for t in state.timings if t.host == "compile")
    device_s = sum(t.seconds for t in state.timings if t.host == "device")
    lines = [
        f"model: {options.model_path}   target: {options.target}   devices: "
        f"{', '.join(state.devices)}   (split flow)",
        ("specs, both under the tuned flags: " if flags and estimate else "")
        + (
            f"default {estimate.baseline_ms:.3f} ms, tuned {estimate.candidate_ms:.3f} ms, speedup "
            f"{estimate.describe()} (whole model, variant '{winner}', "
            f"{estimate.rounds} rounds of {variants['calls_per_round'] if variants else 1} calls "
            "each, default and tuned interleaved in one process, 95% paired interval)"
            if estimate
            else "no variant made the model faster by the rule; no tuned spec written"
        ),
        explain_profile(hot),
        f"rule: {MODEL_RULE.name}",
        f"round trips: {state.round_trip}; compile host {compile_s:.0f} s, device {device_s:.0f} s",
    ]
    lines += [f"  {t.phase:<12} {t.host:<8} {t.seconds:8.1f} s" for t in state.timings]
    lines += ["", f"{'share':>6} {'runs':>4} {'default ms':>10}  {'dispatch':<40} problem / note"]
    basis = max(hot.model_ms, hot.explained_ms, 1e-9)
    notes = run.dispatch_notes
    for profile in hot.ranked:
        share = profile.total_ms / basis
        if share < 0.005 and profile not in hot.selected:
            continue
        note = notes.get(profile.name, "" if profile in hot.selected else "not selected")
        lines.append(
            f"{share:>6.1%} {profile.invocations:>4} {profile.dispatch_ms or 0:>10.4f}  "
            f"{profile.name[:40]:<40} {profile.problem}" + (f" | {note}" if note else "")
        )
    lines += ["", "variants (each timed against the default; the confirmed ones decide):"]
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
    lines += [f"note: {n}" for n in run.notes]
    if winner:
        lines.append(f"tuned spec: {run_dir / 'tuned_spec.mlir'}")
    lines += ["", *describe_flag_phase(run.flag_search, flags), *_flag_notes(state)]
    if flags_path is not None:
        lines.append(f"tuned flags: {flags_path}")
    assert run.model_file is not None, "the prepare phase imports the model"
    model_mlir = run.model_file.mlir
    if winner or flags_path is not None:
        lines.append(
            "apply: "
            + apply_command(
                run_dir / model_mlir,
                parse_target(options.target),
                flags_path,
                run_dir / "tuned_spec.mlir" if winner else None,
            )  # fmt: skip
        )
    write_text_atomically(run_dir / "report.txt", "\n".join(lines) + "\n")
    assert state.profile is not None, "the device profiled the model"
    payload = {
        "format": MODEL_REPORT_FORMAT,
        "model": str(options.model_path), "target": options.target, "devices": state.devices,
        "flow": "split", "round_trips": state.round_trip,
        "timings": [timing.model_dump(mode="json") for timing in state.timings],
        "compile_s": compile_s, "device_s": device_s, "rule": MODEL_RULE.name,
        "default_ms": estimate.baseline_ms if estimate else state.profile.model_ms,
        "tuned_ms": estimate.candidate_ms if estimate else None,
        "speedup": estimate.speedup if estimate else 1.0,
        "speedup_low": estimate.low if estimate else None,
        "speedup_high": estimate.high if estimate else None,
        "winner": winner,
        "tuned_spec": str(run_dir / "tuned_spec.mlir") if winner else None,
        "variants": [row.model_dump(mode="json", exclude_unset=True) for row in state.variants],
        "dispatch_notes": notes,
        "notes": run.notes,
        "flags": list(flags),
        "tuned_flags": str(flags_path) if flags_path else None,
        "flag_search": flag_search_json(run.flag_search),
        "flag_notes": _flag_notes(state),
        "profile_model_ms": statistics.median(state.profile.model_times_ms),
    }  # fmt: skip
    write_text_atomically(run_dir / "report.json", json.dumps(payload, indent=2) + "\n")


def _flag_notes(state: SplitSection) -> list[str]:
    """Say what the split flow's flag phase left out, or why it did not run."""
    step = state.flags
    if not step.searched:
        return [f"note: flags not searched: {step.why}"] if step.why else []
    return [f"note: {SPLIT_FLAG_NOTE}", f"note: {RUNTIME_NOTE}"]
