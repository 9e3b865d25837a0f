"""Supervise the benchmark worker: time candidates, survive crashes and hangs of any of them.

One worker process times many candidates (cheap on a GPU, where device start-up costs seconds).
If it hangs past a candidate's timeout or dies, that job is recorded as timed out or crashed and
a fresh worker continues with the jobs after it; so does one after a candidate failed on the
device (a fault there can break the device for every later candidate).
"""

from __future__ import annotations

import enum
import json
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ireetune.child_process import start_child, stop_child

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

    def to_request(self) -> dict[str, object]:
        """Return the job as the worker's request reads it."""
        request: dict[str, object] = {
            "candidate_id": self.candidate_id,
            "vmfb": str(self.vmfb_path),
        }
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


def worker_command() -> list[str]:
    """Return the worker's argument list (overridable for fault injection)."""
    override = os.environ.get(WORKER_COMMAND_VARIABLE)
    if override:
        command = json.loads(override)
        assert isinstance(command, list) and all(isinstance(a, str) for a in command)
        return command
    return [sys.executable, "-m", "ireetune.benchmark.worker"]


def _read_lines(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def _failure(
    job: BenchmarkJob, status: BenchmarkStatus, reason: str, device: str
) -> BenchmarkOutcome:
    return BenchmarkOutcome(job.candidate_id, status, reason, (), 0, False, device)


def run_benchmarks(
    jobs: Sequence[BenchmarkJob],
    device: str,
    repetitions: int,
    batch: int,
    timeout_s: float,
    hopeless_ms: float | None = None,
    min_repetition_s: float = 0.05,
    hopeless_factor: float | None = None,
    timeout_after_first: Callable[[BenchmarkOutcome], float] | None = None,
) -> Generator[BenchmarkOutcome, None, None]:
    """Time each job on `device`; yield exactly one outcome per job, in job order.

    `timeout_s` bounds one job from its start (load, warm-up and repetitions). `batch` 0 lets the
    worker pick a batch that makes one repetition last at least `min_repetition_s`.

    With `timeout_after_first`, the first job is the baseline and sets the rest, all in one
    worker process: its batch, the early-stop threshold (`hopeless_factor` times its median) and
    the per-job timeout (`timeout_after_first(first outcome)`).
    """
    next_job = 0
    learn = timeout_after_first is not None
    while next_job < len(jobs):
        pending = jobs[next_job:]
        request = {
            "device": device,
            "repetitions": repetitions,
            "batch": batch,
            "min_repetition_s": min_repetition_s,
            "hopeless_ms": hopeless_ms,
            "learn_from_first": learn and next_job == 0,
            "hopeless_factor": hopeless_factor,
            "jobs": [j.to_request() for j in pending],
        }
        process = start_child(worker_command(), stdin=subprocess.PIPE)
        assert process.stdin is not None and process.stdout is not None
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=_read_lines, args=(process.stdout, lines), daemon=True).start()
        stderr_lines: list[str] = []
        if process.stderr is not None:
            threading.Thread(
                target=_read_lines_into, args=(process.stderr, stderr_lines), daemon=True
            ).start()
        try:
            process.stdin.write(json.dumps(request))
            process.stdin.close()
        except BrokenPipeError:
            pass
        try:
            started = False
            reported = 0
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    stop_child(process)
                    yield _failure(
                        pending[reported],
                        BenchmarkStatus.TIMED_OUT,
                        f"no result within {timeout_s:.1f} s",
                        device,
                    )
                    reported += 1
                    break
                if line is None:
                    process.wait()
                    if reported < len(pending):
                        tail = stderr_lines[-1].strip()[:200] if stderr_lines else ""
                        state = "while running" if started else "before starting"
                        reason = f"benchmark process died {state} (exit {process.returncode})"
                        yield _failure(
                            pending[reported],
                            BenchmarkStatus.CRASHED,
                            f"{reason}: {tail}" if tail else reason,
                            device,
                        )
                        reported += 1
                    break
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                event = record.get("event")
                if event == "device-error":
                    process.wait()
                    for job in pending[reported:]:
                        yield _failure(
                            job, BenchmarkStatus.DEVICE_ERROR, str(record.get("reason")), device
                        )
                    return
                if event == "start":
                    started = True
                    deadline = time.monotonic() + timeout_s
                elif event == "result":
                    job = pending[reported]
                    reported += 1
                    started = False
                    deadline = time.monotonic() + timeout_s
                    if record.get("status") == "measured":
                        outcome = BenchmarkOutcome(
                            job.candidate_id,
                            BenchmarkStatus.MEASURED,
                            "",
                            tuple(float(t) for t in record["times_ms"]),
                            int(record["batch"]),
                            bool(record.get("stopped_early")),
                            device,
                        )
                        if learn and next_job == 0 and reported == 1:
                            # What the worker learned from the baseline, kept for any restart.
                            assert timeout_after_first is not None
                            batch = outcome.batch
                            timeout_s = timeout_after_first(outcome)
                            if hopeless_factor is not None:
                                hopeless_ms = hopeless_factor * statistics.median(outcome.times_ms)
                        yield outcome
                    else:
                        yield _failure(
                            job, BenchmarkStatus.FAILED, str(record.get("reason", "")), device
                        )
                        if record.get("restart"):
                            # The device may be broken: the next job gets a fresh worker.
                            stop_child(process)
                            break
        finally:
            # Also when the caller stops reading early: no worker outlives its generator.
            if process.poll() is None:
                stop_child(process)
        next_job += reported


def _read_lines_into(stream: IO[str], sink: list[str]) -> None:
    for line in stream:
        sink.append(line)
