"""Run reference programs in a separate process, so a broken candidate cannot crash the tuner."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ireetune.child_process import run_child


@dataclass(frozen=True)
class ReferenceRun:
    """One reference program's output (None when it failed) and its median call time."""

    output: npt.NDArray[np.generic] | None
    median_ms: float | None
    reason: str


def run_reference_programs(
    jobs: Sequence[tuple[int, Path, Path]],
    device: str,
    inputs_path: Path,
    repetitions: int = 3,
    timeout_s: float = 600.0,
) -> dict[int, ReferenceRun]:
    """Run each (candidate_id, binary, output path) on the inputs; collect what came back."""
    if not jobs:
        return {}
    request = {
        "device": device,
        "inputs": str(inputs_path),
        "repetitions": repetitions,
        "jobs": [
            {"candidate_id": cid, "vmfb": str(vmfb), "output": str(out)} for cid, vmfb, out in jobs
        ],
    }
    completed = run_child(
        [sys.executable, "-m", "ireetune.verify.worker"],
        input_text=json.dumps(request),
        timeout_s=timeout_s,
    )
    stdout = completed.stdout
    if completed.timed_out:
        failure = f"verification timed out after {timeout_s:.0f} s"
    else:
        failure = f"verification process exited {completed.returncode}"
    runs: dict[int, ReferenceRun] = {}
    for line in stdout.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        candidate_id = int(record["candidate_id"])
        if record.get("status") == "ok":
            output_path = next(out for cid, _, out in jobs if cid == candidate_id)
            runs[candidate_id] = ReferenceRun(np.load(output_path), record.get("median_ms"), "")
        else:
            runs[candidate_id] = ReferenceRun(None, None, str(record.get("reason", "")))
    for candidate_id, _, _ in jobs:
        runs.setdefault(candidate_id, ReferenceRun(None, None, failure))
    return runs
