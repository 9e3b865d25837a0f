"""Run the model worker in its own process and read back times and outputs."""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ireetune.core.errors import IreetuneError
from ireetune.core.files import write_text_atomically
from ireetune.core.worker_protocol import FailureKind, supervise_worker

# A round should time each model for at least this long.
MIN_ROUND_MS = 20.0
MAX_REPETITIONS = 1000


def repetitions_for(model_ms: float) -> int:
    """Return how many calls per round make a round of a `model_ms` model last MIN_ROUND_MS."""
    if model_ms <= 0:
        return 1
    return max(1, min(MAX_REPETITIONS, math.ceil(MIN_ROUND_MS / model_ms)))


def fastest_round_ms(times_ms: Sequence[float], repetitions: int) -> float:
    """Return the median of the fastest round of `times_ms`, calls in rounds of `repetitions`
    in the order they ran: on a shared machine other work only ever slows a round down."""
    step = max(1, repetitions)
    rounds = [times_ms[start : start + step] for start in range(0, len(times_ms), step)]
    return min(statistics.median(calls) for calls in rounds)


@dataclass(frozen=True)
class ModelRun:
    """One model binary's outputs and per-call times (empty when it failed)."""

    model_id: str
    outputs: tuple[npt.NDArray[np.generic], ...]
    times_ms: tuple[float, ...]
    reason: str
    # The task workers of the model's device (0 when the device has none, or unknown).
    workers: int = 0

    @property
    def ok(self) -> bool:
        return not self.reason


@dataclass(frozen=True)
class RuntimeVariants:
    """Models of one comparison each on a device of its own runtime flags, in one process.

    `flags` gives every model of the comparison its set (() for the runtime's defaults); models
    with the same set share a device. Runtime flags are global and sticky in a process, so
    `defaults` (every option the sets change, spelled at the runtime's default) are parsed before
    each set: a device's flags do not depend on which was created before it. A model whose
    outputs differ from `reference`'s is not timed, nor one of `skip_at_reference_workers` whose
    device runs as many task workers as the reference's (it changes nothing here). `pause_s`
    passes before each model's calls in a round, so that the previous device's spinning workers
    park first.
    """

    flags: Mapping[str, tuple[str, ...]]
    defaults: tuple[str, ...]
    reference: str
    skip_at_reference_workers: tuple[str, ...] = ()
    pause_s: float = 0.0


@dataclass(frozen=True)
class ModelComparison:
    """Compiled models to time side by side for an executor (`Executor.run_models_side_by_side`):
    each (model id, binary) calls `function` on the inputs on `device`, interleaved for `rounds`
    rounds of `repetitions` calls; outputs go under `work_dir`. The models read their weights
    from the `parameters` archives (.irpa), if any. `runtime_flags` (the device's, such as
    `--task_topology_max_group_count=1`) are set in the timing process before the device opens;
    with `runtime_variants`, each model runs instead on a device of its own set, side by side.
    Every round calls the models in turn, the order rotating from round to round."""

    models: Sequence[tuple[str, Path]]
    function: str
    inputs_path: Path
    work_dir: Path
    device: str
    rounds: int
    repetitions: int = 1
    timeout_s: float = 1800.0
    parameters: Sequence[Path] = ()
    runtime_flags: Sequence[str] = ()
    runtime_variants: RuntimeVariants | None = None


# The file in a session's folder that keeps its raw per-call times (`write_session_times`).
SESSION_TIMES = "times.json"


def write_session_times(comparison: ModelComparison, runs: Mapping[str, ModelRun]) -> None:
    """Keep one session's raw per-call times by model id, with its rounds, calls per round and
    why any model did not run, in `SESSION_TIMES` of its folder: a verdict's interval can then
    be computed again from the run folder alone. The rounds are those the times hold: a
    comparison timed in more batches (`time_pair_until_decided`) has more than it asked for."""
    repetitions = max(1, comparison.repetitions)
    timed = max((len(run.times_ms) for run in runs.values()), default=0)
    record = {
        "rounds": timed // repetitions if timed else comparison.rounds,
        "calls_per_round": repetitions,
        "times_ms": {model_id: list(run.times_ms) for model_id, run in runs.items()},
        "reasons": {model_id: run.reason for model_id, run in runs.items() if run.reason},
    }
    path = comparison.work_dir / SESSION_TIMES
    write_text_atomically(path, json.dumps(record, indent=2) + "\n")


def run_models_side_by_side_here(comparison: ModelComparison) -> dict[str, ModelRun]:
    """Time several compiled models interleaved in one process; return each one's run.

    Each model is first loaded, run once and its outputs saved, one worker-protocol job each (a
    model that crashes or hangs costs only itself); then the models that ran are timed together.
    """
    models, function, inputs_path = comparison.models, comparison.function, comparison.inputs_path
    work_dir, device, rounds = comparison.work_dir, comparison.device, comparison.rounds
    repetitions, timeout_s = comparison.repetitions, comparison.timeout_s
    parameters = comparison.parameters
    outputs = {model_id: work_dir / f"{model_id}_outputs.npz" for model_id, _ in models}
    paths = dict(models)
    failed: dict[str, str] = {}
    jobs: list[str] = [model_id for model_id, _ in models] + [_TIME_JOB]

    variants = comparison.runtime_variants

    def build_request(pending: Sequence[str], _: int) -> dict[str, object]:
        timed = [m for m in paths if m not in failed]
        time_job: dict[str, object] = {
            "kind": "time",
            "models": [{"id": m, "vmfb": str(paths[m]), "outputs": str(outputs[m])} for m in timed],
        }
        request: dict[str, object] = {
            "device": device, "inputs": str(inputs_path), "function": function,
            "rounds": rounds, "repetitions": repetitions,
            "parameters": [str(path) for path in parameters],
            "runtime_flags": list(comparison.runtime_flags),
            "jobs": [
                {"kind": "load", "id": job, "vmfb": str(paths[job]), "outputs": str(outputs[job])}
                if job != _TIME_JOB
                else time_job
                for job in pending
            ],
        }  # fmt: skip
        if variants is not None:
            request["runtime_defaults"] = list(variants.defaults)
            request["model_runtime_flags"] = {m: list(f) for m, f in variants.flags.items()}
            time_job["reference"] = variants.reference
            time_job["skip_at_reference_workers"] = list(variants.skip_at_reference_workers)
            time_job["pause_s"] = variants.pause_s
        return request

    times: dict[str, list[float]] = {}
    workers: dict[str, int] = {}
    command = [sys.executable, "-m", "ireetune.model.worker"]
    for report in supervise_worker("model timing", command, jobs, build_request, lambda: timeout_s):
        record = report.record or {}
        reason = report.failure.reason if report.failure is not None else record.get("reason", "")
        if report.job == _TIME_JOB:
            if report.failure is not None and report.failure.kind is FailureKind.TIMED_OUT:
                raise IreetuneError(f"timing the model took over {timeout_s:.0f} s")
            if report.failure is not None or record.get("status") != "ok":
                # The timing itself failed: no model has a time, each says why.
                failed.update({m: str(reason) for m in paths if m not in failed})
            else:
                times = record["times_ms"]
                workers = {m: int(count) for m, count in record.get("workers", {}).items()}
                failed.update({m: str(why) for m, why in record.get("dropped", {}).items()})
        elif report.failure is not None or record.get("status") != "ok":
            failed[report.job] = str(reason or "failed")
    runs: dict[str, ModelRun] = {}
    for model_id, _ in models:
        if model_id not in failed and model_id not in times:
            failed[model_id] = "could not be loaded again for timing"
        if model_id in failed:
            runs[model_id] = ModelRun(model_id, (), (), failed[model_id], workers.get(model_id, 0))
            continue
        with np.load(outputs[model_id]) as archive:
            arrays = tuple(archive[f"arr_{i}"] for i in range(len(archive.files)))
        runs[model_id] = ModelRun(
            model_id, arrays, tuple(times.get(model_id, ())), "", workers.get(model_id, 0)
        )
    return runs


# The last job of a model-timing worker: time every model that ran.
_TIME_JOB = "<time>"
