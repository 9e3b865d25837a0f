"""Time whole models side by side and save their outputs (runtime only).

Run as `python -m ireetune.model.worker` with a JSON request on stdin:
{"device": "local-task", "inputs": "inputs.npz", "function": "main", "rounds": 5,
 "repetitions": 3, "jobs": [{"id": "default", "vmfb": "default.vmfb", "outputs": "d.npz"}],
 "parameters": ["weights.irpa"]}
`parameters` (optional) are IREE parameter archives the models read their weights from, under
the scope the ONNX import named them in ("model").
Every model is loaded first; then each round calls every model `repetitions` times in turn, so
a slow drift of the machine affects all of them alike. Inputs are uploaded to the device once
and results are left there while timing. One JSON line per job at the end.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import numpy as np

# The scope of frontend/model_import.py's PARAMETER_SCOPE (not imported: this module runs alone).
PARAMETER_SCOPE = "model"


def _as_arrays(result: Any) -> list[Any]:
    values = result if isinstance(result, (list, tuple)) else [result]
    return [np.asarray(value.to_host() if hasattr(value, "to_host") else value) for value in values]


def main() -> int:
    request = json.loads(sys.stdin.read())
    import iree.runtime as runtime

    device = runtime.get_device(request["device"])
    with np.load(request["inputs"]) as archive:
        host_inputs = [archive[f"arg{i}"] for i in range(len(archive.files))]
    # Inputs go to the device once: on a GPU, copying them on every call would dominate the time.
    inputs = [runtime.asdevicearray(device, array) for array in host_inputs]
    loaded: dict[str, Any] = {}
    records: dict[str, dict[str, Any]] = {}
    parameter_index = None
    if request.get("parameters"):
        parameter_index = runtime.ParameterIndex()
        for path in request["parameters"]:
            parameter_index.load(path)
    for job in request["jobs"]:
        try:
            config = runtime.Config(device=device)
            context = runtime.SystemContext(config=config)
            if parameter_index is not None:
                provider = parameter_index.create_provider(scope=PARAMETER_SCOPE)
                context.add_vm_module(
                    runtime.create_io_parameters_module(config.vm_instance, provider)
                )
            vm_module = runtime.VmModule.mmap(config.vm_instance, job["vmfb"])
            context.add_vm_module(vm_module)
            function = context.modules[vm_module.name][request["function"]]
            outputs = _as_arrays(function(*inputs))
            np.savez(job["outputs"], *outputs)
            loaded[job["id"]] = function
            records[job["id"]] = {"id": job["id"], "status": "ok", "times_ms": []}
        except Exception as error:  # A broken model is reported, never fatal to the others.
            records[job["id"]] = {"id": job["id"], "status": "error", "reason": str(error)[:300]}
    for _ in range(int(request.get("rounds", 3))):
        for job_id, function in loaded.items():
            for _ in range(int(request.get("repetitions", 1))):
                # A synchronous function returns once its work is done; results stay on the
                # device, so only execution is timed.
                start = time.perf_counter()
                function(*inputs)
                records[job_id]["times_ms"].append((time.perf_counter() - start) * 1000.0)
    for record in records.values():
        sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
