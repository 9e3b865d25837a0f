"""The protocol of the runtime workers (verification, model timing) and its supervisor.

The benchmark worker speaks the same event lines, plus a phase per job ("loaded", "first-run")
and jobs streamed in one line at a time; benchmark/runner.py supervises its sessions.

A worker is a process that reads one JSON request on stdin, holding a list of "jobs", and works
through them in order, printing one JSON line per event on stdout:

    {"event": "start", "job_index": i}                 before job i runs
    {"event": "result", "job_index": i, ...}           after it (its fields are the worker's own)
    {"event": "result", ..., "restart": true}          the job failed and may have broken the
                                                       device: the worker exits after it
    {"event": "device-error", "reason": "..."}         the device cannot be used at all

`supervise_worker` runs such a worker and yields exactly one report per job, in job order: the
worker's result record, or a `WorkerFailure` when the worker hung past the job's timeout (the
job timed out), died (the job crashed, with the last line of its stderr) or found no device
(every job left). After a hang, a death or a restart request, a fresh worker continues with the
jobs after the failed one, so one broken candidate costs only itself.

Runtime-only: nothing here may import the compiler.
"""

from __future__ import annotations

import enum
import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import IO, Any, Generic, TypeVar

from ireetune.core.child_process import start_child, stop_child

Job = TypeVar("Job")

# The scope the ONNX import names a model's parameters in (`--params-scope`), and the runtime
# opens its parameter archives in: the model worker, the profile's command line.
PARAMETER_SCOPE = "model"


def emit_event(record: dict[str, Any]) -> None:
    """Print one event line of the protocol on stdout (a worker's side)."""
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def read_event(line: str) -> dict[str, Any] | None:
    """Parse one line a worker printed into its event record (None: not a protocol line)."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


def next_event(lines: queue.Queue[str | None], deadline: float) -> dict[str, Any] | None:
    """Return the worker's next event record from its stdout `lines` (see `start_worker`), or
    None once the stream ended; raise queue.Empty when none came by `deadline` (a
    `time.monotonic()` time).

    Lines that are not protocol events (a library's own print) are passed over.
    """
    while True:
        line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        if line is None:
            return None
        record = read_event(line)
        if record is not None:
            return record


def describe_death(
    name: str, process: subprocess.Popen[str], started: bool, stderr_lines: list[str]
) -> str:
    """Say how a worker died: during a job or before starting one, its exit status, and the
    last line of its stderr."""
    tail = stderr_lines[-1].strip()[:200] if stderr_lines else ""
    state = "while running" if started else "before starting"
    reason = f"{name} process died {state} (exit {process.returncode})"
    return f"{reason}: {tail}" if tail else reason


def open_device(runtime: Any, uri: str) -> Any:
    """Return the runtime device at `uri`, or None after saying on the protocol that it cannot
    be used (`runtime` is `iree.runtime`, which a worker imports only once it runs)."""
    try:
        return runtime.get_device(uri)
    except Exception as error:  # The runtime raises plain exceptions for unknown devices.
        emit_event({"event": "device-error", "reason": f"{type(error).__name__}: {error}"})
        return None


def hal_driver(device: Any) -> str:
    """Name the HAL driver a runtime device belongs to (`local-task`, `vulkan`, `cuda`): what a
    worker reports beside its results, so that a run can show which device measured."""
    return str(device).split("://", 1)[0]


def copy_to_host(runtime: Any, device: Any, value: Any) -> Any:
    """Return a function result as a numpy array on the host.

    `DeviceArray.to_host()` imports host memory into the device; the Vulkan driver of IREE 3.13
    refuses that for numpy's alignment (`host allocation import pointer does not satisfy Vulkan
    minImportedHostPointerAlignment 4096`). On Vulkan the result is copied on the device's queue
    into a host-visible buffer instead, which is then mapped.
    """
    import numpy as np

    if not hasattr(value, "to_host"):
        return np.asarray(value)
    if hal_driver(device) != "vulkan":
        return np.asarray(value.to_host())
    buffer_view = value._buffer_view
    source = buffer_view.get_buffer()
    staging = device.allocator.allocate_buffer(
        memory_type=int(runtime.MemoryType.HOST_LOCAL | runtime.MemoryType.DEVICE_VISIBLE),
        allowed_usage=int(runtime.BufferUsage.TRANSFER_TARGET | runtime.BufferUsage.MAPPING_SCOPED),
        allocation_size=source.byte_length(),
    )
    semaphore = device.create_semaphore(0)
    device.queue_copy(
        source,
        staging,
        wait_semaphores=runtime.HalFence.create_at(semaphore, 0),
        signal_semaphores=runtime.HalFence.create_at(semaphore, 1),
    )
    runtime.HalFence.create_at(semaphore, 1).wait()
    # A copy: the mapping ends with the staging buffer.
    return np.array(staging.map().asarray(buffer_view.shape, value.dtype))


class FailureKind(enum.Enum):
    TIMED_OUT = "timed-out"
    CRASHED = "crashed"
    DEVICE_ERROR = "device-error"


@dataclass(frozen=True)
class WorkerFailure:
    """Why a job has no result: its worker hung, died, or found no device."""

    kind: FailureKind
    reason: str


@dataclass(frozen=True)
class JobReport(Generic[Job]):
    """One job and what came of it: the worker's result record, or the failure."""

    job: Job
    record: dict[str, Any] | None
    failure: WorkerFailure | None = None


def _read_lines(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def _read_lines_into(stream: IO[str], sink: list[str]) -> None:
    for line in stream:
        sink.append(line)


def start_worker(
    command: Sequence[str],
) -> tuple[subprocess.Popen[str], queue.Queue[str | None], list[str]]:
    """Start a worker with its request to come on stdin; return the process, the queue its
    stdout lines arrive in (None after the last) and the list its stderr lines are added to."""
    process = start_child(command, stdin=subprocess.PIPE)
    assert process.stdout is not None
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_read_lines, args=(process.stdout, lines), daemon=True).start()
    stderr_lines: list[str] = []
    if process.stderr is not None:
        threading.Thread(
            target=_read_lines_into, args=(process.stderr, stderr_lines), daemon=True
        ).start()
    return process, lines, stderr_lines


def supervise_worker(
    name: str,
    command: list[str],
    jobs: Sequence[Job],
    build_request: Callable[[Sequence[Job], int], dict[str, Any]],
    timeout_s: Callable[[], float],
) -> Generator[JobReport[Job], None, None]:
    """Run `command` (the `name` worker, for reasons) over `jobs`; yield one report per job, in
    job order.

    `build_request(pending, first_index)` makes the request of a worker that starts at job
    `first_index`; `timeout_s()` bounds one job from its start (read again for every job, so a
    caller may tighten it once it learned from the first result).
    """
    next_job = 0
    while next_job < len(jobs):
        pending = jobs[next_job:]
        process, lines, stderr_lines = start_worker(command)
        assert process.stdin is not None
        try:
            process.stdin.write(json.dumps(build_request(pending, next_job)))
            process.stdin.close()
        except BrokenPipeError:
            pass
        reported = 0
        try:
            started = False
            limit = timeout_s()
            deadline = time.monotonic() + limit
            while True:
                try:
                    record = next_event(lines, deadline)
                except queue.Empty:
                    stop_child(process)
                    failure = WorkerFailure(
                        FailureKind.TIMED_OUT, f"no result within {limit:.1f} s"
                    )
                    reported += 1
                    yield JobReport(pending[reported - 1], None, failure)
                    break
                if record is None:
                    process.wait()
                    if reported < len(pending):
                        reason = describe_death(name, process, started, stderr_lines)
                        reported += 1
                        yield JobReport(
                            pending[reported - 1], None, WorkerFailure(FailureKind.CRASHED, reason)
                        )
                    break
                event = record.get("event")
                if event == "device-error":
                    process.wait()
                    failure = WorkerFailure(FailureKind.DEVICE_ERROR, str(record.get("reason")))
                    for job in pending[reported:]:
                        reported += 1
                        yield JobReport(job, None, failure)
                    return
                if event == "start":
                    started = True
                    limit = timeout_s()
                    deadline = time.monotonic() + limit
                elif event == "result":
                    reported += 1
                    started = False
                    yield JobReport(pending[reported - 1], record)
                    # Read after the caller saw the result: it may have changed the timeout.
                    limit = timeout_s()
                    deadline = time.monotonic() + limit
                    if record.get("restart"):
                        # The device may be broken: the next job gets a fresh worker.
                        stop_child(process)
                        break
                    if reported == len(pending):
                        break
        finally:
            # Also when the caller stops reading early: no worker outlives its generator.
            if process.poll() is None:
                stop_child(process)
        next_job += reported
