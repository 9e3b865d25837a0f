"""Peak throughput of the devices a target usually runs on, to express results as a percentage.

The numbers are the vendors' published dense peaks (no sparsity) for the device each target
architecture names. A CPU's peak depends on the exact part, clocks and core count, so it is
unknown unless the user gives one (`--peak-gflops`). A binary compiled for sm_80 may run on a
newer GPU (an H100 runs sm_80 code): give that device's peak explicitly then.
"""

from __future__ import annotations

from ireetune.profiler.operations import ElementType

# GFLOP/s (GOP/s for i8) by target and input type. Sources: NVIDIA A100 datasheet (tensor cores,
# f32 without TF32), AMD Instinct MI300X datasheet.
_PEAK_GFLOPS: dict[tuple[str, ElementType], float] = {
    ("cuda:sm_80", ElementType.F16): 312_000.0,
    ("cuda:sm_80", ElementType.BF16): 312_000.0,
    ("cuda:sm_80", ElementType.F32): 19_500.0,
    ("cuda:sm_80", ElementType.I8): 624_000.0,
    ("rocm:gfx942", ElementType.F16): 1_307_400.0,
    ("rocm:gfx942", ElementType.BF16): 1_307_400.0,
    ("rocm:gfx942", ElementType.F32): 163_400.0,
    ("rocm:gfx942", ElementType.I8): 2_614_900.0,
}
PEAK_DEVICE = {"cuda:sm_80": "A100", "rocm:gfx942": "MI300X"}


def lookup_peak_gflops(target_name: str, input_type: ElementType) -> float | None:
    """Return the published peak for the target's usual device, or None when unknown (CPUs)."""
    return _PEAK_GFLOPS.get((target_name, input_type))
