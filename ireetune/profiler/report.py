"""The profiler's results: one record per dispatch, printed as seeds/003's blocks or as CSV."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields

# Arithmetic intensity (FLOP per byte moved) below which a dispatch is reported as memory-bound:
# under this even a modest device's memory bandwidth, not its arithmetic, limits it.
MEMORY_BOUND_INTENSITY = 16.0


@dataclass(frozen=True)
class DispatchResult:
    """Everything the report says about one dispatch. Times in milliseconds, None when unknown."""

    dispatch: str
    operation: str
    kind: str
    configuration: str
    knobs: str
    arguments: str
    status: str
    verification: str
    verification_detail: str
    runtime_ms: float | None
    gflops: float | None
    gbps: float | None
    memory_bound: bool
    peak_percent: float | None
    peak_note: str
    speedup_vs_default: float | None
    vendor_library: str
    vendor_ms: float | None
    vendor_ratio: float | None
    vendor_note: str
    reason: str


def compute_throughput(flops: int, bytes_moved: int, runtime_ms: float) -> tuple[float, float]:
    """Return (GFLOP/s, GB/s) of a dispatch that took `runtime_ms`."""
    seconds = runtime_ms / 1000.0
    return flops / seconds / 1e9, bytes_moved / seconds / 1e9


def is_memory_bound(flops: int, bytes_moved: int) -> bool:
    return flops / max(1, bytes_moved) < MEMORY_BOUND_INTENSITY


def _number(value: float | None, digits: int = 3) -> str:
    if value is None or math.isnan(value):
        return "N/A"
    return f"{value:.{digits}f}"


def render_blocks(results: Sequence[DispatchResult], provider: str) -> str:
    """Write each dispatch as seeds/003's block of `Field : value` lines."""
    blocks = []
    for result in results:
        lines = [
            ("Dispatch", result.dispatch),
            ("Provider", provider),
            ("OpKind", result.kind),
            ("Operation", result.operation),
            (
                "Configuration",
                result.configuration + (f" ({result.knobs})" if result.knobs else ""),
            ),
            ("Arguments", result.arguments),
            ("Status", result.status + (f": {result.reason}" if result.reason else "")),
            (
                "Verification",
                result.verification
                + (f" ({result.verification_detail})" if result.verification_detail else ""),
            ),
            ("Runtime(ms)", _number(result.runtime_ms)),
            ("GFLOPs", _number(result.gflops, 2)),
        ]
        if result.memory_bound:
            lines.append(("GB/s", _number(result.gbps, 2) + " (memory-bound)"))
        lines.append(
            (
                "Peak(%)",
                _number(result.peak_percent, 1)
                + (f" ({result.peak_note})" if result.peak_note else ""),
            )
        )
        if result.speedup_vs_default is not None and result.configuration != "default":
            lines.append(("Vs default", f"{result.speedup_vs_default:.2f}x"))
        if result.vendor_ms is not None:
            lines.append((f"{result.vendor_library}(ms)", _number(result.vendor_ms)))
            lines.append(
                ("Vs vendor", f"{_number(result.vendor_ratio, 2)}x (vendor time / IREE time)")
            )
        else:
            lines.append(("Vendor", f"N/A ({result.vendor_note})"))
        blocks.append("\n".join(f"{name:<14}: {value}" for name, value in lines))
    return "\n\n".join(blocks) + ("\n" if blocks else "")


def render_csv(results: Sequence[DispatchResult]) -> str:
    """Write the results as CSV, one row per dispatch, every field of DispatchResult a column."""
    buffer = io.StringIO()
    names = [field.name for field in fields(DispatchResult)]
    writer = csv.DictWriter(buffer, fieldnames=names, lineterminator="\n")
    writer.writeheader()
    for result in results:
        row = {}
        for name in names:
            value = getattr(result, name)
            row[name] = (
                "" if value is None else (f"{value:.6g}" if isinstance(value, float) else value)
            )
        writer.writerow(row)
    return buffer.getvalue()
