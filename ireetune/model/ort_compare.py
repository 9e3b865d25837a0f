"""IREE against ONNX Runtime on this host: same inputs, same threads, interleaved, outputs checked.

`compare_with_onnxruntime` runs `ireetune.model.ort_worker` in a fresh process (IREE's runtime
flags are process-wide) and summarizes what it timed. ONNX Runtime gets as many intra-op threads
as IREE's `local-task` device has workers under the same runtime flags (read from
`iree-run-module --dump_task_topologies`). A comparison whose outputs differ is refused: it
reports the largest error, never a speed. `ireetune tune` runs it at the end of an ONNX model's
run (`flows/model/deployment.py`); `bench/vs_onnxruntime.py` runs it on a zoo of models.
"""

from __future__ import annotations

import enum
import importlib.metadata
import importlib.util
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ireetune.core.errors import IreetuneError
from ireetune.core.tools import find_tool, first_error_line, run_tool
from ireetune.core.worker_protocol import supervise_worker
from ireetune.decision.medians import Estimate, compare_side_by_side
from ireetune.decision.stats import Rounds
from ireetune.model.ort_worker import ONNXRUNTIME

# The IREE variants' names in a comparison made by the model flow.
IREE_DEFAULT = "iree_default"
IREE_TUNED = "iree_tuned"
# ONNX Runtime's idle workers spin for a while after a call; this pause lets them park before
# the next variant runs, so they do not compete with it for the cores.
PAUSE_BETWEEN_VARIANTS_S = 0.02
# The pause was not enough: on the 2-core machine GoogLeNet's tuned model took 45 ms timed right
# after ONNX Runtime's turns and 30 ms with ONNX Runtime's spinning off (2026-12-04,
# docs/benchmarks.md). Each variant's turn starts with this many untimed calls, which take that
# hit, so the timed calls are warm, repeated ones, as a deployed model's are, on either runtime.
SETTLE_CALLS = 1
# The output check's tolerances: |iree - ort| <= atol + rtol * |ort|, where atol is
# ATOL_SCALE times the largest magnitude of ONNX Runtime's output.
RTOL = 1e-3
ATOL_SCALE = 1e-3


class OrtStatus(enum.Enum):
    """How a comparison with ONNX Runtime ended."""

    MEASURED = "measured"
    # An IREE variant's outputs differ from ONNX Runtime's: no speed is reported.
    REFUSED = "refused"
    # onnxruntime is not installed.
    UNAVAILABLE = "unavailable"
    # Not asked for, or the run cannot be compared (not an ONNX model, not the CPU).
    NOT_RUN = "not run"
    FAILED = "failed"


@dataclass(frozen=True)
class OrtComparisonRequest:
    """IREE binaries of one ONNX model to time against ONNX Runtime on this host.

    `variants` are (name, .vmfb) pairs, each calling `function` with the arrays of `inputs_path`
    (the graph's inputs in order); `runtime_flags` (`--flag=value` each) configure IREE's
    runtime device, and ONNX Runtime's thread count follows the worker count they give. Each
    variant's turn in a round starts with `settle` untimed calls (SETTLE_CALLS).
    """

    onnx_path: Path
    variants: Sequence[tuple[str, Path]]
    function: str
    inputs_path: Path
    runtime_flags: Sequence[str] = ()
    rounds: int = 15
    calls: int = 5
    warmup: int = 3
    rtol: float = RTOL
    atol_scale: float = ATOL_SCALE
    device: str = "local-task"
    timeout_s: float = 1800.0
    settle: int = SETTLE_CALLS


@dataclass(frozen=True)
class OrtComparison:
    """What a comparison found: medians, ratios to ONNX Runtime and their intervals, or why not.

    `ratios` are each IREE variant's median over ONNX Runtime's (above 1: IREE is slower);
    `max_error` is the largest absolute difference of any output from ONNX Runtime's.
    """

    status: OrtStatus
    reason: str = ""
    threads: int | None = None
    runtime_flags: tuple[str, ...] = ()
    max_error: float | None = None
    problems: tuple[str, ...] = ()
    medians: dict[str, Estimate] = field(default_factory=dict)
    ratios: dict[str, Estimate] = field(default_factory=dict)
    median_over_fastest: dict[str, float] = field(default_factory=dict)
    times_ms: dict[str, Rounds] = field(default_factory=dict)
    onnxruntime_version: str = ""
    rounds: int = 0
    calls: int = 0
    settle: int = 0

    def describe(self) -> str:
        """Say in one line what the comparison found."""
        if self.status is OrtStatus.REFUSED:
            # An error that is not finite says less than the first output's own problem (a
            # shape, a count, values that are not finite).
            finite = self.max_error is not None and math.isfinite(self.max_error)
            why = (
                f"max abs error {_format_error(self.max_error)}"
                if finite or not self.problems
                else self.problems[0]
            )
            return f"refused: IREE's outputs differ from ONNX Runtime's ({why}); no speed reported"
        if self.status is not OrtStatus.MEASURED:
            return f"{self.status.value}: {self.reason}"
        ratios = ", ".join(
            f"{name} takes {estimate.describe('x')} its time"
            for name, estimate in self.ratios.items()
        )
        return (
            f"median {self.medians[ONNXRUNTIME].describe('ms')}; {ratios} (above 1: IREE slower; "
            f"threads: {self.threads} each; {self.rounds} interleaved rounds of {self.calls} calls"
            f"{f', each turn after {self.settle} untimed' if self.settle else ''}; 95% intervals)"
        )

    def to_json(self) -> dict[str, Any]:
        """Return the comparison as report.json holds it (raw times included)."""
        return {
            "status": self.status.value,
            "reason": self.reason,
            "threads": self.threads,
            "runtime_flags": list(self.runtime_flags),
            "max_error": _json_number(self.max_error),
            "problems": list(self.problems),
            "median_ms": {n: e.__dict__ for n, e in self.medians.items()},
            "ratio_to_onnxruntime": {n: e.__dict__ for n, e in self.ratios.items()},
            "median_over_fastest": self.median_over_fastest,
            "onnxruntime_version": self.onnxruntime_version,
            "rounds": self.rounds,
            "calls_per_round": self.calls,
            "untimed_calls_per_turn": self.settle,
            "times_ms": {n: [list(r) for r in rounds] for n, rounds in self.times_ms.items()},
        }


def _format_error(error: float | None) -> str:
    return "unknown" if error is None else f"{error:.3g}"


def _json_number(value: float | None) -> float | str | None:
    """JSON has no infinity: an infinite error (a shape that differs) is written as text."""
    return value if value is None or math.isfinite(value) else str(value)


def onnxruntime_version() -> str | None:
    """Return the installed onnxruntime's version without importing it, or None."""
    if importlib.util.find_spec(ONNXRUNTIME) is None:
        return None
    try:
        return importlib.metadata.version(ONNXRUNTIME)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


_TOPOLOGY = re.compile(r"topology\[\d+\]: (\d+) worker groups")


def count_local_task_workers(runtime_flags: Sequence[str]) -> int:
    """Return the `local-task` worker count under these runtime flags, as IREE's topology says."""
    # The dump flag goes last: it prints the topology as the flags before it define it.
    result = run_tool(
        [find_tool("iree-run-module"), *runtime_flags, "--dump_task_topologies"], timeout_s=60
    )
    groups = [int(count) for count in _TOPOLOGY.findall(result.stdout + result.stderr)]
    if result.returncode != 0 or not groups:
        raise IreetuneError(
            "cannot read the local-task worker count under the runtime flags "
            f"{' '.join(runtime_flags) or '(none)'}: {first_error_line(result.stderr)}"
        )
    return sum(groups)


def compare_with_onnxruntime(request: OrtComparisonRequest) -> OrtComparison:
    """Check and time `request.variants` against ONNX Runtime on this host; see the module
    docstring. A failure to run either side is a FAILED comparison, never an exception."""
    assert (
        request.rounds >= 2 and request.calls >= 1 and min(request.warmup, request.settle) >= 0
    ), request
    flags = tuple(request.runtime_flags)
    if onnxruntime_version() is None:
        return OrtComparison(OrtStatus.UNAVAILABLE, "onnxruntime is not installed", None, flags)
    try:
        threads = count_local_task_workers(flags)
    except IreetuneError as error:
        return OrtComparison(OrtStatus.FAILED, str(error), None, flags)
    worker_request = {
        "onnx": str(request.onnx_path), "inputs": str(request.inputs_path),
        "function": request.function, "device": request.device, "runtime_flags": list(flags),
        "threads": threads,
        "variants": [{"id": name, "vmfb": str(path)} for name, path in request.variants],
        "rounds": request.rounds, "calls": request.calls, "warmup": request.warmup,
        "pause_s": PAUSE_BETWEEN_VARIANTS_S, "settle": request.settle, "rtol": request.rtol,
        "atol_scale": request.atol_scale,
    }  # fmt: skip
    command = [sys.executable, "-m", "ireetune.model.ort_worker"]
    reports = supervise_worker(
        "ONNX Runtime comparison",
        command,
        ["compare"],
        lambda _pending, _first: worker_request,
        lambda: request.timeout_s,
    )
    report = next(iter(reports))
    if report.failure is not None:
        return OrtComparison(OrtStatus.FAILED, report.failure.reason, threads, flags)
    return _read_result(report.record or {}, threads, request)


def _read_result(
    record: dict[str, Any], threads: int, request: OrtComparisonRequest
) -> OrtComparison:
    status = OrtStatus(record.get("status", "failed"))
    flags = tuple(request.runtime_flags)
    if status is OrtStatus.REFUSED:
        return OrtComparison(
            status, "outputs differ", threads, flags, float(record["max_error"]),
            tuple(record["problems"]),
        )  # fmt: skip
    if status is not OrtStatus.MEASURED:
        return OrtComparison(status, str(record.get("reason", "")), threads, flags)
    times: dict[str, Rounds] = {
        name: tuple(tuple(float(t) for t in calls) for calls in rounds)
        for name, rounds in record["times_ms"].items()
    }
    summary = compare_side_by_side(times, ONNXRUNTIME)
    return OrtComparison(
        status=status, threads=threads, runtime_flags=flags,
        max_error=float(record["max_error"]), medians=summary.medians, ratios=summary.ratios,
        median_over_fastest=summary.median_over_fastest, times_ms=times,
        onnxruntime_version=str(record.get("onnxruntime_version", "")),
        rounds=request.rounds, calls=request.calls, settle=int(record.get("settle", 0)),
    )  # fmt: skip
