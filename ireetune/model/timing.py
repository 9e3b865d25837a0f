"""Run the model worker in its own process and read back times and outputs."""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ireetune.benchmark.runner import BenchmarkJob, BenchmarkStatus, run_benchmarks
from ireetune.child_process import run_child
from ireetune.errors import IreetuneError


@dataclass(frozen=True)
class ModelRun:
    """One model binary's outputs and per-call times (empty when it failed)."""

    model_id: str
    outputs: tuple[npt.NDArray[np.generic], ...]
    times_ms: tuple[float, ...]
    reason: str

    @property
    def ok(self) -> bool:
        return not self.reason


def run_models_side_by_side(
    models: Sequence[tuple[str, Path]],
    function: str,
    inputs_path: Path,
    work_dir: Path,
    device: str,
    rounds: int,
    repetitions: int = 1,
    timeout_s: float = 1800.0,
    parameters: Sequence[Path] = (),
) -> dict[str, ModelRun]:
    """Time several compiled models interleaved in one process; return each one's run.

    `parameters` are the parameter archives (.irpa) the models read their weights from.
    """
    jobs = [
        {"id": model_id, "vmfb": str(path), "outputs": str(work_dir / f"{model_id}_outputs.npz")}
        for model_id, path in models
    ]
    request = {
        "device": device,
        "inputs": str(inputs_path),
        "function": function,
        "rounds": rounds,
        "repetitions": repetitions,
        "jobs": jobs,
        "parameters": [str(path) for path in parameters],
    }
    completed = run_child(
        [sys.executable, "-m", "ireetune.model.worker"],
        input_text=json.dumps(request),
        timeout_s=timeout_s,
    )
    if completed.timed_out:
        raise IreetuneError(f"timing the model took over {timeout_s:.0f} s")
    runs: dict[str, ModelRun] = {}
    for line in completed.stdout.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record.get("status") == "ok":
            with np.load(work_dir / f"{record['id']}_outputs.npz") as archive:
                outputs = tuple(archive[f"arr_{i}"] for i in range(len(archive.files)))
            runs[record["id"]] = ModelRun(record["id"], outputs, tuple(record["times_ms"]), "")
        else:
            runs[record["id"]] = ModelRun(record["id"], (), (), str(record.get("reason", "failed")))
    for model_id, _ in models:
        if model_id not in runs:
            tail = completed.stderr.strip().splitlines()[-1:] if completed.stderr else []
            runs[model_id] = ModelRun(
                model_id, (), (), f"model process exited {completed.returncode}: {' '.join(tail)}"
            )
    return runs


def time_dispatch_benchmarks(binaries: Mapping[int, Path], device: str) -> dict[int, float]:
    """Time each compiled dispatch benchmark once on `device`; return the median ms of each."""
    timings: dict[int, float] = {}
    for outcome in run_benchmarks(
        [BenchmarkJob(index, path) for index, path in sorted(binaries.items())],
        device,
        repetitions=3,
        batch=0,
        timeout_s=120,
        min_repetition_s=0.02,
    ):
        if outcome.status is BenchmarkStatus.MEASURED:
            timings[outcome.candidate_id] = statistics.median(outcome.times_ms)
    return timings
