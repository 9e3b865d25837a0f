"""Measure a dispatch's candidates on one or more devices against each device's own baseline.

Per device, in one thread each (the devices' queues run concurrently): time the baseline (which
also fixes the batch size of that device), the device's share of the candidates (dealt round
robin), the baseline again, and then a confirmation round that re-times the device's leaders
interleaved with the baseline. Every speedup is relative to the baseline measured on the same
device (seeds/002: chips of one SKU differ), so results from several devices rank together.

Runtime-only: this module and everything it imports run where only `iree-base-runtime` and
`numpy` are installed.
"""

from __future__ import annotations

import queue
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ireetune.benchmark.runner import (
    BenchmarkJob,
    BenchmarkOutcome,
    BenchmarkStatus,
    run_benchmarks,
)
from ireetune.benchmark.stats import compute_stats

# Baseline movement between before and after the candidates that is worth a note.
DRIFT_NOTE = 0.03
BASELINE_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class CampaignSettings:
    """How to time: repetitions, batch sizing, early stop and the confirmation round."""

    repetitions: int = 5
    min_repetition_s: float = 0.05
    hopeless_factor: float = 5.0
    confirm_top: int = 4
    confirm_rounds: int = 5
    min_timeout_s: float = 10.0


@dataclass(frozen=True)
class EarlierResult:
    """A candidate measured in an earlier session (from the database): a confirmation leader
    candidate on the first device, re-timed only if it leads."""

    job: BenchmarkJob
    speedup: float


@dataclass(frozen=True)
class CandidateMeasurement:
    """One candidate's result; `speedup` is against its own device's baseline."""

    candidate_id: int
    device: str
    status: BenchmarkStatus
    reason: str = ""
    times_ms: tuple[float, ...] = ()
    speedup: float | None = None
    stopped_early: bool = False
    confirmed: bool = False
    # The confirmation round's timings, one tuple per round interleaved with the baseline.
    rounds_ms: tuple[tuple[float, ...], ...] = ()


@dataclass(frozen=True)
class DeviceBaseline:
    """The baseline's timings on one device, and how much it moved during the run."""

    device: str
    batch: int
    before_ms: tuple[float, ...]
    after_ms: tuple[float, ...]
    confirmed_ms: tuple[float, ...]
    drift: float | None
    error: str = ""
    confirmed_rounds_ms: tuple[tuple[float, ...], ...] = ()

    @property
    def reference_ms(self) -> float:
        """The baseline time speedups divide: the confirmation round's, else before and after."""
        times = self.confirmed_ms or (self.before_ms + self.after_ms)
        return float(statistics.median(times))


@dataclass(frozen=True)
class CampaignResult:
    baselines: dict[str, DeviceBaseline]
    candidates: dict[int, CandidateMeasurement]
    notes: tuple[str, ...]
    seconds: float
    measured_per_second: float = field(default=0.0)


def _job_timeout(settings: CampaignSettings, batch: int, baseline_ms: float) -> float:
    """Allow load time plus 20x the baseline's time for one candidate's repetitions."""
    return settings.min_timeout_s + 20.0 * (settings.repetitions + 2) * batch * baseline_ms / 1000.0


def _measurement(
    outcome: BenchmarkOutcome, baseline_ms: float, confirmed: bool
) -> CandidateMeasurement:
    if outcome.status is not BenchmarkStatus.MEASURED:
        return CandidateMeasurement(
            outcome.candidate_id, outcome.device, outcome.status, outcome.reason
        )
    median = compute_stats(outcome.times_ms).median_ms
    return CandidateMeasurement(
        outcome.candidate_id, outcome.device, outcome.status, "", outcome.times_ms,
        baseline_ms / median, outcome.stopped_early, confirmed,
    )  # fmt: skip


def _run_device(
    device: str,
    baseline_job: BenchmarkJob,
    jobs: Sequence[BenchmarkJob],
    settings: CampaignSettings,
    earlier: Sequence[EarlierResult],
    results: dict[int, CandidateMeasurement],
    baselines: dict[str, DeviceBaseline],
    notes: list[str],
    measured: queue.Queue[CandidateMeasurement],
    lock: threading.Lock,
) -> None:
    # One worker process times the baseline, the candidates and the baseline again: the first
    # baseline fixes the batch, the early-stop threshold and the per-candidate timeout.
    outcomes = run_benchmarks(
        [baseline_job, *jobs, baseline_job], device, settings.repetitions, 0, BASELINE_TIMEOUT_S,
        min_repetition_s=settings.min_repetition_s, hopeless_factor=settings.hopeless_factor,
        timeout_after_first=lambda first: _job_timeout(
            settings, first.batch, compute_stats(first.times_ms).median_ms
        ),
    )  # fmt: skip
    before = next(outcomes)
    if before.status is not BenchmarkStatus.MEASURED:
        outcomes.close()
        reason = (
            f"baseline could not be measured on {device}: {before.status.value} {before.reason}"
        )
        with lock:
            baselines[device] = DeviceBaseline(device, 0, (), (), (), None, reason)
            for job in jobs:
                results[job.candidate_id] = CandidateMeasurement(
                    job.candidate_id, device, BenchmarkStatus.DEVICE_ERROR, reason
                )
        return
    batch = before.batch
    baseline_ms = compute_stats(before.times_ms).median_ms
    timeout_s = _job_timeout(settings, batch, baseline_ms)
    local: dict[int, CandidateMeasurement] = {}
    for _, outcome in zip(jobs, outcomes, strict=False):
        measurement = _measurement(outcome, baseline_ms, confirmed=False)
        local[outcome.candidate_id] = measurement
        measured.put(measurement)
    after = next(outcomes)
    after_ms: tuple[float, ...] = ()
    drift: float | None = None
    if after.status is BenchmarkStatus.MEASURED:
        after_ms = after.times_ms
        drift = abs(compute_stats(after_ms).median_ms - baseline_ms) / baseline_ms
        if drift > DRIFT_NOTE:
            with lock:
                notes.append(
                    f"baseline on {device} moved {drift:.1%} between before and after the candidates"
                )
    reference_ms = float(statistics.median(before.times_ms + after_ms))
    local = {cid: _rescale(m, reference_ms) for cid, m in local.items()}
    confirmed_rounds = _confirm(
        device, baseline_job, jobs, local, earlier, settings, batch, timeout_s
    )
    confirmed_ms = tuple(t for r in confirmed_rounds for t in r)
    with lock:
        results.update(local)
        baselines[device] = DeviceBaseline(
            device,
            batch,
            before.times_ms,
            after_ms,
            confirmed_ms,
            drift,
            confirmed_rounds_ms=confirmed_rounds,
        )


def _rescale(measurement: CandidateMeasurement, baseline_ms: float) -> CandidateMeasurement:
    if not measurement.times_ms:
        return measurement
    median = compute_stats(measurement.times_ms).median_ms
    return CandidateMeasurement(
        measurement.candidate_id, measurement.device, measurement.status, measurement.reason,
        measurement.times_ms, baseline_ms / median, measurement.stopped_early, measurement.confirmed,
    )  # fmt: skip


def _confirm(
    device: str,
    baseline_job: BenchmarkJob,
    jobs: Sequence[BenchmarkJob],
    local: dict[int, CandidateMeasurement],
    earlier: Sequence[EarlierResult],
    settings: CampaignSettings,
    batch: int,
    timeout_s: float,
) -> tuple[tuple[float, ...], ...]:
    """Re-time the leaders interleaved with the baseline; put their new results in `local`.

    Leaders come from this session's measurements and from `earlier` results; an earlier result
    enters `local` only when it leads (and so is re-timed here).
    """
    contenders = [m for m in local.values() if m.speedup is not None and not m.stopped_early]
    contenders += [
        CandidateMeasurement(
            e.job.candidate_id, device, BenchmarkStatus.MEASURED, speedup=e.speedup
        )
        for e in earlier
        if e.job.candidate_id not in local
    ]
    leaders = sorted(contenders, key=lambda m: (-(m.speedup or 0.0), m.candidate_id))[
        : settings.confirm_top
    ]
    if not leaders or settings.confirm_rounds < 1:
        return ()
    by_id = {job.candidate_id: job for job in (*jobs, *(e.job for e in earlier))}
    round_jobs = [baseline_job, *(by_id[m.candidate_id] for m in leaders)]
    rounds: dict[int, list[tuple[float, ...]]] = {job.candidate_id: [] for job in round_jobs}
    failures: dict[int, BenchmarkOutcome] = {}
    for outcome in run_benchmarks(
        round_jobs * settings.confirm_rounds, device, settings.repetitions, batch, timeout_s
    ):
        # A failed round stays in place (empty) so the rounds stay paired by position.
        measured = outcome.status is BenchmarkStatus.MEASURED
        rounds[outcome.candidate_id].append(outcome.times_ms if measured else ())
        if not measured:
            failures[outcome.candidate_id] = outcome
    times = {cid: [t for r in per_round for t in r] for cid, per_round in rounds.items()}
    if not times[0]:
        return ()
    baseline_ms = float(statistics.median(times[0]))
    for leader in leaders:
        if leader.candidate_id in failures:
            local[leader.candidate_id] = _measurement(
                failures[leader.candidate_id], baseline_ms, False
            )
            continue
        confirmed = times[leader.candidate_id]
        median = float(statistics.median(confirmed))
        local[leader.candidate_id] = CandidateMeasurement(
            leader.candidate_id, device, BenchmarkStatus.MEASURED,
            f"confirmed in {settings.confirm_rounds} rounds interleaved with the baseline",
            tuple(confirmed), baseline_ms / median, False, True, tuple(rounds[leader.candidate_id]),
        )  # fmt: skip
    return tuple(rounds[0])


def run_campaign(
    baseline: Path | BenchmarkJob,
    jobs: Sequence[BenchmarkJob],
    devices: Sequence[str],
    settings: CampaignSettings,
    on_measured: Callable[[CandidateMeasurement], None] | None = None,
    earlier: Sequence[EarlierResult] = (),
) -> CampaignResult:
    """Measure every job on one of `devices` (round robin), each device in its own thread.

    `on_measured` sees each first-pass measurement as it arrives (its speedup against the
    device's first baseline timing), always on the calling thread. `earlier` results take part
    in the first device's confirmation round. `baseline` is the default's job (or its binary).
    """
    assert devices, "at least one device"
    baseline_job = baseline if isinstance(baseline, BenchmarkJob) else BenchmarkJob(0, baseline)
    start = time.perf_counter()
    shares: dict[str, list[BenchmarkJob]] = {device: [] for device in devices}
    for index, job in enumerate(jobs):
        shares[devices[index % len(devices)]].append(job)
    results: dict[int, CandidateMeasurement] = {}
    baselines: dict[str, DeviceBaseline] = {}
    notes: list[str] = []
    lock = threading.Lock()
    measured: queue.Queue[CandidateMeasurement] = queue.Queue()
    threads = [
        threading.Thread(
            target=_run_device,
            args=(
                device, baseline_job, shares[device], settings, earlier if index == 0 else (),
                results, baselines, notes, measured, lock,
            ),
            name=f"benchmark-{device}",
        )
        for index, device in enumerate(devices)
    ]  # fmt: skip
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads) or not measured.empty():
        try:
            measurement = measured.get(timeout=0.1)
        except queue.Empty:
            continue
        if on_measured is not None:
            on_measured(measurement)
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - start
    count = sum(1 for m in results.values() if m.status is BenchmarkStatus.MEASURED)
    return CampaignResult(
        baselines, results, tuple(notes), seconds, count / seconds if seconds > 0 else 0.0
    )


def campaign_to_json(result: CampaignResult) -> dict[str, object]:
    """Return a JSON-ready form of a campaign's result (read back by `campaign_from_json`)."""
    return {
        "seconds": result.seconds,
        "measured_per_second": result.measured_per_second,
        "notes": list(result.notes),
        "baselines": [
            {
                "device": b.device,
                "batch": b.batch,
                "before_ms": list(b.before_ms),
                "after_ms": list(b.after_ms),
                "confirmed_ms": list(b.confirmed_ms),
                "drift": b.drift,
                "error": b.error,
                "confirmed_rounds_ms": [list(r) for r in b.confirmed_rounds_ms],
            }
            for b in result.baselines.values()
        ],  # fmt: skip
        "candidates": [
            {
                "candidate_id": m.candidate_id,
                "device": m.device,
                "status": m.status.value,
                "reason": m.reason,
                "times_ms": list(m.times_ms),
                "speedup": m.speedup,
                "stopped_early": m.stopped_early,
                "confirmed": m.confirmed,
                "rounds_ms": [list(r) for r in m.rounds_ms],
            }
            for m in sorted(result.candidates.values(), key=lambda m: m.candidate_id)
        ],  # fmt: skip
    }


def campaign_from_json(data: dict[str, object]) -> CampaignResult:
    """Rebuild a campaign's result from `campaign_to_json` output."""
    baselines_data = data["baselines"]
    candidates_data = data["candidates"]
    assert isinstance(baselines_data, list) and isinstance(candidates_data, list)
    baselines = {
        b["device"]: DeviceBaseline(
            b["device"], int(b["batch"]), tuple(b["before_ms"]), tuple(b["after_ms"]),
            tuple(b["confirmed_ms"]), b["drift"], b.get("error", ""),
            tuple(tuple(r) for r in b.get("confirmed_rounds_ms", [])),
        )
        for b in baselines_data
    }  # fmt: skip
    candidates = {
        int(c["candidate_id"]): CandidateMeasurement(
            int(c["candidate_id"]), c["device"], BenchmarkStatus(c["status"]), c["reason"],
            tuple(c["times_ms"]), c["speedup"], bool(c["stopped_early"]), bool(c["confirmed"]),
            tuple(tuple(r) for r in c.get("rounds_ms", [])),
        )
        for c in candidates_data
    }  # fmt: skip
    notes = data.get("notes", [])
    assert isinstance(notes, list)
    return CampaignResult(
        baselines,
        candidates,
        tuple(str(n) for n in notes),
        float(data["seconds"]),  # type: ignore[arg-type]
        float(data.get("measured_per_second", 0.0)),  # type: ignore[arg-type]
    )
