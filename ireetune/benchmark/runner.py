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
import statistics
import sys
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ireetune.worker_protocol import FailureKind, supervise_worker

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
    """Time each job on `device` with the executor in use (`run_benchmarks_here` locally, a
    measuring actor on Ray); yield exactly one outcome per job, in job order."""
    from ireetune.executor.base import current_executor

    return current_executor().run_benchmarks(
        jobs, device, repetitions, batch, timeout_s, hopeless_ms, min_repetition_s,
        hopeless_factor, timeout_after_first,
    )  # fmt: skip


def run_benchmarks_here(
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
    """Time each job on `device` in worker processes of this host; yield exactly one outcome per
    job, in job order (the worker protocol, worker_protocol.py, handles hangs and crashes).

    `timeout_s` bounds one job from its start (load, warm-up and repetitions). `batch` 0 lets the
    worker pick a batch that makes one repetition last at least `min_repetition_s`.

    With `timeout_after_first`, the first job is the baseline and sets the rest, all in one
    worker process: its batch, the early-stop threshold (`hopeless_factor` times its median) and
    the per-job timeout (`timeout_after_first(first outcome)`).
    """
    learn = timeout_after_first is not None
    # What the baseline teaches, kept for any fresh worker after a crash.
    learned: dict[str, Any] = {"batch": batch, "hopeless_ms": hopeless_ms, "timeout_s": timeout_s}

    def build_request(pending: Sequence[BenchmarkJob], first_index: int) -> dict[str, Any]:
        return {
            "device": device,
            "repetitions": repetitions,
            "batch": learned["batch"],
            "min_repetition_s": min_repetition_s,
            "hopeless_ms": learned["hopeless_ms"],
            "learn_from_first": learn and first_index == 0,
            "hopeless_factor": hopeless_factor,
            "jobs": [j.to_request() for j in pending],
        }

    reports = supervise_worker(
        "benchmark", worker_command(), jobs, build_request, lambda: float(learned["timeout_s"])
    )
    for index, report in enumerate(reports):
        job, record = report.job, report.record
        if report.failure is not None:
            yield _failure(job, _FAILURE_STATUS[report.failure.kind], report.failure.reason, device)
        elif record is not None and record.get("status") == "measured":
            outcome = BenchmarkOutcome(
                job.candidate_id,
                BenchmarkStatus.MEASURED,
                "",
                tuple(float(t) for t in record["times_ms"]),
                int(record["batch"]),
                bool(record.get("stopped_early")),
                device,
            )
            if learn and index == 0:
                assert timeout_after_first is not None
                learned["batch"] = outcome.batch
                learned["timeout_s"] = timeout_after_first(outcome)
                if hopeless_factor is not None:
                    learned["hopeless_ms"] = hopeless_factor * statistics.median(outcome.times_ms)
            yield outcome
        else:
            reason = str(record.get("reason", "")) if record is not None else ""
            yield _failure(job, BenchmarkStatus.FAILED, reason, device)


_FAILURE_STATUS = {
    FailureKind.TIMED_OUT: BenchmarkStatus.TIMED_OUT,
    FailureKind.CRASHED: BenchmarkStatus.CRASHED,
    FailureKind.DEVICE_ERROR: BenchmarkStatus.DEVICE_ERROR,
}
