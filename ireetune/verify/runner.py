"""Run reference programs in worker processes (the worker protocol, core/worker_protocol.py), so a
broken candidate cannot crash the tuner, and one that crashes or hangs costs only itself."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ireetune.core.worker_protocol import supervise_worker


@dataclass(frozen=True)
class ReferenceRun:
    """One reference program's output (None when it failed) and its median call time."""

    output: npt.NDArray[np.generic] | None
    median_ms: float | None
    reason: str
    # The HAL driver the program ran on (`local-task`, `vulkan`); "" when it did not run.
    driver: str = ""


@dataclass(frozen=True)
class ReferenceBatch:
    """Reference programs for an executor (`Executor.run_reference_programs`): run each
    (candidate_id, binary, output path) on the inputs on `device`, `repetitions` timed calls
    each, each program stopped after `timeout_s`."""

    jobs: Sequence[tuple[int, Path, Path]]
    device: str
    inputs_path: Path
    repetitions: int = 3
    timeout_s: float = 600.0


def run_reference_programs_here(batch: ReferenceBatch) -> dict[int, ReferenceRun]:
    """Run a batch of reference programs on this host; collect what came back."""
    jobs, device, inputs_path = batch.jobs, batch.device, batch.inputs_path
    repetitions, timeout_s = batch.repetitions, batch.timeout_s
    if not jobs:
        return {}

    def build_request(pending: Sequence[tuple[int, Path, Path]], _: int) -> dict[str, object]:
        return {
            "device": device,
            "inputs": str(inputs_path),
            "repetitions": repetitions,
            "jobs": [
                {"candidate_id": cid, "vmfb": str(vmfb), "output": str(out)}
                for cid, vmfb, out in pending
            ],
        }

    runs: dict[int, ReferenceRun] = {}
    command = [sys.executable, "-m", "ireetune.verify.worker"]
    for report in supervise_worker("verification", command, jobs, build_request, lambda: timeout_s):
        candidate_id, _, output_path = report.job
        record = report.record
        if report.failure is not None:
            runs[candidate_id] = ReferenceRun(None, None, report.failure.reason)
        elif record is not None and record.get("status") == "ok":
            runs[candidate_id] = ReferenceRun(
                np.load(output_path), record.get("median_ms"), "", str(record.get("driver", ""))
            )
        else:
            reason = str(record.get("reason", "")) if record is not None else ""
            runs[candidate_id] = ReferenceRun(None, None, reason)
    return runs
