"""Reuse a stored winner: write the run folder from the database instead of tuning."""

from __future__ import annotations

import math
from pathlib import Path

from ireetune.core.files import write_text_atomically
from ireetune.core.records import CandidateRecord, CandidateStatus
from ireetune.core.target import OpConfiguration
from ireetune.core.version import __version__
from ireetune.database.store import StoredResult
from ireetune.flags.file import FLAGS_FILE_NAME, write_flags_file
from ireetune.flows.dispatch.state import DispatchRun
from ireetune.report.recorder import RunRecorder
from ireetune.report.result import TuneResult
from ireetune.report.summary import SummaryHeading, render_summary
from ireetune.spec.builder import build_configuration_spec


def reuse_stored_winner(run: DispatchRun, stored: StoredResult, run_dir: Path) -> TuneResult:
    """Write a run folder from a stored winner (reached here, under this rule) instead of tuning."""
    options, target, context, problem, key = (
        run.options, run.target, run.context, run.problem, run.result_key,
    )  # fmt: skip
    configuration = (
        run.configuration(stored.knobs)
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
