"""The real benchmark worker, with real faults injected for chosen candidates.

Used through IREETUNE_BENCHMARK_WORKER. IREETUNE_FAULT_CRASH names a candidate id whose run kills
the process with SIGSEGV; IREETUNE_FAULT_HANG names one whose run never returns;
IREETUNE_FAULT_DEVICE names one whose run fails on the device and leaves the device broken, as a
CUDA illegal address does: every later run in the same process fails too.
IREETUNE_FAULT_DELAY adds that many seconds before each job (to widen windows in kill tests).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

from ireetune.benchmark import worker

_real_time_job = worker.time_job
_device_broken = False


def _time_job_with_faults(
    runtime: Any,
    device: Any,
    job: dict[str, Any],
    request: dict[str, Any],
    cache: dict[str, tuple[Any, str]] | None = None,
) -> dict[str, Any]:
    global _device_broken
    time.sleep(float(os.environ.get("IREETUNE_FAULT_DELAY", "0")))
    candidate_id = job["candidate_id"]
    if candidate_id == int(os.environ.get("IREETUNE_FAULT_CRASH", "-1")):
        os.kill(os.getpid(), signal.SIGSEGV)
    if candidate_id == int(os.environ.get("IREETUNE_FAULT_HANG", "-1")):
        time.sleep(3600)
    if _device_broken:
        raise RuntimeError("injected: the device is broken by an earlier fault")
    if candidate_id == int(os.environ.get("IREETUNE_FAULT_DEVICE", "-1")):
        _device_broken = True
        raise RuntimeError("injected device fault: an illegal memory access was encountered")
    return _real_time_job(runtime, device, job, request, cache)


if __name__ == "__main__":
    worker.time_job = _time_job_with_faults
    sys.exit(worker.main())
