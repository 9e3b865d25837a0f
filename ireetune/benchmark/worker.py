"""Time compiled dispatch benchmarks in one process, reporting each result as a JSON line.

Run as `python -m ireetune.benchmark.worker` with a JSON request on stdin. It needs only
`iree-base-runtime` (no compiler, no z3) so a folder of binaries can be measured on any machine.
The device is opened once and reused for every candidate, which on a GPU saves the seconds of
driver start-up that one process per candidate would pay.

Request (the first line of stdin): {"device": "local-task", "repetitions": 5, "batch": 0,
          "min_repetition_s": 0.05, "hopeless_ms": null, "jobs": [{"candidate_id": 0, ...}]}
More jobs may follow, one JSON object a line, until stdin closes: the runner streams candidates
to one worker as they compile, and the confirmation rounds after them, so the device stays open
and loaded binaries stay loaded for the whole campaign (the latest `_CACHED_MODULES`, of which at
most `_CACHED_WITH_INPUTS` hold uploaded real inputs, which can be large).
A job with "inputs" (an .npz of arg0, arg1, ...) and "function" times a program on those real
inputs instead: they are uploaded once, and a batch of n is n calls.
With "learn_from_first": true, the first job (the baseline) fixes the batch for the others
("screen_fraction" of it, at least 1) and, with "hopeless_factor": f, their early-stop threshold
(f times its median). A job may carry its own "batch".
Each job prints {"event": "start", "job_index": i, ...} before it loads, {"event": "loaded"}
once loaded, {"event": "first-run", "ms": t} after its first (warm-up) call and {"event":
"result", ...} at the end, so the runner can give each phase its own deadline. A candidate may
appear several times (interleaved confirmation rounds).

`python -m ireetune.benchmark.worker --prewarm` only loads binaries (paths, one a line, after the
device line) and drops them: on a GPU that JIT-compiles the next candidates into the driver's
cache while this worker measures, without sharing its process (module registration holds the GIL,
so a loading thread beside the timing one would stall its clock). On Vulkan, which compiles at a
binary's first call, it also calls each binary's benchmark once.

A binary that fails to load is that candidate's failure alone. An error once a candidate ran on
the device may have broken the device (a CUDA illegal address poisons the context): the worker
reports it with "restart": true and exits, and the runner gives the next job a fresh process.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import time
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

from ireetune.benchmark.timing import TimingKind
from ireetune.core.worker_protocol import emit_event, hal_driver, open_device

_MAX_BATCH = 1 << 16
# Loaded binaries kept for later jobs of the same campaign (the leaders' confirmation rounds).
_CACHED_MODULES = 32
_CACHED_WITH_INPUTS = 6


def _find_benchmark_function(vm_module: Any) -> str:
    """Return the dispatch-benchmark function: the first exported name that is not `__init`."""
    names = [name for name in vm_module.function_names if not name.startswith("__")]
    if not names:
        raise RuntimeError("module exports no dispatch benchmark function")
    return str(names[0])


def _choose_batch(function: Any, min_repetition_s: float) -> int:
    """Double the batch until one call takes at least `min_repetition_s`."""
    batch = 1
    while batch < _MAX_BATCH:
        start = time.perf_counter()
        function(batch)
        if time.perf_counter() - start >= min_repetition_s:
            return batch
        batch *= 2
    return batch


# A single call slower than this (and than the hopeless threshold) ends a candidate at once:
# below it, launch overhead could make a good kernel look slow.
_SINGLE_CALL_FLOOR_MS = 1.0


def _on_real_inputs(runtime: Any, device: Any, function: Any, inputs_path: str) -> Any:
    """Wrap a program's function so that calling it with n runs it n times on real inputs."""
    from ireetune.core.input_archive import read_input_archive

    host = read_input_archive(inputs_path)
    # Uploaded once, results left on the device: only execution is timed.
    arguments = [runtime.asdevicearray(device, array) for array in host]

    def call(count: int) -> None:
        for _ in range(count):
            function(*arguments)

    return call


class CandidateLoadError(Exception):
    """A binary that could not be loaded: the candidate's fault; the device was not touched."""


def load_function(runtime: Any, device: Any, job: dict[str, Any]) -> tuple[Any, str]:
    """Load one binary on the device; return its benchmark function and name (not yet run)."""
    try:
        config = runtime.Config(device=device)
        context = runtime.SystemContext(config=config)
        vm_module = runtime.VmModule.mmap(config.vm_instance, job["vmfb"])
        context.add_vm_module(vm_module)
        function_name = job.get("function") or _find_benchmark_function(vm_module)
        function = context.modules[vm_module.name][function_name]
        if job.get("inputs"):
            function = _on_real_inputs(runtime, device, function, job["inputs"])
    except Exception as error:  # The runtime raises plain exceptions for unloadable binaries.
        raise CandidateLoadError(f"{type(error).__name__}: {_first_line(error)}") from error
    return function, function_name


def _single_call_ms(function: Any) -> float:
    """Return the wall time of one call of one dispatch, in ms."""
    start = time.perf_counter()
    function(1)
    return (time.perf_counter() - start) * 1000.0


def time_function(
    function: Any, batch: int, repetitions: int, hopeless_ms: float | None
) -> tuple[list[float], bool, int]:
    """Time `repetitions` calls of `batch` dispatches; stop early once clearly hopeless.

    Return the times (per dispatch), whether it stopped early, and the dispatches per timed
    call (1 when a single hopeless call ended it).
    """
    if hopeless_ms is not None:
        # Timed after the warm-up call: a first call pays wake-ups that a tiny dispatch's
        # threshold would mistake for slowness. A call that looks hopeless is timed once more
        # and the faster counts: one call caught by a stall of the host is no verdict (a
        # ZFNet-512 convolution's candidate read 6.1x the default's time in one call, then ran
        # faster than the default inside the model; 2026-12-07).
        single_ms = _single_call_ms(function)
        if single_ms > max(hopeless_ms, _SINGLE_CALL_FLOOR_MS):
            single_ms = min(single_ms, _single_call_ms(function))
            if single_ms > max(hopeless_ms, _SINGLE_CALL_FLOOR_MS):
                return [single_ms], True, 1
    # One untimed repetition lets the thread pool spin up and clocks settle; the first timed
    # repetitions were 30-50% slow without it on a 2-core machine.
    function(batch)
    times_ms: list[float] = []
    for _ in range(repetitions):
        start = time.perf_counter()
        function(batch)
        times_ms.append((time.perf_counter() - start) * 1000.0 / batch)
        if hopeless_ms is not None and times_ms[-1] > hopeless_ms:
            return times_ms, True, batch
    return times_ms, False, batch


def time_job(
    runtime: Any,
    device: Any,
    job: dict[str, Any],
    request: dict[str, Any],
    cache: dict[str, tuple[Any, str]] | None = None,
) -> dict[str, Any]:
    """Load (or reuse) one binary and time its benchmark function; return the result record.

    The job's or else the request's `batch` (0: choose one so a repetition lasts
    `min_repetition_s`) and `hopeless_ms` apply; `main` fills them from the first job when the
    request asks it to. Prints the "loaded" and "first-run" events as the phases end.
    """
    start = time.perf_counter()
    if cache is not None and job["vmfb"] in cache:
        function, function_name = cache[job["vmfb"]]
        if isinstance(cache, OrderedDict):
            cache.move_to_end(job["vmfb"])
    else:
        function, function_name = load_function(runtime, device, job)
        if cache is not None:
            cache[job["vmfb"]] = (function, function_name)
    load_s = time.perf_counter() - start
    emit_event({"event": "loaded", "seconds": load_s})
    # The first call warms up (executable upload, JIT on some drivers, caches); its time sets
    # the runner's deadline for later first runs.
    start = time.perf_counter()
    function(1)
    first_ms = (time.perf_counter() - start) * 1000.0
    emit_event({"event": "first-run", "ms": first_ms})
    batch = int(job.get("batch") or request.get("batch") or 0)
    if batch <= 0:
        batch = _choose_batch(function, float(request.get("min_repetition_s", 0.05)))
    # A confirmation round times every repetition of its leaders: no early stop there.
    hopeless_ms = request.get("hopeless_ms") if job.get("early_stop", True) else None
    times_ms, stopped_early, per_call = time_function(
        function,
        batch,
        int(request.get("repetitions", 5)),
        float(hopeless_ms) if hopeless_ms is not None else None,
    )
    if job.get("inputs"):
        timing = TimingKind.HOST_PER_CALL
    elif per_call > 1:
        timing = TimingKind.BATCHED
    else:
        timing = TimingKind.HOST
    return {
        "event": "result",
        "candidate_id": job["candidate_id"],
        "status": "measured",
        "function": function_name,
        "batch": batch,
        "times_ms": times_ms,
        "stopped_early": stopped_early,
        "timing": timing.value,
        "load_s": load_s,
        "first_run_ms": first_ms,
        "driver": hal_driver(device),
    }


def screened_batch(batch: int, fraction: float) -> int:
    """Return the first pass's batch: `fraction` of the baseline's, rounded down, at least 1."""
    return max(1, int(batch * fraction))


def _read_jobs(request: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Yield the request's own jobs, then each job line of stdin until it closes."""
    yield from request.get("jobs", [])
    for line in sys.stdin:
        if line.strip():
            yield json.loads(line)


def prewarm(device_uri: str) -> int:
    """Load each binary named on stdin and drop it (see the module docstring)."""
    import iree.runtime as runtime

    os.nice(10)  # Loading must not take the host's time from the measuring worker.
    device = runtime.get_device(device_uri)
    # Vulkan compiles a binary's pipelines at its first call, not at load: one call puts them in
    # the driver's shader cache on disk, where the measuring worker finds them (on lavapipe the
    # first call took 1.5-2.6 s without, about 10 ms with).
    call_once = hal_driver(device) == "vulkan"
    for line in sys.stdin:
        path = line.strip()
        if not path:
            continue
        # A binary that fails to load or run here is reported by the measuring worker.
        with contextlib.suppress(Exception):
            function, _ = load_function(runtime, device, {"vmfb": path})
            if call_once:
                function(1)
        emit_event({"event": "prewarmed", "vmfb": path})
    return 0


def main() -> int:
    if sys.argv[1:2] == ["--prewarm"]:
        return prewarm(sys.stdin.readline().strip())
    request = json.loads(sys.stdin.readline())
    import iree.runtime as runtime

    device = open_device(runtime, request["device"])
    if device is None:
        return 3
    # Loaded binaries stay loaded (interleaved confirmation rounds load nothing again).
    cache: OrderedDict[str, tuple[Any, str]] = OrderedDict()
    with_inputs: OrderedDict[str, tuple[Any, str]] = OrderedDict()
    for job_index, job in enumerate(_read_jobs(request)):
        emit_event({"event": "start", "job_index": job_index, "candidate_id": job["candidate_id"]})
        try:
            in_use = with_inputs if job.get("inputs") else cache
            record = time_job(runtime, device, job, request, in_use)
            _trim(in_use, _CACHED_WITH_INPUTS if in_use is with_inputs else _CACHED_MODULES)
            if job_index == 0 and request.get("learn_from_first") and record["times_ms"]:
                # The first job is the baseline: its batch and time set the rest's.
                request["batch"] = screened_batch(
                    record["batch"], float(request.get("screen_fraction") or 1.0)
                )
                factor = request.get("hopeless_factor")
                if factor is not None:
                    request["hopeless_ms"] = float(factor) * statistics.median(record["times_ms"])
        except CandidateLoadError as error:
            record = {
                "event": "result",
                "candidate_id": job["candidate_id"],
                "status": "error",
                "reason": str(error),
            }
        except Exception as error:  # A failure on the device: this candidate's, not the run's.
            emit_event(
                {
                    "event": "result",
                    "job_index": job_index,
                    "candidate_id": job["candidate_id"],
                    "status": "error",
                    "reason": f"{type(error).__name__}: {_first_line(error)}",
                    "restart": True,
                }
            )
            # The device may be broken now: the runner restarts a fresh worker for the rest.
            return 0
        record["job_index"] = job_index
        emit_event(record)
    return 0


def _trim(cache: OrderedDict[str, tuple[Any, str]], size: int) -> None:
    """Drop the least recently used binaries beyond `size`."""
    while len(cache) > size:
        cache.popitem(last=False)


def _first_line(error: Exception) -> str:
    text = str(error)
    return text.splitlines()[0] if text else ""


if __name__ == "__main__":
    sys.exit(main())
