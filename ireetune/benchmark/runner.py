"""Supervise the benchmark worker: time candidates, survive crashes and hangs of any of them.

One worker process times many candidates (cheap on a GPU, where device start-up costs seconds)
and keeps them loaded; jobs may be streamed to it while it runs (candidates as they compile, the
confirmation rounds once the leaders are known). If it hangs past a phase's deadline or dies,
that job is recorded as timed out or crashed and a fresh worker continues with the jobs after it;
so does one after a candidate failed on the device (a fault there can break the device for every
later candidate). Deadlines come from the baseline's own times once it has been measured.
"""

from __future__ import annotations

import enum
import json
import math
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ireetune.benchmark.timing import TimingKind
from ireetune.benchmark.worker import screened_batch
from ireetune.core.child_process import start_child, stop_child
from ireetune.core.worker_protocol import describe_death, next_event, start_worker

# The worker command can be replaced (for example by a wrapper that injects faults) through this
# variable: a JSON list of arguments, never a shell string.
WORKER_COMMAND_VARIABLE = "IREETUNE_BENCHMARK_WORKER"


class BenchmarkStatus(enum.Enum):
    MEASURED = "measured"
    FAILED = "benchmark-failed"
    TIMED_OUT = "benchmark-timed-out"
    CRASHED = "crashed"
    DEVICE_ERROR = "device-error"


@dataclass(frozen=True)
class BenchmarkJob:
    """One binary to time: its dispatch benchmark, or with `inputs_path` its `function` called
    on those real inputs (an .npz of arg0, arg1, ...)."""

    candidate_id: int
    vmfb_path: Path
    inputs_path: Path | None = None
    function: str = ""
    # Dispatches per timed call; 0: the session's (learned from the baseline).
    batch: int = 0
    # Whether a clearly hopeless run may end the job early (not in confirmation rounds).
    early_stop: bool = True

    def to_request(self) -> dict[str, object]:
        """Return the job as the worker's request reads it."""
        request: dict[str, object] = {
            "candidate_id": self.candidate_id,
            "vmfb": str(self.vmfb_path),
        }
        if self.batch:
            request["batch"] = self.batch
        if not self.early_stop:
            request["early_stop"] = False
        if self.inputs_path is not None:
            request["inputs"] = str(self.inputs_path)
            request["function"] = self.function or "main"
        return request


@dataclass(frozen=True)
class BenchmarkOutcome:
    candidate_id: int
    status: BenchmarkStatus
    reason: str
    times_ms: tuple[float, ...]
    batch: int
    stopped_early: bool
    device: str
    timing: TimingKind = TimingKind.HOST
    load_s: float = 0.0
    first_run_ms: float | None = None
    # The HAL driver the worker's device reported (`vulkan`, `local-task`); "" when unmeasured.
    driver: str = ""


def worker_command() -> list[str]:
    """Return the worker's argument list (overridable for fault injection)."""
    override = os.environ.get(WORKER_COMMAND_VARIABLE)
    if override:
        command = json.loads(override)
        assert isinstance(command, list) and all(isinstance(a, str) for a in command)
        return command
    return [sys.executable, "-m", "ireetune.benchmark.worker"]


def _failure(
    job: BenchmarkJob, status: BenchmarkStatus, reason: str, device: str
) -> BenchmarkOutcome:
    return BenchmarkOutcome(job.candidate_id, status, reason, (), 0, False, device)


@dataclass(frozen=True)
class JobDeadlines:
    """How long each phase of one job may take before the worker is stopped.

    Loading (and a GPU's JIT) has a limit of its own; the first call and the timed repetitions
    get limits from the baseline's own times, so a hanging candidate costs a few times the
    baseline's run, not a fixed many-second floor. `rest_s` scales with the job's batch.
    """

    load_s: float
    first_run_s: float
    per_dispatch_s: float
    repetitions: int
    slack_s: float
    # The first run includes the driver's compile of the binary (Vulkan): past its deadline a
    # candidate timed out, it is not known to be slow.
    first_run_compiles: bool = False

    def rest_s(self, batch: int) -> float:
        """Allow the untimed and the timed repetitions of `batch` dispatches."""
        return self.slack_s + self.per_dispatch_s * (self.repetitions + 1) * max(1, batch)


class JobFeed:
    """Jobs handed to a running benchmark session as they become known (compiled, or chosen
    from earlier results); `close` says that no more will come. Thread-safe."""

    def __init__(self, jobs: Iterable[BenchmarkJob] = (), closed: bool = False) -> None:
        self._jobs = list(jobs)
        self._closed = closed
        self._changed = threading.Condition()

    def add(self, job: BenchmarkJob) -> None:
        with self._changed:
            assert not self._closed, "no job may follow close()"
            self._jobs.append(job)
            self._changed.notify_all()

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def wait_for(self, index: int, timeout_s: float | None) -> BenchmarkJob | None | bool:
        """Return job `index`; None when the feed closed before it; False while it may come."""
        with self._changed:
            self._changed.wait_for(lambda: index < len(self._jobs) or self._closed, timeout_s)
            if index < len(self._jobs):
                return self._jobs[index]
            return None if self._closed else False

    def __getitem__(self, index: int) -> BenchmarkJob:
        with self._changed:
            return self._jobs[index]

    def settled_length(self) -> int | None:
        """Return the number of jobs once the feed is closed, else None."""
        with self._changed:
            return len(self._jobs) if self._closed else None


_POLL_S = 0.2


def _write_jobs(
    process: subprocess.Popen[str],
    request: dict[str, object],
    feed: JobFeed,
    first: int,
    stop: threading.Event,
    prewarmers: Sequence[subprocess.Popen[str]],
) -> None:
    """Send the request line, then each job of the feed from `first` on, as they come."""
    assert process.stdin is not None
    try:
        process.stdin.write(json.dumps(request) + "\n")
        process.stdin.flush()
        index = first
        while not stop.is_set():
            job = feed.wait_for(index, _POLL_S)
            if job is False:
                continue
            if job is None:
                break
            assert isinstance(job, BenchmarkJob)
            process.stdin.write(json.dumps(job.to_request()) + "\n")
            process.stdin.flush()
            if prewarmers:
                _prewarm(prewarmers[index % len(prewarmers)], job)
            index += 1
        process.stdin.close()
    except (BrokenPipeError, OSError, ValueError):
        pass  # The worker died or was stopped: the reading side deals with it.


def _prewarm(prewarmer: subprocess.Popen[str], job: BenchmarkJob) -> None:
    if prewarmer.stdin is None or prewarmer.poll() is not None:
        return
    try:
        prewarmer.stdin.write(f"{job.vmfb_path}\n")
        prewarmer.stdin.flush()
    except (BrokenPipeError, OSError, ValueError):
        pass  # A prewarmer that died only stops warming: every load is the worker's own.


def _start_prewarmers(device: str, count: int) -> list[subprocess.Popen[str]]:
    prewarmers = []
    for _ in range(count):
        prewarmer = start_child(
            [*worker_command(), "--prewarm"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        assert prewarmer.stdin is not None
        prewarmer.stdin.write(device + "\n")
        prewarmer.stdin.flush()
        prewarmers.append(prewarmer)
    return prewarmers


class _Phase(enum.Enum):
    """Where the job in the worker stands; each phase has its own deadline."""

    IDLE = "waiting for a job"
    LOADING = "loading"
    FIRST_RUN = "first run"
    REPETITIONS = "timed repetitions"


@dataclass(frozen=True)
class BenchmarkSession:
    """A benchmark session for an executor (`Executor.run_benchmarks`): time each job on
    `device`, one outcome per job, in job order.

    `jobs` may be a `JobFeed` that grows while the session runs: one worker keeps the device
    open and the binaries loaded for all of them (the campaign streams candidates and
    confirmation rounds into it). `timeout_s` bounds each phase of a job (load, first run,
    repetitions) until the first job teaches better. `batch` 0 lets the worker pick a batch that
    makes one repetition last at least `min_repetition_s`; a job's own batch wins.

    With `timeout_after_first`, the first job is the baseline and sets the rest: the batch
    (`screen_fraction` of its own), the early-stop threshold (`hopeless_factor` times its
    median) and each phase's deadline (`timeout_after_first(first outcome)`).

    `prewarm` processes load the coming binaries ahead of the worker (on a GPU: JIT them into
    the driver's cache); each candidate is still loaded, and blamed, in the worker alone.
    `deadlines` are phase deadlines already learned from the baseline (a session resumed
    elsewhere, as the Ray executor's measuring actor does after a restart).
    """

    jobs: Sequence[BenchmarkJob] | JobFeed
    device: str
    repetitions: int
    batch: int
    timeout_s: float
    hopeless_ms: float | None = None
    min_repetition_s: float = 0.05
    hopeless_factor: float | None = None
    timeout_after_first: Callable[[BenchmarkOutcome], JobDeadlines] | None = None
    screen_fraction: float = 1.0
    prewarm: int = 0
    deadlines: JobDeadlines | None = None


def run_benchmarks_here(session: BenchmarkSession) -> Generator[BenchmarkOutcome, None, None]:
    """Run a benchmark session on this host; yield exactly one outcome per job, in job order."""
    jobs = session.jobs
    feed = jobs if isinstance(jobs, JobFeed) else JobFeed(jobs, closed=True)
    # What the baseline teaches (with `timeout_after_first`) replaces these for later jobs.
    batch, hopeless_ms, deadlines = session.batch, session.hopeless_ms, session.deadlines
    learn = session.timeout_after_first is not None
    prewarmers = _start_prewarmers(session.device, session.prewarm) if session.prewarm > 0 else []
    reported = 0
    try:
        while True:
            total = feed.settled_length()
            if total is not None and reported >= total:
                return
            request = {
                "device": session.device,
                "repetitions": session.repetitions,
                "batch": batch,
                "min_repetition_s": session.min_repetition_s,
                "hopeless_ms": hopeless_ms,
                "learn_from_first": learn and reported == 0,
                "hopeless_factor": session.hopeless_factor,
                "screen_fraction": session.screen_fraction,
            }
            process, lines, stderr_lines = start_worker(worker_command())
            stop_writing = threading.Event()
            writer = threading.Thread(
                target=_write_jobs,
                args=(process, request, feed, reported, stop_writing, prewarmers),
                daemon=True,
            )
            writer.start()
            first = reported
            phase = _Phase.IDLE
            deadline = math.inf
            limit = session.timeout_s
            try:
                while True:
                    # Between jobs no deadline runs: poll, to see whether the feed has ended.
                    until = time.monotonic() + _POLL_S if phase is _Phase.IDLE else deadline
                    try:
                        record = next_event(lines, until)
                    except queue.Empty:
                        if phase is _Phase.IDLE:
                            total = feed.settled_length()
                            if total is not None and reported >= total:
                                return
                            continue
                        stop_child(process)
                        yield _timed_out(feed[reported], phase, limit, deadlines, session.device)
                        reported += 1
                        break
                    if record is None:
                        process.wait()
                        running = phase is not _Phase.IDLE
                        # A worker that dies before starting any job is blamed on the next one,
                        # so a broken worker costs one job per restart, never a loop; one that
                        # dies between jobs is not: the next job gets a fresh worker.
                        if not running and reported != first:
                            break
                        reason = describe_death("benchmark", process, running, stderr_lines)
                        job = feed.wait_for(reported, None)
                        if not isinstance(job, BenchmarkJob):
                            return
                        yield _failure(job, BenchmarkStatus.CRASHED, reason, session.device)
                        reported += 1
                        break
                    event = record.get("event")
                    if event == "device-error":
                        process.wait()
                        while True:
                            job = feed.wait_for(reported, None)
                            if not isinstance(job, BenchmarkJob):
                                return
                            yield _failure(
                                job,
                                BenchmarkStatus.DEVICE_ERROR,
                                str(record.get("reason")),
                                session.device,
                            )
                            reported += 1
                    if event == "start":
                        phase = _Phase.LOADING
                        limit = deadlines.load_s if deadlines else session.timeout_s
                        deadline = time.monotonic() + limit
                    elif event == "loaded":
                        phase = _Phase.FIRST_RUN
                        limit = deadlines.first_run_s if deadlines else session.timeout_s
                        deadline = time.monotonic() + limit
                    elif event == "first-run":
                        phase = _Phase.REPETITIONS
                        job_batch = feed[reported].batch or batch
                        limit = deadlines.rest_s(job_batch) if deadlines else session.timeout_s
                        deadline = time.monotonic() + limit
                    elif event == "result":
                        job = feed[reported]
                        reported += 1
                        phase = _Phase.IDLE
                        if record.get("status") == "measured":
                            outcome = _measured(job, record, session.device)
                            if learn and reported == 1:
                                # What the worker learned from the baseline, kept for restarts.
                                assert session.timeout_after_first is not None
                                batch = screened_batch(outcome.batch, session.screen_fraction)
                                deadlines = session.timeout_after_first(outcome)
                                if session.hopeless_factor is not None:
                                    hopeless_ms = session.hopeless_factor * statistics.median(
                                        outcome.times_ms
                                    )
                            yield outcome
                        else:
                            yield _failure(
                                job,
                                BenchmarkStatus.FAILED,
                                str(record.get("reason", "")),
                                session.device,
                            )
                            if record.get("restart"):
                                # The device may be broken: the next job gets a fresh worker.
                                stop_child(process)
                                break
            finally:
                # Also when the caller stops reading early: no worker outlives its generator.
                stop_writing.set()
                if process.poll() is None:
                    stop_child(process)
    finally:
        for prewarmer in prewarmers:
            stop_child(prewarmer)


def _measured(job: BenchmarkJob, record: dict[str, object], device: str) -> BenchmarkOutcome:
    times = record["times_ms"]
    assert isinstance(times, list)
    first_run = record.get("first_run_ms")
    return BenchmarkOutcome(
        job.candidate_id, BenchmarkStatus.MEASURED, "", tuple(float(t) for t in times),
        int(str(record["batch"])), bool(record.get("stopped_early")), device,
        TimingKind(record.get("timing", TimingKind.HOST.value)),
        float(str(record.get("load_s", 0.0))),
        float(str(first_run)) if first_run is not None else None,
        str(record.get("driver", "")),
    )  # fmt: skip


def _timed_out(
    job: BenchmarkJob,
    phase: _Phase,
    limit_s: float,
    deadlines: JobDeadlines | None,
    device: str,
) -> BenchmarkOutcome:
    """Describe a job stopped at its phase's deadline; past the baseline's times it is hopeless."""
    if deadlines is None or phase is _Phase.LOADING:
        reason = f"no result within {limit_s:.1f} s ({phase.value})"
        return _failure(job, BenchmarkStatus.TIMED_OUT, reason, device)
    if phase is _Phase.FIRST_RUN and deadlines.first_run_compiles:
        reason = (
            f"no result within {limit_s:.1f} s (first run, which includes the driver's compile "
            "of its pipelines; --benchmark-timeout allows more)"
        )
        return _failure(job, BenchmarkStatus.TIMED_OUT, reason, device)
    reason = (
        f"stopped early: its {phase.value} passed {limit_s:.2f} s, set from the baseline's time"
    )
    return BenchmarkOutcome(
        job.candidate_id, BenchmarkStatus.TIMED_OUT, reason, (), 0, True, device
    )
