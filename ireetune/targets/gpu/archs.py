"""The GPU architectures IREE 3.13 knows, checked against the pinned iree-compile.

`--iree-cuda-target=sm_90` (H100) fails in IREE 3.13 with "missing GPU target": Hopper has no
entry. PTX built for sm_80 runs there (the driver compiles it for the chip at load time), so the
error for sm_90 says so.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ireetune.core.errors import IreetuneError


class GpuFamily(enum.Enum):
    CUDA = "cuda"
    ROCM = "rocm"


@dataclass(frozen=True)
class GpuArch:
    """One compile target and the size of a typical chip of it (for the occupancy heuristic)."""

    family: GpuFamily
    name: str
    compute_units: int


# Compute units (SMs or CUs) of the common part of each architecture. Only the ordering heuristic
# uses them; a chip with more or fewer units changes the order a little, never validity.
CUDA_ARCHS = {
    "sm_60": 56, "sm_61": 28, "sm_62": 2, "sm_70": 80, "sm_72": 8, "sm_75": 40, "sm_80": 108,
    "sm_86": 84, "sm_87": 16, "sm_89": 128, "sm_120": 170, "sm_121": 48,
}  # fmt: skip
ROCM_ARCHS = {
    "gfx908": 120,
    "gfx90a": 110,
    "gfx942": 304,
    "gfx950": 256,
    "gfx1100": 96,
    "gfx1201": 64,
}
CUDA_ALIASES = {
    "a100": "sm_80",
    "ampere": "sm_80",
    "rtx3090": "sm_86",
    "ada": "sm_89",
    "rtx4090": "sm_89",
}
ROCM_ALIASES = {"mi300x": "gfx942", "mi300a": "gfx942", "mi325x": "gfx942", "mi355x": "gfx950"}
UNSUPPORTED_CUDA = (
    "sm_90",
    "sm_90a",
    "h100",
    "h200",
    "hopper",
    "sm_100",
    "sm_100a",
    "b200",
    "blackwell",
)


def parse_gpu_arch(family_text: str, arch_text: str) -> GpuArch:
    """Resolve `cuda:sm_80`, `rocm:gfx942` (or `hip:`) and the usual aliases, or explain why not."""
    family = GpuFamily.ROCM if family_text in ("rocm", "hip") else GpuFamily.CUDA
    archs, aliases, label, example = {
        GpuFamily.CUDA: (CUDA_ARCHS, CUDA_ALIASES, "CUDA", "cuda:sm_80"),
        GpuFamily.ROCM: (ROCM_ARCHS, ROCM_ALIASES, "ROCm", "rocm:gfx942"),
    }[family]
    arch = arch_text.strip().lower()
    if not arch:
        raise IreetuneError(f"name the {label} architecture: --target {example}")
    if family is GpuFamily.CUDA and arch in UNSUPPORTED_CUDA:
        raise IreetuneError(
            f"IREE 3.13 has no '{arch}' target; use --target cuda:sm_80 (its PTX is compiled "
            "for the chip by the driver at load time, so it runs on H100 and newer)"
        )
    arch = aliases.get(arch, arch)
    if arch not in archs:
        raise IreetuneError(
            f"unknown {label} architecture '{arch_text}'; known: {', '.join(archs)}"
        )
    return GpuArch(family, arch, archs[arch])
