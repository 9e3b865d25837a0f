"""Time whole models side by side and save their outputs (runtime only).

Run as `python -m ireetune.model.worker` with a JSON request on stdin:
{"device": "local-task", "inputs": "inputs.npz", "function": "main", "rounds": 5,
 "repetitions": 3, "jobs": [{"kind": "load", "id": "default", "vmfb": "default.vmfb",
 "outputs": "d.npz"}, ..., {"kind": "time", "models": [{"id": "default", "vmfb": ...,
 "outputs": "d.npz"}], "reference": "default", "skip_at_reference_workers": ["one"],
 "pause_s": 0.02}],
 "parameters": ["weights.irpa"], "runtime_flags": ["--task_topology_max_group_count=1"],
 "runtime_defaults": ["--task_topology_max_group_count=64"],
 "model_runtime_flags": {"default": [], "one": ["--task_topology_max_group_count=1"]}}
`parameters` (optional) are IREE parameter archives the models read their weights from, under
the scope the ONNX import named them in ("model"). `runtime_flags` (optional) are the runtime's
own flags, set before the process's device opens (the device reads them then). A model named in
`model_runtime_flags` runs instead on a device of its own set, created after parsing
`runtime_defaults` and then the set: runtime flags are global and sticky, so every option any
set changes is spelled back to its default first, and a set's device is the same whichever
device was created before it. Models with the same set share its device; the others share the
process's device.
It speaks the worker protocol (core/worker_protocol.py): each "load" job loads one model, calls it
once and saves its outputs, so a model that crashes or hangs there costs only itself; the last
job, "time", times the models it names (loading any this process has not loaded: a fresh worker
after a crash). With a `reference`, a model whose outputs differ from the reference's is not
timed, nor one of `skip_at_reference_workers` whose device runs as many task workers as the
reference's (its set changes nothing here); each is named under "dropped" with why. Each round
calls every model `repetitions` times in turn, the order rotating from round to round, with
`pause_s` before each model's calls (a spinning worker pool of the previous device parks), so
a slow drift of the machine affects all of them alike. The result says how many task workers
each model's device runs ("workers"). Inputs are uploaded to each device once and results are
left there while timing.
"""

from __future__ import annotations

import functools
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ireetune.core.input_archive import read_input_archive
from ireetune.core.worker_protocol import (
    PARAMETER_SCOPE,
    copy_to_host,
    emit_event,
    hal_driver,
    open_device,
)
from ireetune.model.ort_worker import time_interleaved
from ireetune.model.outputs import outputs_match

# The key of the process's own device (models without a set of their own).
_PROCESS_DEVICE = None


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


def _thread_names() -> dict[str, str]:
    """Return this process's threads (Linux: /proc/self/task), each id with its name."""
    try:
        return {
            task.name: (task / "comm").read_text().strip()
            for task in Path("/proc/self/task").iterdir()
        }
    except OSError:
        return {}


def _count_new_task_workers(before: dict[str, str]) -> int:
    """Return how many task-system worker threads (`iree-worker-N`) started since `before`.

    A new thread carries its creator's name until it names itself, which can take a while on a
    loaded machine: read until no new thread has the creator's name (at most a second).
    """
    creator = before.get(str(threading.get_native_id()), "")
    new: dict[str, str] = {}
    for _ in range(100):
        new = {tid: name for tid, name in _thread_names().items() if tid not in before}
        if creator not in new.values():
            break
        time.sleep(0.01)
    return sum(name.startswith("iree-worker") for name in new.values())


class Devices:
    """The worker's devices: the process's (under `runtime_flags`) and one per distinct set of
    `model_runtime_flags`, each opened when a model first needs it, with its inputs uploaded
    and its task workers counted."""

    def __init__(self, runtime: Any, request: dict[str, Any]) -> None:
        self.runtime, self.request = runtime, request
        self.host_inputs = read_input_archive(request["inputs"])
        self.sets: dict[str, tuple[str, ...]] = {
            model_id: tuple(flags)
            for model_id, flags in request.get("model_runtime_flags", {}).items()
        }
        # Per key: the device, its inputs and its task workers, or why it could not be opened.
        self.opened: dict[tuple[str, ...] | None, tuple[Any, list[Any], int] | str] = {}

    def key(self, model_id: str) -> tuple[str, ...] | None:
        return self.sets.get(model_id, _PROCESS_DEVICE)

    def open_process_device(self) -> bool:
        """Open the process's device under `runtime_flags` (False: it cannot be used, said on
        the protocol)."""
        before = _thread_names()
        if self.request.get("runtime_flags"):
            self.runtime.flags.parse_flags(*self.request["runtime_flags"])
        device = open_device(self.runtime, self.request["device"])
        if device is None:
            return False
        self._keep(_PROCESS_DEVICE, device, before)
        return True

    def of(self, model_id: str) -> tuple[Any, list[Any]]:
        """Return the model's device and its inputs there; raise why it cannot be opened."""
        key = self.key(model_id)
        if key not in self.opened:
            assert key is not _PROCESS_DEVICE
            before = _thread_names()
            try:
                self.runtime.flags.parse_flags(*self.request.get("runtime_defaults", ()), *key)
                # A new driver, unlike the runtime's cached one, reads the flags now.
                uri = self.request["device"]
                driver = self.runtime._binding.create_hal_driver(uri.split("://", 1)[0])
                self._keep(key, driver.create_device_by_uri(uri), before)
            except Exception as error:  # A set the runtime refuses costs only its models.
                flags = " ".join(key) or "the runtime's defaults"
                self.opened[key] = f"cannot open the device under {flags}: {error}"[:300]
        opened = self.opened[key]
        if isinstance(opened, str):
            raise RuntimeError(opened)
        return opened[0], opened[1]

    def workers(self, model_id: str) -> int:
        opened = self.opened.get(self.key(model_id))
        return 0 if opened is None or isinstance(opened, str) else opened[2]

    def _keep(self, key: tuple[str, ...] | None, device: Any, before: dict[str, str]) -> None:
        workers = _count_new_task_workers(before)
        # Inputs go to the device once: on a GPU, copying them on every call would dominate.
        inputs = [self.runtime.asdevicearray(device, array) for array in self.host_inputs]
        self.opened[key] = (device, inputs, workers)


def _load_job(
    devices: Devices, job: dict[str, Any], request: dict[str, Any], parameters: Any
) -> tuple[Any, dict[str, Any]]:
    """Load one model on its device, call it once and save its outputs; return the function
    and the job's record."""
    runtime = devices.runtime
    device, inputs = devices.of(job["id"])
    function = _load(runtime, device, job["vmfb"], request["function"], parameters)
    np.savez(job["outputs"], *_as_arrays(runtime, device, function(*inputs)))
    record = {
        "id": job["id"], "status": "ok", "driver": hal_driver(device),
        "workers": devices.workers(job["id"]),
    }  # fmt: skip
    return functools.partial(function, *inputs), record


def _read_outputs(path: str) -> list[Any]:
    with np.load(path) as archive:
        return [archive[f"arr_{i}"] for i in range(len(archive.files))]


def _drop_reason(
    devices: Devices, job: dict[str, Any], model: dict[str, Any], reference: dict[str, Any]
) -> str:
    """Say why a model is not timed beside the job's reference (empty: it is timed)."""
    if model is reference:
        return ""
    workers = devices.workers(model["id"])
    reference_workers = devices.workers(reference["id"])
    # Unknown counts (0) prove nothing.
    skippable = model["id"] in job.get("skip_at_reference_workers", ())
    if skippable and workers == reference_workers != 0:
        return f"skipped: {workers} workers, as with {reference['id']}"
    matches, why = outputs_match(
        _read_outputs(reference["outputs"]), _read_outputs(model["outputs"])
    )
    return "" if matches else f"outputs differ from {reference['id']} ({why})"


def _time_job(
    devices: Devices,
    job: dict[str, Any],
    request: dict[str, Any],
    calls: dict[str, Callable[[], object] | None],
    parameters: Any,
) -> dict[str, Any]:
    """Time the job's models interleaved (loading those this process has not loaded); return
    the job's record."""
    for model in job["models"]:
        if model["id"] not in calls:
            # A fresh worker after a crash: the models that ran before are loaded again.
            try:
                calls[model["id"]] = _load_job(devices, model, request, parameters)[0]
            except Exception:  # Reported by the absence of its times.
                calls[model["id"]] = None
    loaded = {m["id"]: (m, call) for m in job["models"] if (call := calls[m["id"]]) is not None}
    reference = loaded[job["reference"]][0] if job.get("reference") in loaded else None
    dropped = {
        model_id: reason
        for model_id, (model, _) in loaded.items()
        if reference is not None and (reason := _drop_reason(devices, job, model, reference))
    }
    timed = {model_id: call for model_id, (_, call) in loaded.items() if model_id not in dropped}
    rounds = time_interleaved(
        timed, int(request.get("rounds", 3)), int(request.get("repetitions", 1)), 0,
        float(job.get("pause_s", 0.0)),
    ) if timed else {}  # fmt: skip
    return {
        "status": "ok", "times_ms": {m: [t for r in rs for t in r] for m, rs in rounds.items()},
        "workers": {m["id"]: devices.workers(m["id"]) for m in job["models"]},
        "dropped": dropped,
    }  # fmt: skip


def main() -> int:
    request = json.loads(sys.stdin.read())
    import iree.runtime as runtime

    devices = Devices(runtime, request)
    model_ids = [
        model["id"]
        for job in request["jobs"]
        for model in ([job] if job["kind"] == "load" else job["models"])
    ]
    # The process's device opens first, under `runtime_flags` alone, when a model runs on it.
    needs_process_device = any(devices.key(m) is _PROCESS_DEVICE for m in model_ids)
    if needs_process_device and not devices.open_process_device():
        return 3
    parameters = None
    if request.get("parameters"):
        parameters = runtime.ParameterIndex()
        for path in request["parameters"]:
            parameters.load(path)
    # Each loaded model's call on its device's inputs (None: it failed to load).
    calls: dict[str, Callable[[], object] | None] = {}
    for job_index, job in enumerate(request["jobs"]):
        emit_event({"event": "start", "job_index": job_index})
        if job["kind"] == "load":
            try:
                calls[job["id"]], record = _load_job(devices, job, request, parameters)
            except Exception as error:  # A broken model is reported, never fatal to the others.
                calls[job["id"]] = None
                record = {"id": job["id"], "status": "error", "reason": str(error)[:300]}
        else:
            record = _time_job(devices, job, request, calls, parameters)
        emit_event({"event": "result", "job_index": job_index, **record})
    return 0


if __name__ == "__main__":
    sys.exit(main())
