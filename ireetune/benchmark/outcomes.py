"""Fold a benchmark campaign's result into the candidates' records."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ireetune.benchmark.campaign import CampaignResult, CandidateMeasurement
from ireetune.benchmark.runner import BenchmarkStatus
from ireetune.benchmark.stats import compute_stats
from ireetune.core.errors import IreetuneError
from ireetune.core.records import CandidateRecord, CandidateStatus

_FAILED_STATUS = {
    BenchmarkStatus.FAILED: CandidateStatus.BENCHMARK_FAILED,
    BenchmarkStatus.TIMED_OUT: CandidateStatus.BENCHMARK_TIMED_OUT,
    BenchmarkStatus.CRASHED: CandidateStatus.CRASHED,
    BenchmarkStatus.DEVICE_ERROR: CandidateStatus.DEVICE_ERROR,
}


def record_measurement(
    record: CandidateRecord, measurement: CandidateMeasurement
) -> CandidateRecord:
    """Return the record updated with one measurement (or its failure)."""
    if measurement.status is not BenchmarkStatus.MEASURED:
        # A candidate stopped at a deadline set from the baseline is recorded as stopped early.
        return replace(
            record, status=_FAILED_STATUS[measurement.status], device=measurement.device,
            reason=measurement.reason, stopped_early=measurement.stopped_early,
        )  # fmt: skip
    stats = compute_stats(measurement.times_ms)
    reason = measurement.reason
    if measurement.stopped_early and measurement.speedup:
        reason = f"stopped early: over {1 / measurement.speedup:.1f}x the baseline"
    return replace(
        record, status=CandidateStatus.MEASURED, device=measurement.device, reason=reason,
        times_ms=measurement.times_ms, median_ms=stats.median_ms, min_ms=stats.min_ms,
        max_ms=stats.max_ms, spread=stats.spread, stopped_early=measurement.stopped_early,
        speedup=measurement.speedup, confirmed=measurement.confirmed, rounds_ms=measurement.rounds_ms,
        timing=measurement.timing.value if measurement.timing else "", batch=measurement.batch,
    )  # fmt: skip


def apply_campaign(
    records: dict[int, CandidateRecord], result: CampaignResult, info: dict[str, Any]
) -> tuple[list[CandidateRecord], float]:
    """Fold a campaign into the run: return the changed records and the baseline's median ms.

    The caller stores the records (`records` itself is not changed); `info` gets the per-device
    baselines, noise, drift and confirmation facts. The baseline record (candidate 0) keeps the
    first device's timings; every candidate's speedup stays relative to its own device's
    baseline.
    """
    changed = [
        record_measurement(records[m.candidate_id], m)
        for m in sorted(result.candidates.values(), key=lambda m: m.candidate_id)
    ]
    measured_devices = [b for b in result.baselines.values() if not b.error]
    if not measured_devices:
        errors = "; ".join(b.error for b in result.baselines.values())
        raise IreetuneError(f"the default configuration could not be measured: {errors}")
    first = measured_devices[0]
    baseline_times = first.confirmed_ms or (first.before_ms + first.after_ms)
    stats = compute_stats(baseline_times)
    info["session_baseline_ms"] = {b.device: b.reference_ms for b in measured_devices}
    changed.append(replace(
        records[0], status=CandidateStatus.MEASURED, device=first.device, times_ms=tuple(baseline_times),
        median_ms=stats.median_ms, min_ms=stats.min_ms, max_ms=stats.max_ms, spread=stats.spread,
        speedup=1.0, confirmed=bool(first.confirmed_rounds_ms), rounds_ms=first.confirmed_rounds_ms,
        timing=first.timing.value if first.timing else "", batch=first.batch,
    ))  # fmt: skip
    info["baseline_noise"] = stats.noise
    info["baseline_drift"] = {b.device: b.drift for b in measured_devices if b.drift is not None}
    # The first pass's baseline medians in the order timed (before, between candidates, after):
    # how the machine's speed moved under the candidates it divides.
    info["baseline_first_pass_ms"] = {
        b.device: [
            compute_stats(times).median_ms if times else None
            for times in (b.before_ms, *b.brackets_ms, b.after_ms)
        ]
        for b in measured_devices
    }
    info["confirmed"] = {
        device: sorted(
            m.candidate_id for m in result.candidates.values() if m.confirmed and m.device == device
        )
        for device in result.baselines
    }
    if first.timing is not None:
        info["timing"] = {"kind": first.timing.value, "batch": first.batch}
    info["benchmark_seconds"] = result.seconds
    info["benchmark_candidates_per_second"] = result.measured_per_second
    return changed, stats.median_ms


def campaign_timings(result: CampaignResult) -> int:
    """Return how many timings of a binary the campaign's busiest device ran (its devices run
    at once): its candidates' first pass, failed ones included, and every baseline timing, the
    confirmation's rounds included."""
    per_device = {
        device: 2 + len(b.brackets_ms) + len(b.confirmed_rounds_ms)
        for device, b in result.baselines.items()
    }
    for measurement in result.candidates.values():
        per_device[measurement.device] = (
            per_device.get(measurement.device, 0) + 1 + len(measurement.rounds_ms)
        )
    return max(per_device.values(), default=0)
