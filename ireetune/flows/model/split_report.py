"""The report of a split model run: the decision, the variants, the profile, where the time went."""

from __future__ import annotations

import json
import statistics

from ireetune.core.files import write_text_atomically
from ireetune.core.records import MODEL_REPORT_FORMAT
from ireetune.flags.file import FLAGS_FILE_NAME
from ireetune.flags.model_search import apply_command
from ireetune.flows.model.report import describe_flag_phase, flag_search_json
from ireetune.flows.model.run import ModelTuningRun
from ireetune.flows.model.split_flags import RUNTIME_NOTE, SPLIT_FLAG_NOTE
from ireetune.flows.model.split_state import SplitStateFile
from ireetune.model.profile import explain_profile
from ireetune.model.select import MODEL_RULE
from ireetune.targets import parse_target


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
    notes = state.dispatch_notes
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
    lines += [f"note: {n}" for n in state.notes]
    if winner:
        lines.append(f"tuned spec: {run_dir / 'tuned_spec.mlir'}")
    lines += ["", *describe_flag_phase(run.flag_search, flags), *_flag_notes(state)]
    if flags_path is not None:
        lines.append(f"tuned flags: {flags_path}")
    assert state.model is not None, "the prepare phase imports the model"
    model_mlir = state.model.mlir
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
        "notes": state.notes,
        "flags": list(flags),
        "tuned_flags": str(flags_path) if flags_path else None,
        "flag_search": flag_search_json(run.flag_search),
        "flag_notes": _flag_notes(state),
        "profile_model_ms": statistics.median(state.profile.model_times_ms),
    }  # fmt: skip
    write_text_atomically(run_dir / "report.json", json.dumps(payload, indent=2) + "\n")


def _flag_notes(state: SplitStateFile) -> list[str]:
    """Say what the split flow's flag phase left out, or why it did not run."""
    step = state.flags
    if step is None:
        return [
            "note: flags not searched: the run folder was written before the split flow ran the "
            "flag phase (give flags with --flags)"
        ]
    if not step.searched:
        return [f"note: flags not searched: {step.why}"] if step.why else []
    return [f"note: {SPLIT_FLAG_NOTE}", f"note: {RUNTIME_NOTE}"]
