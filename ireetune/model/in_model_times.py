"""Each dispatch's time inside runs of the whole model, from IREE's HAL profiler.

IREE 3.13's `iree-benchmark-module` records a profile bundle (`--device_profiling_mode`,
`--device_profiling_output`) and `iree-profile export` decodes it. On the CPU's `local-task` and
`local-sync` devices the `host-execution` family is supported: one event per dispatch launch,
named by the executable's export (`main$async_dispatch_12_conv_...`), with its start and end on
the host's clock. So one run of the compiled model says where its time goes, on its
real inputs, with the caches as the model leaves them: no dispatch benchmark needs compiling or
timing alone (docs/model_tuning.md, "The profile").

Runtime-only: the device side of a split run imports this, so nothing here imports the compiler.
"""

from __future__ import annotations

import json
import math
import statistics
import tempfile
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

from ireetune.core.errors import IreetuneError
from ireetune.core.input_archive import read_input_archive
from ireetune.core.tools import find_tool, first_error_line, path_argument, run_tool
from ireetune.core.worker_protocol import PARAMETER_SCOPE
from ireetune.model.timing import ModelComparison

PROFILING_MODE = "host-execution"
# Profile calls enough to cover this long a stretch, between the bounds below: a dispatch keeps
# the median of its launches' times, so one slow call (another process woke up) moves nothing.
PROFILE_STRETCH_MS = 1500.0
MIN_PROFILED_CALLS = 9
MAX_PROFILED_CALLS = 200
# The share of the dispatches a run launches that the whole model's profile must name for its
# times to be kept; below it the dispatches and the profiled binary were not the same build.
MIN_NAMED_SHARE = 0.9


@dataclass(frozen=True)
class InModelTimes:
    """Per dispatch export: its median ms per model call (all its launches in the call) and its
    launches per call, over `calls` profiled calls; `reason` says why there are none."""

    per_call_ms: dict[str, float]
    launches: dict[str, int]
    calls: int
    reason: str = ""

    @property
    def ok(self) -> bool:
        return not self.reason


Key = TypeVar("Key", bound=Hashable)


def times_by_exports(
    exports: Mapping[Key, Sequence[str]], launches: Mapping[Key, int], times: InModelTimes
) -> dict[Key, float] | str:
    """Give each dispatch a run launches (`exports`: its export names, by key) its ms per
    launch from the whole model's profile: its exports' time per call over its `launches` per
    call (1 when not given); or say why the profile does not fit the dispatches."""
    timings = {}
    for key, names in exports.items():
        named = [name for name in names if name in times.per_call_ms]
        if named:
            per_call = sum(times.per_call_ms[name] for name in named)
            timings[key] = per_call / max(1, launches.get(key, 1))
    if len(timings) < MIN_NAMED_SHARE * len(exports):
        return (
            f"the whole model's profile names {len(timings)} of the {len(exports)} dispatches "
            "a run launches"
        )
    return timings


def profiled_calls(model_ms: float, stretch_ms: float = PROFILE_STRETCH_MS) -> int:
    """Return how many calls of a `model_ms` model make a `stretch_ms` stretch."""
    if model_ms <= 0:
        return MIN_PROFILED_CALLS
    wanted = math.ceil(stretch_ms / model_ms)
    return max(MIN_PROFILED_CALLS, min(MAX_PROFILED_CALLS, wanted))


def profile_model_here(comparison: ModelComparison, calls: int) -> InModelTimes:
    """Profile `calls` calls of the comparison's one model on this host's device; never raise:
    a device without host-execution events, a tool that fails or inputs the command line cannot
    carry give the reason instead."""
    assert len(comparison.models) == 1, "profile one model at a time"
    try:
        tools = find_tool("iree-benchmark-module"), find_tool("iree-profile")
    except IreetuneError as missing:
        return InModelTimes({}, {}, 0, str(missing))
    _, vmfb = comparison.models[0]
    comparison.work_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=comparison.work_dir, prefix="profile_") as folder:
        work = Path(folder)
        inputs = _write_inputs(comparison.inputs_path, work)
        if isinstance(inputs, str):
            return InModelTimes({}, {}, 0, inputs)
        bundle, export = work / "model.ireeprof", work / "model.jsonl"
        arguments = [
            tools[0],
            f"--device={comparison.device}",
            f"--module={path_argument(vmfb)}",
            f"--function={comparison.function}",
            *(f"--input=@{path_argument(path)}" for path in inputs),
            *(f"--parameters={PARAMETER_SCOPE}={path_argument(p)}" for p in comparison.parameters),
            *comparison.runtime_flags,
            f"--benchmark_min_time={calls}x",
            f"--device_profiling_mode={PROFILING_MODE}",
            f"--device_profiling_output={path_argument(bundle)}",
        ]
        ran = run_tool(arguments, timeout_s=comparison.timeout_s)
        if ran.returncode != 0 or ran.timed_out:
            why = "timed out" if ran.timed_out else first_error_line(ran.stderr or ran.stdout)
            return InModelTimes({}, {}, 0, f"profiling the model failed: {why}")
        decoded = run_tool(
            [
                tools[1],
                "export",
                "--format=ireeperf-jsonl",
                f"--output={path_argument(export)}",
                path_argument(bundle),
            ],
            timeout_s=600,
        )
        if decoded.returncode != 0 or not export.exists():
            why = first_error_line(decoded.stderr or decoded.stdout)
            return InModelTimes({}, {}, 0, f"reading the model's profile failed: {why}")
        return read_host_execution_events(export.read_text().splitlines(), calls)


def read_host_execution_events(lines: list[str], calls: int) -> InModelTimes:
    """Read each export's dispatch events over `calls` profiled model calls: its launches per
    call, and its median launch time times those launches as its ms per call.

    A line of `iree-profile export --format=ireeperf-jsonl`, as this reads it (abridged):

        {"record_type": "host_execution_event", "op": "dispatch", "valid": true,
         "key": "main$async_dispatch_0_conv_64x111x111x3x3x3_f32", "duration_ns": 606602}
    """
    durations: dict[str, list[int]] = defaultdict(list)
    for line in lines:
        if '"host_execution_event"' not in line:
            continue
        event = json.loads(line)
        if event.get("op") != "dispatch" or not event.get("valid", True) or not event.get("key"):
            continue
        durations[event["key"]].append(int(event["duration_ns"]))
    if not durations or calls < 1:
        return InModelTimes({}, {}, 0, f"the profile holds no {PROFILING_MODE} dispatch events")
    launches = {name: max(1, round(len(times) / calls)) for name, times in durations.items()}
    per_call_ms = {
        name: statistics.median(times) * launches[name] / 1e6 for name, times in durations.items()
    }
    return InModelTimes(per_call_ms, launches, calls)


def _write_inputs(inputs_path: Path, folder: Path) -> list[Path] | str:
    """Write each model input as a .npy file for the command line (a reason where it cannot:
    its element type has no NumPy name the runtime's tools read)."""
    paths = []
    for index, array in enumerate(read_input_archive(inputs_path)):
        if array.dtype.kind not in "biuf" or array.dtype.itemsize > 8:
            return f"input {index} is {array.dtype}, which iree-benchmark-module cannot read"
        path = folder / f"input_{index}.npy"
        np.save(path, array)
        paths.append(path)
    return paths
