"""Measure a dispatch's candidates on one or more devices against each device's own baseline.

Per device, in one thread each (the devices' queues run concurrently): time the baseline (which
also fixes the batch size of that device and every later deadline), the device's share of the
candidates (dealt round robin, possibly while they are still compiling; on the host's CPU the
baseline again before every fourth, each candidate divided by the baseline timings on either
side of it), the baseline again, and then a confirmation round that re-times the device's
leaders interleaved with the baseline. One
worker session per device does all of it: the device stays open and the leaders stay loaded.
Every speedup is relative to the baseline measured on the same device (seeds/002: chips of one
SKU differ), so results from several devices rank together.

Runtime-only: this module and everything it imports run where only `iree-base-runtime` and
`numpy` are installed.
"""

from __future__ import annotations

import enum
import os
import queue
import statistics
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ireetune.benchmark.runner import (
    BenchmarkJob,
    BenchmarkOutcome,
    BenchmarkSession,
    BenchmarkStatus,
    JobDeadlines,
    JobFeed,
)
from ireetune.benchmark.stats import compute_stats
from ireetune.benchmark.timing import TimingKind

if TYPE_CHECKING:
    from ireetune.executor.base import Executor

# Baseline movement between before and after the candidates that is worth a note.
DRIFT_NOTE = 0.03
# On the host's CPU, the baseline is timed again before every this many first-pass candidates.
HOST_BRACKET_EVERY = 4
BASELINE_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class CampaignSettings:
    """How to time: repetitions, batch sizing, early stop and the confirmation round.

    `min_timeout_s` bounds loading one candidate (and its JIT); its first run and repetitions
    are stopped at `hopeless_factor` times the baseline's, plus `hang_slack_s` (by device). The first pass
    times batches of `screen_fraction` of the baseline's batch; the confirmation round always
    uses the full batch. `prewarm` processes load the coming candidates ahead (GPU JIT).
    On a device whose driver compiles a binary's pipelines at its first call (Vulkan), the first
    run also gets `min_timeout_s` for that compile (`jit_at_first_run`).
    """

    repetitions: int = 5
    min_repetition_s: float = 0.05
    hopeless_factor: float = 5.0
    confirm_top: int = 4
    confirm_rounds: int = 5
    # The first-pass speedup a leader must reach to be confirmed: a caller that needs at least
    # this (the model flow: what a dispatch's share needs to clear the model rule) stops a
    # dispatch none of whose candidates reached it after its first pass.
    confirm_above: float = 0.0
    min_timeout_s: float = 10.0
    # None: chosen per device by `for_device` (the host's CPU, or an accelerator).
    screen_fraction: float | None = None
    # The baseline timed again before every `bracket_every`-th first-pass candidate (each one
    # divided by the timings on either side of it); 0: only before and after all of them.
    bracket_every: int | None = None
    prewarm: int | None = None
    hang_slack_s: float | None = None
    jit_at_first_run: bool | None = None

    def for_device(self, device: str) -> CampaignSettings:
        """Fill what was left to the device: on the host's CPU, screen with the full batch,
        prewarm nothing (there is no JIT, and loading would take the measured cores) and time
        the baseline again every 4 candidates (the host's speed moves in phases of seconds: the
        2-core EPYC's baseline moved up to 46% between before and after a first pass); on an
        accelerator, screen with a quarter batch (batched dispatch timing there is stable to
        0.1%), time the baseline only before and after, and JIT the next candidates in up to
        four prewarm processes (a PTX JIT took about 0.4 s a candidate on the H100: four keep
        ahead of 10 candidates a second). A run's deadline allows 1 s beyond the baseline's
        times on an accelerator, 3 s on the host's CPU, whose cores the measurement shares with
        everything else on the machine."""
        on_host = measures_on_host(device)
        prewarm = 0 if on_host else max(1, min(4, (os.cpu_count() or 2) // 2))
        return replace(
            self,
            screen_fraction=self.screen_fraction or (1.0 if on_host else 0.25),
            bracket_every=(
                self.bracket_every
                if self.bracket_every is not None
                else (HOST_BRACKET_EVERY if on_host else 0)
            ),
            prewarm=self.prewarm if self.prewarm is not None else prewarm,
            hang_slack_s=self.hang_slack_s or (3.0 if on_host else 1.0),
            jit_at_first_run=(
                self.jit_at_first_run
                if self.jit_at_first_run is not None
                else compiles_at_first_run(device)
            ),
        )


def measures_on_host(device: str) -> bool:
    """Whether a runtime device runs on this host's CPU (local-task, local-sync)."""
    return device.split(":", 1)[0].startswith("local")


def compiles_at_first_run(device: str) -> bool:
    """Whether the device's driver compiles a binary's pipelines at its first call, not at load.

    IREE's Vulkan driver creates a binary's pipelines when it is first used, and that is when
    the Vulkan driver compiles the SPIR-V (seen on lavapipe with IREE 3.13: loading took 2-50 ms,
    the first call 1.5-2.6 s, the second 10 ms). CUDA and HIP compile when the module loads.
    """
    return device.split(":", 1)[0] == "vulkan"


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
    # How `times_ms` was taken, and with how many dispatches per timed call.
    timing: TimingKind | None = None
    batch: int = 0
    # The first pass's baseline timings this candidate was divided by, on either side of it
    # (empty: `DeviceBaseline.before_ms` and `after_ms`, before and after all candidates).
    reference_ms: tuple[float, ...] = ()


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
    timing: TimingKind | None = None
    # The baseline's timings between the first pass's candidates (`bracket_every`), in order;
    # a failed one is empty.
    brackets_ms: tuple[tuple[float, ...], ...] = ()

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


def job_deadlines(settings: CampaignSettings, first: BenchmarkOutcome) -> JobDeadlines:
    """Set every later job's deadlines from the baseline's own load, first run and median.

    A candidate whose first run or repetitions take `hopeless_factor` times the baseline's is
    hopeless (the worker would stop it after that run anyway); one that has not answered by then
    is stopped, so a hang costs a few baseline runs and a worker restart.
    """
    assert settings.hang_slack_s is not None, "settings.for_device(...) fills it"
    median_s = compute_stats(first.times_ms).median_ms / 1000.0
    first_run_s = (first.first_run_ms or 0.0) / 1000.0
    factor = max(settings.hopeless_factor, 1.0)
    # The baseline's own compile at its first run says nothing of a candidate's (another kernel).
    jit_s = settings.min_timeout_s if settings.jit_at_first_run else 0.0
    return JobDeadlines(
        load_s=settings.min_timeout_s + factor * first.load_s,
        first_run_s=settings.hang_slack_s + jit_s + factor * max(first_run_s, median_s),
        per_dispatch_s=factor * median_s,
        repetitions=settings.repetitions,
        slack_s=settings.hang_slack_s,
        first_run_compiles=bool(settings.jit_at_first_run),
    )


def _measurement(
    outcome: BenchmarkOutcome, baseline_ms: float, confirmed: bool
) -> CandidateMeasurement:
    if outcome.status is not BenchmarkStatus.MEASURED:
        return CandidateMeasurement(
            outcome.candidate_id, outcome.device, outcome.status, outcome.reason,
            stopped_early=outcome.stopped_early,
        )  # fmt: skip
    median = compute_stats(outcome.times_ms).median_ms
    return CandidateMeasurement(
        outcome.candidate_id, outcome.device, outcome.status, "", outcome.times_ms,
        baseline_ms / median, outcome.stopped_early, confirmed, timing=outcome.timing,
        batch=outcome.batch,
    )  # fmt: skip


@dataclass
class _BaselinePlaces:
    """Where the pump put the baseline in a session (the consumer reads them as it goes): the
    session indexes of the timings between candidates, and of the one after the last."""

    between: set[int] = field(default_factory=set)
    after: list[int] = field(default_factory=list)


def _pump(
    share: JobFeed, session: JobFeed, baseline: BenchmarkJob, every: int, places: _BaselinePlaces
) -> None:
    """Move a device's share into its session as it arrives: the baseline again before every
    `every`-th candidate after the first ones (never when 0), and once more after the last."""
    # The session's first job is the baseline: a job's session index counts it.
    index, since = 1, 0
    for job in _drain_stream(share):
        if every and since == every:
            # Recorded before it is added: its outcome can not arrive before it is queued.
            places.between.add(index)
            session.add(baseline)
            index, since = index + 1, 0
        session.add(job)
        index, since = index + 1, since + 1
    places.after.append(index)
    session.add(baseline)


@dataclass
class _Shared:
    """What every device's thread of a campaign writes (under `lock`, but the queue)."""

    results: dict[int, CandidateMeasurement] = field(default_factory=dict)
    baselines: dict[str, DeviceBaseline] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    measured: queue.Queue[CandidateMeasurement] = field(default_factory=queue.Queue)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _run_device(
    executor: Executor,
    device: str,
    baseline_job: BenchmarkJob,
    share: JobFeed,
    settings: CampaignSettings,
    earlier: Sequence[EarlierResult],
    shared: _Shared,
) -> None:
    # One worker session times the baseline, the candidates, the baseline again and the
    # confirmation rounds: the first baseline fixes the batch, the early-stop threshold and the
    # deadlines.
    settings = settings.for_device(device)
    assert settings.screen_fraction is not None and settings.prewarm is not None
    session = JobFeed([baseline_job])
    outcomes = executor.run_benchmarks(
        BenchmarkSession(
            session, device, settings.repetitions, 0, BASELINE_TIMEOUT_S,
            min_repetition_s=settings.min_repetition_s, hopeless_factor=settings.hopeless_factor,
            timeout_after_first=lambda first: job_deadlines(settings, first),
            screen_fraction=settings.screen_fraction, prewarm=settings.prewarm,
        )
    )  # fmt: skip
    try:
        _run_session(
            _DeviceSession(device, baseline_job, share, session, outcomes, settings),
            earlier,
            shared,
        )
    finally:
        session.close()
        outcomes.close()


@dataclass(frozen=True)
class _DeviceSession:
    """One device's worker session: the device's share of the jobs as they arrive, the session's
    own feed (the baseline first) and the outcomes it streams back, with the device's settings."""

    device: str
    baseline_job: BenchmarkJob
    share: JobFeed
    session: JobFeed
    outcomes: Generator[BenchmarkOutcome, None, None]
    settings: CampaignSettings


def _run_session(
    device_session: _DeviceSession, earlier: Sequence[EarlierResult], shared: _Shared
) -> None:
    device, share, session = device_session.device, device_session.share, device_session.session
    outcomes, settings = device_session.outcomes, device_session.settings
    baseline_job = device_session.baseline_job
    results, baselines, notes = shared.results, shared.baselines, shared.notes
    measured, lock = shared.measured, shared.lock
    before = next(outcomes)
    if before.status is not BenchmarkStatus.MEASURED:
        reason = (
            f"baseline could not be measured on {device}: {before.status.value} {before.reason}"
        )
        with lock:
            baselines[device] = DeviceBaseline(device, 0, (), (), (), None, reason)
        for job in list(_drain_stream(share)):  # Every job, once the share closed.
            with lock:
                results[job.candidate_id] = CandidateMeasurement(
                    job.candidate_id, device, BenchmarkStatus.DEVICE_ERROR, reason
                )
        return
    batch = before.batch
    places = _BaselinePlaces()
    assert settings.bracket_every is not None, "settings.for_device(...) fills it"
    pump = threading.Thread(
        target=_pump, args=(share, session, baseline_job, settings.bracket_every, places),
        daemon=True,
    )  # fmt: skip
    pump.start()
    # Every measured baseline timing of the first pass, by its session index.
    timed: list[tuple[int, tuple[float, ...]]] = [(0, before.times_ms)]
    brackets: list[tuple[float, ...]] = []
    index_of: dict[int, int] = {}
    local: dict[int, CandidateMeasurement] = {}
    jobs: list[BenchmarkJob] = []
    after: BenchmarkOutcome | None = None
    for index, outcome in enumerate(outcomes, start=1):
        if places.after and index == places.after[0]:
            after = outcome
            break
        measured_now = outcome.status is BenchmarkStatus.MEASURED
        if index in places.between:
            brackets.append(outcome.times_ms if measured_now else ())
            if measured_now:
                timed.append((index, outcome.times_ms))
            continue
        jobs.append(session[index])
        index_of[outcome.candidate_id] = index
        # As it arrives, against the latest baseline: its neighbour after is still to come.
        measurement = _measurement(outcome, compute_stats(timed[-1][1]).median_ms, False)
        local[outcome.candidate_id] = measurement
        measured.put(measurement)
    pump.join()
    assert after is not None, "the session ends only after the repeated baseline"
    after_ms: tuple[float, ...] = ()
    drift: float | None = None
    if after.status is BenchmarkStatus.MEASURED:
        after_ms = after.times_ms
        timed.append((places.after[0], after_ms))
        first_ms = compute_stats(before.times_ms).median_ms
        drift = abs(compute_stats(after_ms).median_ms - first_ms) / first_ms
        if drift > DRIFT_NOTE:
            with lock:
                notes.append(
                    f"baseline on {device} moved {drift:.1%} between before and after the candidates"
                )
    local = {cid: _rescale(m, _neighbours(timed, index_of[cid])) for cid, m in local.items()}

    def run_rounds(round_jobs: Sequence[BenchmarkJob]) -> list[BenchmarkOutcome]:
        # The confirmation times full batches, whatever the first pass screened with, and
        # every repetition of them (as it did in a worker of its own).
        for job in round_jobs:
            session.add(replace(job, batch=batch, early_stop=False))
        session.close()
        return [next(outcomes) for _ in round_jobs]

    confirmed_rounds = _confirm(device, baseline_job, jobs, local, earlier, settings, run_rounds)
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
            timing=before.timing,
            brackets_ms=tuple(brackets),
        )


def _neighbours(timed: Sequence[tuple[int, tuple[float, ...]]], index: int) -> tuple[float, ...]:
    """The baseline timings nearest a session index: the last before it and the first after it
    (`timed` is in session order and starts before every candidate)."""
    earlier = [times for at, times in timed if at < index]
    later = [times for at, times in timed if at > index]
    return earlier[-1] + (later[0] if later else ())


def _rescale(
    measurement: CandidateMeasurement, reference_ms: tuple[float, ...]
) -> CandidateMeasurement:
    if not measurement.times_ms:
        return measurement
    median = compute_stats(measurement.times_ms).median_ms
    return replace(
        measurement,
        speedup=float(statistics.median(reference_ms)) / median,
        reference_ms=reference_ms,
    )


def _confirm(
    device: str,
    baseline_job: BenchmarkJob,
    jobs: Sequence[BenchmarkJob],
    local: dict[int, CandidateMeasurement],
    earlier: Sequence[EarlierResult],
    settings: CampaignSettings,
    run_rounds: Callable[[Sequence[BenchmarkJob]], list[BenchmarkOutcome]],
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
    contenders = [m for m in contenders if (m.speedup or 0.0) >= settings.confirm_above]
    leaders = sorted(contenders, key=lambda m: (-(m.speedup or 0.0), m.candidate_id))[
        : settings.confirm_top
    ]
    if not leaders or settings.confirm_rounds < 1:
        return ()
    by_id = {job.candidate_id: job for job in (*jobs, *(e.job for e in earlier))}
    round_jobs = [baseline_job, *(by_id[m.candidate_id] for m in leaders)]
    rounds: dict[int, list[tuple[float, ...]]] = {job.candidate_id: [] for job in round_jobs}
    failures: dict[int, BenchmarkOutcome] = {}
    timings: dict[int, tuple[TimingKind, int]] = {}
    for outcome in run_rounds(round_jobs * settings.confirm_rounds):
        # A failed round stays in place (empty) so the rounds stay paired by position.
        measured = outcome.status is BenchmarkStatus.MEASURED
        rounds[outcome.candidate_id].append(outcome.times_ms if measured else ())
        if not measured:
            failures[outcome.candidate_id] = outcome
        else:
            timings[outcome.candidate_id] = (outcome.timing, outcome.batch)
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
            *timings.get(leader.candidate_id, (None, 0)),
        )  # fmt: skip
    return tuple(rounds[0])


def run_campaign(
    executor: Executor,
    baseline: Path | BenchmarkJob,
    jobs: Sequence[BenchmarkJob] | JobFeed,
    devices: Sequence[str],
    settings: CampaignSettings,
    on_measured: Callable[[CandidateMeasurement], None] | None = None,
    earlier: Sequence[EarlierResult] = (),
) -> CampaignResult:
    """Measure every job on one of `devices` (round robin), each device in its own thread.

    `jobs` may be a `JobFeed` still being filled (candidates as they compile): each is measured
    as soon as it arrives, and the confirmation round starts once the feed is closed.
    `on_measured` sees each first-pass measurement as it arrives (its speedup against the
    device's first baseline timing), always on the calling thread. `earlier` results take part
    in the first device's confirmation round. `baseline` is the default's job (or its binary).
    Every session runs on `executor`.
    """
    assert devices, "at least one device"
    baseline_job = baseline if isinstance(baseline, BenchmarkJob) else BenchmarkJob(0, baseline)
    start = time.perf_counter()
    shares = {device: JobFeed() for device in devices}
    dealer = threading.Thread(target=_deal, args=(jobs, devices, shares), daemon=True)
    dealer.start()
    shared = _Shared()
    results, baselines, notes, measured = (
        shared.results, shared.baselines, shared.notes, shared.measured
    )  # fmt: skip
    threads = [
        threading.Thread(
            target=_run_device,
            args=(
                executor, device, baseline_job, shares[device], settings,
                earlier if index == 0 else (), shared,
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


def _deal(
    jobs: Sequence[BenchmarkJob] | JobFeed, devices: Sequence[str], shares: dict[str, JobFeed]
) -> None:
    """Deal the jobs to the devices round robin, as they arrive; close every share at the end."""
    try:
        arriving = _drain_stream(jobs) if isinstance(jobs, JobFeed) else jobs
        for index, job in enumerate(arriving):
            shares[devices[index % len(devices)]].add(job)
    finally:
        for share in shares.values():
            share.close()


def _drain_stream(feed: JobFeed) -> Iterator[BenchmarkJob]:
    index = 0
    while True:
        job = feed.wait_for(index, None)
        if not isinstance(job, BenchmarkJob):
            return
        yield job
        index += 1


def campaign_to_json(result: CampaignResult) -> dict[str, object]:
    """Return a JSON-ready form of a campaign's result.

    run_files.CampaignFile is the form's one definition: benchmark_results.json is checked
    against it when written and when read back (`run_files.campaign_from_file`).
    """
    return {
        "seconds": result.seconds,
        "measured_per_second": result.measured_per_second,
        "notes": list(result.notes),
        "baselines": [_json_fields(b) for b in result.baselines.values()],
        "candidates": [
            _json_fields(m)
            for m in sorted(result.candidates.values(), key=lambda m: m.candidate_id)
        ],
    }


def _json_fields(record: DeviceBaseline | CandidateMeasurement) -> dict[str, object]:
    """Return a record's fields in JSON form: enums as their values, tuples as lists."""

    def plain(value: object) -> object:
        if isinstance(value, enum.Enum):
            return value.value
        return [plain(item) for item in value] if isinstance(value, tuple) else value

    return asdict(record, dict_factory=lambda pairs: {name: plain(value) for name, value in pairs})
