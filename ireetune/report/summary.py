"""The human-readable summary of a dispatch tuning run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ireetune.benchmark.timing import TimingKind
from ireetune.core.candidate import format_knobs
from ireetune.core.records import CandidateRecord, CandidateStatus
from ireetune.decision.rules import Decision
from ireetune.report.ranking import rank_candidates


def count_by_status(records: Sequence[CandidateRecord]) -> dict[str, int]:
    """Count non-baseline candidates by final status, in the enum's order."""
    counts: dict[str, int] = {}
    for status in CandidateStatus:
        number = sum(1 for r in records if not r.is_baseline and r.status is status)
        if number:
            counts[status.value] = number
    return counts


# Below this, one call's launch and wait are a visible share of a dispatch's host-clock time.
TINY_DISPATCH_MS = 0.1


def _timing_lines(records: Sequence[CandidateRecord]) -> list[str]:
    """Say how the times were taken, per kind in use (the candidates.csv `timing` column), and
    warn where a tiny dispatch was timed one call at a time."""
    lines = []
    for kind in TimingKind:
        batches = sorted({r.batch for r in records if r.timing == kind.value})
        if batches:
            count = sum(1 for r in records if r.timing == kind.value)
            span = f"{batches[0]}" if len(batches) == 1 else f"{batches[0]}-{batches[-1]}"
            lines.append(f"timing: {kind.describe(span)} ({count} measurements)")
    baseline = next((r for r in records if r.is_baseline), None)
    per_call = (TimingKind.HOST.value, TimingKind.HOST_PER_CALL.value)
    median_ms = baseline.median_ms if baseline is not None else None
    if baseline and baseline.timing in per_call and median_ms and median_ms < TINY_DISPATCH_MS:
        lines.append(
            f"timing: the default takes {median_ms * 1000:.1f} us a call, so launch "
            "overhead is a large part of every time and speedups read smaller than they are"
        )
    return lines


def _unverified_lines(records: Sequence[CandidateRecord]) -> list[str]:
    """Say in one line which candidates are unverified and why: their outputs were never
    compared with the default's, which refuses them but does not make them wrong."""
    unverified = [r for r in records if r.status is CandidateStatus.UNVERIFIED]
    if not unverified:
        return []
    ids = ", ".join(str(r.candidate_id) for r in unverified)
    reasons = "; ".join(dict.fromkeys(r.reason for r in unverified if r.reason))
    return [f"unverified: candidates {ids} were not picked: {reasons or 'outputs not compared'}"]


@dataclass(frozen=True)
class SummaryHeading:
    """What a summary opens with: the problem, the target, how the default ran (median of the
    baseline's time) and the share of candidates that compiled."""

    problem_signature: str
    target_name: str
    baseline_ms: float
    compile_success_rate: float


def render_summary(
    heading: SummaryHeading,
    records: Sequence[CandidateRecord],
    best: CandidateRecord | None,
    notes: Sequence[str],
    decision: Decision | None = None,
    top: int = 10,
) -> str:
    """Render the run summary: counts, the top candidates table and the verdict."""
    problem_signature, target_name = heading.problem_signature, heading.target_name
    baseline_ms, compile_success_rate = heading.baseline_ms, heading.compile_success_rate
    baseline = next(r for r in records if r.is_baseline)
    lines = [
        f"problem: {problem_signature}   target: {target_name}",
        f"candidates: {sum(1 for r in records if not r.is_baseline)}   "
        f"compile success: {compile_success_rate:.0%}   "
        + "   ".join(f"{k}: {v}" for k, v in count_by_status(records).items()),
        f"baseline (candidate 0, compiler default {format_knobs(baseline.knobs) or 'n/a'}): "
        f"{baseline_ms:.4f} ms median, spread {baseline.spread or 0:.1%}",
        *_timing_lines(records),
        "",
        f"{'rank':>4} {'id':>4} {'median ms':>10} {'spread':>7} {'speedup':>8} {'95% interval':>16}  "
        f"{'status':<10} {'verdict':<8} knobs",
    ]
    for rank, record in enumerate(rank_candidates(records)[:top], start=1):
        interval = (
            f"[{record.speedup_low:.3f}, {record.speedup_high:.3f}]"
            if record.speedup_low is not None and record.speedup_high is not None
            else ""
        )
        lines.append(
            f"{rank:>4} {record.candidate_id:>4} {record.median_ms or 0:>10.4f} "
            f"{record.spread or 0:>7.1%} {record.speedup or 0:>7.3f}x {interval:>16}  "
            f"{record.status.value:<10} {record.verdict or '-':<8} {format_knobs(record.knobs)}"
        )
    lines.append("")
    estimate = decision.winner_estimate if decision is not None else None
    if best is not None and estimate is not None:
        lines.append(
            f"best: candidate {best.candidate_id}, {estimate.describe()} over the default on "
            f"{estimate.basis.value} timing ({estimate.baseline_ms:.4f} -> {estimate.candidate_ms:.4f} ms, "
            f"{estimate.rounds} rounds side by side, 95% interval), outputs verified"
        )
    elif best is not None:
        lines.append(
            f"best: candidate {best.candidate_id}, {best.speedup or 0:.3f}x over the default "
            f"({baseline_ms:.4f} -> {best.median_ms or 0:.4f} ms), outputs verified"
        )
    else:
        lines.append(
            "best: the compiler's default; no candidate passed every check (outputs equal the "
            "default's and the whole speedup interval above the threshold)"
        )
    lines.extend(_unverified_lines(records))
    lines.extend(f"note: {note}" for note in notes)
    return "\n".join(lines) + "\n"
