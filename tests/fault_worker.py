"""A benchmark worker that injects real faults for chosen candidates, then behaves normally.

Used through IREETUNE_BENCHMARK_WORKER. IREETUNE_FAULT_CRASH names a candidate id whose run kills
the process with SIGSEGV; IREETUNE_FAULT_HANG names one whose run never returns;
IREETUNE_FAULT_DELAY adds that many seconds before each job (to widen windows in kill tests).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import iree.runtime as runtime

from ireetune.benchmark.worker import time_job


def main() -> None:
    request = json.loads(sys.stdin.read())
    crash_id = int(os.environ.get("IREETUNE_FAULT_CRASH", "-1"))
    hang_id = int(os.environ.get("IREETUNE_FAULT_HANG", "-1"))
    delay_s = float(os.environ.get("IREETUNE_FAULT_DELAY", "0"))
    device = runtime.get_device(request["device"])
    for index, job in enumerate(request["jobs"]):
        print(
            json.dumps({"event": "start", "job_index": index, "candidate_id": job["candidate_id"]}),
            flush=True,
        )
        time.sleep(delay_s)
        if job["candidate_id"] == crash_id:
            os.kill(os.getpid(), signal.SIGSEGV)
        if job["candidate_id"] == hang_id:
            time.sleep(3600)
        record = time_job(runtime, device, job, request)
        record["job_index"] = index
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
