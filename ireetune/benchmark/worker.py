"""Time compiled dispatch benchmarks in one process, reporting each result as a JSON line.

Run as `python -m ireetune.benchmark.worker` with a JSON request on stdin. It needs only
`iree-base-runtime` (no compiler, no z3) so a folder of binaries can be measured on any machine.
The device is opened once and reused for every candidate, which on a GPU saves the seconds of
driver start-up that one process per candidate would pay.

Request: {"device": "local-task", "repetitions": 5, "batch": 0, "min_repetition_s": 0.05,
          "hopeless_ms": null, "jobs": [{"candidate_id": 0, "vmfb": "0.vmfb"}]}
A job with "inputs" (an .npz of arg0, arg1, ...) and "function" times a program on those real
inputs instead: they are uploaded once, and a batch of n is n calls.
With "learn_from_first": true, the first job (the baseline) fixes the batch for the others and,
with "hopeless_factor": f, their early-stop threshold (f times its median).
Each job prints {"event": "start", "job_index": i, ...} before it runs and {"event": "result",
...} after. A candidate may appear several times (interleaved confirmation rounds).

A binary that fails to load is that candidate's failure alone. An error once a candidate ran on
the device may have broken the device (a CUDA illegal address poisons the context): the worker
reports it with "restart": true and exits, and the runner gives the next job a fresh process.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any

_MAX_BATCH = 1 << 16


def _emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


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
    import numpy as np

    with np.load(inputs_path) as archive:
        host = [archive[f"arg{i}"] for i in range(len(archive.files))]
    # Uploaded once, results left on the device: only execution is timed.
    arguments = [runtime.asdevicearray(device, array) for array in host]

    def call(count: int) -> None:
        for _ in range(count):
            function(*arguments)

    return call


class CandidateLoadError(Exception):
    """A binary that could not be loaded: the candidate's fault; the device was not touched."""


def load_function(runtime: Any, device: Any, job: dict[str, Any]) -> tuple[Any, str]:
    """Load one binary on the device; return its benchmark function (warmed up) and name."""
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
    function(1)  # Warm-up: loads the executable (and JIT-compiles it on a GPU).
    return function, function_name


def time_function(
    function: Any, batch: int, repetitions: int, hopeless_ms: float | None
) -> tuple[list[float], bool]:
    """Time `repetitions` calls of `batch` dispatches; stop early once clearly hopeless."""
    if hopeless_ms is not None:
        start = time.perf_counter()
        function(1)
        single_ms = (time.perf_counter() - start) * 1000.0
        if single_ms > max(hopeless_ms, _SINGLE_CALL_FLOOR_MS):
            return [single_ms], True
    # One untimed repetition lets the thread pool spin up and clocks settle; the first timed
    # repetitions were 30-50% slow without it on a 2-core machine.
    function(batch)
    times_ms: list[float] = []
    for _ in range(repetitions):
        start = time.perf_counter()
        function(batch)
        times_ms.append((time.perf_counter() - start) * 1000.0 / batch)
        if hopeless_ms is not None and times_ms[-1] > hopeless_ms:
            return times_ms, True
    return times_ms, False


def time_job(
    runtime: Any,
    device: Any,
    job: dict[str, Any],
    request: dict[str, Any],
    cache: dict[str, tuple[Any, str]] | None = None,
) -> dict[str, Any]:
    """Load (or reuse) one binary and time its benchmark function; return the result record.

    The request's `batch` (0: choose one so a repetition lasts `min_repetition_s`) and
    `hopeless_ms` apply; `main` fills them from the first job when the request asks it to.
    """
    if cache is not None and job["vmfb"] in cache:
        function, function_name = cache[job["vmfb"]]
    else:
        function, function_name = load_function(runtime, device, job)
        if cache is not None:
            cache[job["vmfb"]] = (function, function_name)
    batch = int(request.get("batch") or 0)
    if batch <= 0:
        batch = _choose_batch(function, float(request.get("min_repetition_s", 0.05)))
    hopeless_ms = request.get("hopeless_ms")
    times_ms, stopped_early = time_function(
        function,
        batch,
        int(request.get("repetitions", 5)),
        float(hopeless_ms) if hopeless_ms is not None else None,
    )
    return {
        "event": "result",
        "candidate_id": job["candidate_id"],
        "status": "measured",
        "function": function_name,
        "batch": batch,
        "times_ms": times_ms,
        "stopped_early": stopped_early,
    }


def main() -> int:
    request = json.loads(sys.stdin.read())
    import iree.runtime as runtime

    try:
        device = runtime.get_device(request["device"])
    except Exception as error:  # The runtime raises plain exceptions for unknown devices.
        _emit({"event": "device-error", "reason": f"{type(error).__name__}: {error}"})
        return 3
    # Binaries that appear more than once (interleaved confirmation rounds) stay loaded.
    paths = [job["vmfb"] for job in request["jobs"]]
    cache: dict[str, tuple[Any, str]] = {}
    repeated = {path for path in paths if paths.count(path) > 1}
    for job_index, job in enumerate(request["jobs"]):
        _emit({"event": "start", "job_index": job_index, "candidate_id": job["candidate_id"]})
        try:
            record = time_job(
                runtime, device, job, request, cache if job["vmfb"] in repeated else None
            )
            if job_index == 0 and request.get("learn_from_first") and record["times_ms"]:
                # The first job is the baseline: its batch and time set the rest's.
                request["batch"] = record["batch"]
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
            _emit(
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
        _emit(record)
    return 0


def _first_line(error: Exception) -> str:
    text = str(error)
    return text.splitlines()[0] if text else ""


if __name__ == "__main__":
    sys.exit(main())
