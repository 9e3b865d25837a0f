"""The real benchmark worker, with real faults injected for chosen candidates.

Used through IREETUNE_BENCHMARK_WORKER. IREETUNE_FAULT_CRASH names a candidate id whose run kills
the process with SIGSEGV; IREETUNE_FAULT_HANG names one whose run never returns;
IREETUNE_FAULT_DEVICE names one whose run fails on the device and leaves the device broken, as a
CUDA illegal address does: every later run in the same process fails too.
IREETUNE_FAULT_DELAY adds that many seconds before each job (to widen windows in kill tests).
IREETUNE_FAULT_SLOW names a candidate that loads fine but whose every run never returns (a
kernel that hangs). IREETUNE_FAULT_PHASE="FIRST LAST FACTOR" plays a machine's slow phase:
the times of this process's jobs FIRST to LAST (counted from 0, in the order timed) are multiplied
by FACTOR. IREETUNE_FAULT_LOG names a file that gets a line "PID load PATH" for every
binary this process loads (a prewarm process included) and "PID job ID" for every job it times.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

from ireetune.benchmark import worker

_real_time_job = worker.time_job
_real_load_function = worker.load_function
_device_broken = False
_jobs_timed = 0


def _log(line: str) -> None:
    path = os.environ.get("IREETUNE_FAULT_LOG")
    if path:
        with open(path, "a") as log:
            log.write(f"{os.getpid()} {line}\n")


def _load_function_with_faults(runtime: Any, device: Any, job: dict[str, Any]) -> tuple[Any, str]:
    _log(f"load {job['vmfb']}")
    function, name = _real_load_function(runtime, device, job)
    if job.get("candidate_id") == int(os.environ.get("IREETUNE_FAULT_SLOW", "-1")):

        def hang(count: int) -> None:
            time.sleep(3600)

        return hang, name
    return function, name


def _time_job_with_faults(
    runtime: Any,
    device: Any,
    job: dict[str, Any],
    request: dict[str, Any],
    cache: dict[str, tuple[Any, str]] | None = None,
) -> dict[str, Any]:
    global _device_broken, _jobs_timed
    time.sleep(float(os.environ.get("IREETUNE_FAULT_DELAY", "0")))
    candidate_id = job["candidate_id"]
    _log(f"job {candidate_id}")
    if candidate_id == int(os.environ.get("IREETUNE_FAULT_CRASH", "-1")):
        os.kill(os.getpid(), signal.SIGSEGV)
    if candidate_id == int(os.environ.get("IREETUNE_FAULT_HANG", "-1")):
        time.sleep(3600)
    if _device_broken:
        raise RuntimeError("injected: the device is broken by an earlier fault")
    if candidate_id == int(os.environ.get("IREETUNE_FAULT_DEVICE", "-1")):
        _device_broken = True
        raise RuntimeError("injected device fault: an illegal memory access was encountered")
    result = _real_time_job(runtime, device, job, request, cache)
    _jobs_timed += 1
    first, last, factor = (os.environ.get("IREETUNE_FAULT_PHASE") or "0 -1 1").split()
    if int(first) <= _jobs_timed - 1 <= int(last):
        result["times_ms"] = [t * float(factor) for t in result["times_ms"]]
    return result


if __name__ == "__main__":
    worker.time_job = _time_job_with_faults
    worker.load_function = _load_function_with_faults
    sys.exit(worker.main())
