"""Time whole models side by side and save their outputs (runtime only).

Run as `python -m ireetune.model.worker` with a JSON request on stdin:
{"device": "local-task", "inputs": "inputs.npz", "function": "main", "rounds": 5,
 "repetitions": 3, "jobs": [{"kind": "load", "id": "default", "vmfb": "default.vmfb",
 "outputs": "d.npz"}, ..., {"kind": "time", "models": [{"id": "default", "vmfb": ...}]}],
 "parameters": ["weights.irpa"], "runtime_flags": ["--task_topology_max_group_count=1"]}
`parameters` (optional) are IREE parameter archives the models read their weights from, under
the scope the ONNX import named them in ("model"). `runtime_flags` (optional) are the runtime's
own flags, set before the device opens (the device reads them then); the "time" job's result
says how many task workers the device ran with ("workers").
It speaks the worker protocol (worker_protocol.py): each "load" job loads one model, calls it
once and saves its outputs, so a model that crashes or hangs there costs only itself; the last
job, "time", times the models it names (loading any this process has not loaded: a fresh worker
after a crash), each round calling every model `repetitions` times in turn, so a slow drift of
the machine affects all of them alike. Inputs are uploaded to the device once and results are
left there while timing.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ireetune.core.input_archive import read_input_archive
from ireetune.worker_protocol import copy_to_host, emit_event, hal_driver, open_device

# The scope of frontend/model_import.py's PARAMETER_SCOPE (not imported: this module runs alone).
PARAMETER_SCOPE = "model"


def _as_arrays(runtime: Any, device: Any, result: Any) -> list[Any]:
    values = result if isinstance(result, (list, tuple)) else [result]
    return [copy_to_host(runtime, device, value) for value in values]


def _load(runtime: Any, device: Any, vmfb: str, function_name: str, parameters: Any) -> Any:
    config = runtime.Config(device=device)
    context = runtime.SystemContext(config=config)
    if parameters is not None:
        provider = parameters.create_provider(scope=PARAMETER_SCOPE)
        context.add_vm_module(runtime.create_io_parameters_module(config.vm_instance, provider))
    vm_module = runtime.VmModule.mmap(config.vm_instance, vmfb)
    context.add_vm_module(vm_module)
    return context.modules[vm_module.name][function_name]


def _time(
    functions: dict[str, Any], inputs: list[Any], rounds: int, repetitions: int
) -> dict[str, list[float]]:
    times_ms: dict[str, list[float]] = {model_id: [] for model_id in functions}
    for _ in range(rounds):
        for model_id, function in functions.items():
            for _ in range(repetitions):
                # A synchronous function returns once its work is done; results stay on the
                # device, so only execution is timed.
                start = time.perf_counter()
                function(*inputs)
                times_ms[model_id].append((time.perf_counter() - start) * 1000.0)
    return times_ms


def _count_task_workers() -> int:
    """Return how many task-system worker threads this process runs (`iree-worker-N`; Linux).

    A worker names itself once it first runs, which can be after a short model's calls: read
    until two reads 50 ms apart agree (at most half a second).
    """
    counts: list[int] = []
    for _ in range(10):
        try:
            names = [(task / "comm").read_text() for task in Path("/proc/self/task").iterdir()]
        except OSError:
            return 0
        counts.append(sum(name.startswith("iree-worker") for name in names))
        if len(counts) > 1 and counts[-1] == counts[-2]:
            break
        time.sleep(0.05)
    return max(counts)


def main() -> int:
    request = json.loads(sys.stdin.read())
    import iree.runtime as runtime

    if request.get("runtime_flags"):
        runtime.flags.parse_flags(*request["runtime_flags"])
    device = open_device(runtime, request["device"])
    if device is None:
        return 3
    host_inputs = read_input_archive(request["inputs"])
    # Inputs go to the device once: on a GPU, copying them on every call would dominate the time.
    inputs = [runtime.asdevicearray(device, array) for array in host_inputs]
    loaded: dict[str, Any] = {}
    parameters = None
    if request.get("parameters"):
        parameters = runtime.ParameterIndex()
        for path in request["parameters"]:
            parameters.load(path)
    broken: set[str] = set()
    for job_index, job in enumerate(request["jobs"]):
        emit_event({"event": "start", "job_index": job_index})
        if job["kind"] == "load":
            try:
                function = _load(runtime, device, job["vmfb"], request["function"], parameters)
                np.savez(job["outputs"], *_as_arrays(runtime, device, function(*inputs)))
                loaded[job["id"]] = function
                record: dict[str, Any] = {
                    "id": job["id"],
                    "status": "ok",
                    "driver": hal_driver(device),
                }
            except Exception as error:  # A broken model is reported, never fatal to the others.
                broken.add(job["id"])
                record = {"id": job["id"], "status": "error", "reason": str(error)[:300]}
        else:
            functions = {}
            for model in job["models"]:
                if model["id"] in broken:
                    continue
                if model["id"] not in loaded:
                    # A fresh worker after a crash: the models that ran before are loaded again.
                    try:
                        loaded[model["id"]] = _load(
                            runtime, device, model["vmfb"], request["function"], parameters
                        )
                    except Exception:  # Reported by the absence of its times.
                        continue
                functions[model["id"]] = loaded[model["id"]]
            times = _time(
                functions, inputs, int(request.get("rounds", 3)), int(request.get("repetitions", 1))
            )
            record = {
                "status": "ok", "times_ms": times, "workers": _count_task_workers(),
                "driver": hal_driver(device),
            }  # fmt: skip
        emit_event({"event": "result", "job_index": job_index, **record})
    return 0


if __name__ == "__main__":
    sys.exit(main())
