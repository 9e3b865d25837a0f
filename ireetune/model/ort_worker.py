"""Time IREE models and ONNX Runtime side by side in one process (runtime only).

Run as `python -m ireetune.model.ort_worker` with a JSON request on stdin:
{"onnx": "model.onnx", "inputs": "inputs.npz", "function": "main", "device": "local-task",
 "runtime_flags": ["--task_topology_max_group_count=2"], "threads": 2,
 "variants": [{"id": "iree_default", "vmfb": "default.vmfb"}, ...],
 "rounds": 15, "calls": 5, "warmup": 3, "pause_s": 0.02, "settle": 1, "rtol": 0.001,
 "atol_scale": 0.001}
It speaks the worker protocol (core/worker_protocol.py) with one job. The runtime flags are parsed
before the device is created (they are process-wide, so they apply to every IREE variant), and
ONNX Runtime's CPU provider runs the .onnx file with `threads` intra-op threads (inter-op 1,
sequential). Every variant gets the inputs of the archive, in the graph's input order. Each IREE
variant is called once and its outputs are compared with ONNX Runtime's; if any differs, the
result is "refused" with the differences and nothing is timed. Otherwise every variant is warmed
up, then in each round called `calls` times in turn, the order rotating from round to round with
a short pause between variants, and `settle` untimed calls of the variant before its timed ones:
ONNX Runtime's idle threads spin after its calls and take the cores from the IREE call that
follows (GoogLeNet's tuned model took 45 ms beside ONNX Runtime timed cold, 30 ms with its
spinning off, 29 ms with one untimed call first; docs/benchmarks.md), and each variant's timed
calls are then the warm, repeated calls a deployed model makes.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ireetune.core.input_archive import read_input_archive
from ireetune.core.worker_protocol import emit_event, open_device

ONNXRUNTIME = "onnxruntime"


def compare_outputs(
    name: str,
    outputs: Sequence[npt.NDArray[Any]],
    reference: Sequence[npt.NDArray[Any]],
    rtol: float,
    atol_scale: float,
) -> tuple[list[str], float]:
    """Return one line per output that differs from ONNX Runtime's, and the largest absolute
    error over every output (infinite where a shape or a count differs, or a value is not
    finite).

    The absolute tolerance is `atol_scale` times the reference's largest magnitude, so a network
    whose activations are large or small is judged alike.
    """
    if len(outputs) != len(reference):
        return [f"{name}: {len(outputs)} outputs, ONNX Runtime has {len(reference)}"], np.inf
    problems: list[str] = []
    max_error = 0.0
    for index, (ours, theirs) in enumerate(zip(outputs, reference, strict=True)):
        if ours.shape != theirs.shape:
            problems.append(
                f"{name} output {index}: shape {ours.shape}, ONNX Runtime {theirs.shape}"
            )
            max_error = np.inf
            continue
        ours64, theirs64 = ours.astype(np.float64), theirs.astype(np.float64)
        if not (np.all(np.isfinite(ours64)) and np.all(np.isfinite(theirs64))):
            problems.append(f"{name} output {index}: values that are not finite")
            max_error = np.inf
            continue
        magnitude = float(np.max(np.abs(theirs64), initial=0.0))
        atol = atol_scale * max(magnitude, 1e-30)
        error = np.abs(ours64 - theirs64)
        largest = float(error.max(initial=0.0))
        max_error = max(max_error, largest)
        if not np.all(error <= atol + rtol * np.abs(theirs64)):
            problems.append(
                f"{name} output {index}: max abs error {largest:.3g} (atol {atol:.3g}, rtol "
                f"{rtol:g}), ONNX Runtime's largest magnitude {magnitude:.3g}"
            )
    return problems, max_error


def time_interleaved(
    variants: dict[str, Callable[[], object]],
    rounds: int,
    calls: int,
    warmup: int,
    pause_s: float,
    settle: int = 0,
) -> dict[str, list[list[float]]]:
    """Time every variant `calls` times per round, the order rotating from round to round; in
    each turn `settle` untimed calls of the variant come first, after the pause."""
    for run in variants.values():
        for _ in range(warmup):
            run()
    names = list(variants)
    times: dict[str, list[list[float]]] = {name: [] for name in names}
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in [*names[shift:], *names[:shift]]:
            time.sleep(pause_s)
            for _ in range(settle):
                variants[name]()
            round_ms = []
            for _ in range(calls):
                start = time.perf_counter()
                variants[name]()
                round_ms.append((time.perf_counter() - start) * 1000.0)
            times[name].append(round_ms)
    return times


def _as_arrays(result: Any) -> list[npt.NDArray[Any]]:
    values = result if isinstance(result, (list, tuple)) else [result]
    return [np.asarray(value.to_host() if hasattr(value, "to_host") else value) for value in values]


def _load_iree(runtime: Any, device: Any, vmfb: str, function_name: str) -> Any:
    config = runtime.Config(device=device)
    context = runtime.SystemContext(config=config)
    vm_module = runtime.VmModule.mmap(config.vm_instance, vmfb)
    context.add_vm_module(vm_module)
    return context.modules[vm_module.name][function_name]


def _open_session(onnxruntime: Any, path: str, threads: int) -> Any:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    return onnxruntime.InferenceSession(
        path, sess_options=options, providers=["CPUExecutionProvider"]
    )


def _feeds(session: Any, arrays: Sequence[npt.NDArray[Any]]) -> dict[str, Any] | str:
    """Name the archive's arrays by the graph's inputs, or say why they do not fit."""
    graph_inputs = session.get_inputs()
    if len(graph_inputs) != len(arrays):
        return f"the model takes {len(graph_inputs)} inputs in ONNX Runtime, IREE's {len(arrays)}"
    for graph_input, array in zip(graph_inputs, arrays, strict=True):
        known = [d for d in graph_input.shape if isinstance(d, int)]
        if len(graph_input.shape) != array.ndim or known != [
            size
            for size, d in zip(array.shape, graph_input.shape, strict=True)
            if isinstance(d, int)
        ]:
            return (
                f"input {graph_input.name} is {list(graph_input.shape)} in ONNX Runtime, "
                f"{list(array.shape)} in IREE"
            )
    return {
        graph_input.name: array for graph_input, array in zip(graph_inputs, arrays, strict=True)
    }


def _compare(request: dict[str, Any]) -> dict[str, Any]:
    """Check and time the request's variants; return the result record."""
    try:
        import onnxruntime
    except ImportError:
        return {"status": "unavailable", "reason": "onnxruntime is not installed"}
    import iree.runtime as runtime

    if request["runtime_flags"]:
        runtime.flags.parse_flags(*request["runtime_flags"])
    device = open_device(runtime, request["device"])
    if device is None:
        return {"status": "failed", "reason": f"cannot open {request['device']}"}
    arrays = read_input_archive(request["inputs"])
    session = _open_session(onnxruntime, request["onnx"], int(request["threads"]))
    feeds = _feeds(session, arrays)
    if isinstance(feeds, str):
        return {"status": "failed", "reason": feeds}
    reference = [np.asarray(o) for o in session.run(None, feeds)]
    device_inputs = [runtime.asdevicearray(device, array) for array in arrays]
    variants: dict[str, Callable[[], object]] = {}
    problems: list[str] = []
    max_error = 0.0
    for variant in request["variants"]:
        function = _load_iree(runtime, device, variant["vmfb"], request["function"])
        lines, error = compare_outputs(
            variant["id"],
            _as_arrays(function(*device_inputs)),
            reference,
            float(request["rtol"]),
            float(request["atol_scale"]),
        )
        problems.extend(lines)
        max_error = max(max_error, error)
        variants[variant["id"]] = functools.partial(function, *device_inputs)
    if problems:
        return {"status": "refused", "problems": problems, "max_error": max_error}
    variants[ONNXRUNTIME] = lambda: session.run(None, feeds)
    settle = int(request.get("settle", 0))
    times = time_interleaved(
        variants,
        int(request["rounds"]),
        int(request["calls"]),
        int(request["warmup"]),
        float(request["pause_s"]),
        settle,
    )
    return {
        "status": "measured",
        "times_ms": times,
        "max_error": max_error,
        "settle": settle,
        "onnxruntime_version": onnxruntime.__version__,
    }


def main() -> int:
    request = json.loads(sys.stdin.read())
    emit_event({"event": "start", "job_index": 0})
    try:
        record = _compare(request)
    except Exception as error:  # A model either side cannot run is reported, never a traceback.
        record = {"status": "failed", "reason": f"{type(error).__name__}: {str(error)[:300]}"}
    emit_event({"event": "result", "job_index": 0, **record})
    return 0


if __name__ == "__main__":
    sys.exit(main())
