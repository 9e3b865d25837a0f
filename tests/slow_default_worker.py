"""The real benchmark worker on the real device, with the default's times multiplied.

Used through IREETUNE_BENCHMARK_WORKER by the Vulkan end-to-end tests: lavapipe shares two busy
cores, so whether a candidate beats the default is chance; multiplying the default's (candidate
0's) measured times by IREETUNE_TEST_DEFAULT_SLOWDOWN makes every candidate a clear winner, so
that verification, the decision and the written spec run every time. Everything is still loaded,
run and timed on the device. IREETUNE_TEST_DRIVER_LOG names a file that gets the HAL driver of
every job timed ("vulkan"), one a line.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ireetune.benchmark import worker

_real_time_job = worker.time_job


def _time_job_slow_default(
    runtime: Any,
    device: Any,
    job: dict[str, Any],
    request: dict[str, Any],
    cache: dict[str, tuple[Any, str]] | None = None,
) -> dict[str, Any]:
    record = _real_time_job(runtime, device, job, request, cache)
    log = os.environ.get("IREETUNE_TEST_DRIVER_LOG")
    if log:
        with open(log, "a") as driver_log:
            driver_log.write(f"{record['driver']}\n")
    if job["candidate_id"] == 0:
        factor = float(os.environ.get("IREETUNE_TEST_DEFAULT_SLOWDOWN", "1"))
        record["times_ms"] = [time * factor for time in record["times_ms"]]
    return record


worker.time_job = _time_job_slow_default

if __name__ == "__main__":
    sys.exit(worker.main())
