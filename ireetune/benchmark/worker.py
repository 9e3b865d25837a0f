"""Time compiled dispatch benchmarks in one process, reporting each result as a JSON line.

Run as `python -m ireetune.benchmark.worker` with a JSON request on stdin. It needs only
`iree-base-runtime` (no compiler, no z3) so a folder of binaries can be measured on any machine.
The device is opened once and reused for every candidate, which on a GPU saves the seconds of
driver start-up that one process per candidate would pay.

Request: {"device": "local-task", "repetitions": 5, "batch": 0, "min_repetition_s": 0.05,
          "hopeless_ms": null, "jobs": [{"candidate_id": 0, "vmfb": "0.vmfb"}]}
Each job prints {"event": "start", "job_index": i, ...} before it runs and {"event": "result",
...} after. A candidate may appear several times (interleaved confirmation rounds).
"""

from __future__ import annotations

import json
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


def time_job(
    runtime: Any, device: Any, job: dict[str, Any], request: dict[str, Any]
) -> dict[str, Any]:
    """Load one binary and time its benchmark function; return the result record."""
    config = runtime.Config(device=device)
    context = runtime.SystemContext(config=config)
    vm_module = runtime.VmModule.mmap(config.vm_instance, job["vmfb"])
    context.add_vm_module(vm_module)
    function_name = job.get("function") or _find_benchmark_function(vm_module)
    function = context.modules[vm_module.name][function_name]
    function(1)  # Warm-up: loads the executable (and JIT-compiles it on a GPU).
    batch = int(request.get("batch") or 0)
    if batch <= 0:
        batch = _choose_batch(function, float(request.get("min_repetition_s", 0.05)))
    # One untimed repetition lets the thread pool spin up and clocks settle; the first timed
    # repetitions were 30-50% slow without it on a 2-core machine.
    function(batch)
    hopeless_ms = request.get("hopeless_ms")
    times_ms: list[float] = []
    stopped_early = False
    for _ in range(int(request.get("repetitions", 5))):
        start = time.perf_counter()
        function(batch)
        times_ms.append((time.perf_counter() - start) * 1000.0 / batch)
        if hopeless_ms is not None and times_ms[-1] > float(hopeless_ms):
            stopped_early = True
            break
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
    for job_index, job in enumerate(request["jobs"]):
        _emit({"event": "start", "job_index": job_index, "candidate_id": job["candidate_id"]})
        try:
            record = time_job(runtime, device, job, request)
        except Exception as error:  # Any runtime failure is this candidate's, not the run's.
            record = {
                "event": "result",
                "candidate_id": job["candidate_id"],
                "status": "error",
                "reason": f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}",
            }
        record["job_index"] = job_index
        _emit(record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
