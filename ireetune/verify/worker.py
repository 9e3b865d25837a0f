"""Run reference programs on given inputs and save their outputs (runtime only).

Run as `python -m ireetune.verify.worker` with a JSON request on stdin:
{"device": "local-task", "inputs": "inputs.npz", "repetitions": 3,
 "jobs": [{"candidate_id": 0, "vmfb": "ref_0.vmfb", "output": "out_0.npy"}]}
It speaks the worker protocol (core/worker_protocol.py): a "start" line before each job, a "result"
line after it with its status and the median call time in milliseconds. Like the benchmark worker
it needs only `iree-base-runtime` and `numpy`.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any

import numpy as np

from ireetune.core.input_archive import read_input_archive
from ireetune.core.worker_protocol import copy_to_host, emit_event, hal_driver, open_device


def _run_job(
    runtime: Any, device: Any, inputs: list[Any], job: dict[str, Any], repetitions: int
) -> dict[str, Any]:
    config = runtime.Config(device=device)
    context = runtime.SystemContext(config=config)
    vm_module = runtime.VmModule.mmap(config.vm_instance, job["vmfb"])
    context.add_vm_module(vm_module)
    function = context.modules[vm_module.name]["main"]
    result = function(*inputs)
    np.save(job["output"], copy_to_host(runtime, device, result))
    times_ms = []
    for _ in range(repetitions):
        start = time.perf_counter()
        copy_to_host(runtime, device, function(*inputs))
        times_ms.append((time.perf_counter() - start) * 1000.0)
    return {
        "candidate_id": job["candidate_id"],
        "status": "ok",
        "median_ms": statistics.median(times_ms) if times_ms else None,
        "driver": hal_driver(device),
    }


def main() -> int:
    request = json.loads(sys.stdin.read())
    import iree.runtime as runtime

    device = open_device(runtime, request["device"])
    if device is None:
        return 3
    inputs = read_input_archive(request["inputs"])
    for job_index, job in enumerate(request["jobs"]):
        emit_event({"event": "start", "job_index": job_index, "candidate_id": job["candidate_id"]})
        try:
            record = _run_job(runtime, device, inputs, job, int(request.get("repetitions", 3)))
        except Exception as error:  # A broken candidate is reported, never fatal.
            record = {
                "candidate_id": job["candidate_id"],
                "status": "error",
                "reason": str(error)[:300],
            }
        emit_event({"event": "result", "job_index": job_index, **record})
    return 0


if __name__ == "__main__":
    sys.exit(main())
