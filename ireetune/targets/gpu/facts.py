"""What a GPU space and the resource check know about the target: its limits and intrinsics."""

from __future__ import annotations

from dataclasses import dataclass

from iree.compiler import ir
from iree.compiler.dialects import iree_gpu

from ireetune.targets.gpu.archs import GpuArch


@dataclass(frozen=True)
class GpuFacts:
    """What a hand-written GPU space and the resource check need to know about the target."""

    arch: str
    subgroup_sizes: tuple[int, ...]
    max_threads: int
    max_workgroup_memory_bytes: int
    intrinsics: tuple[str, ...]
    compute_units: int


def read_gpu_facts(variant_target: ir.Attribute, arch: GpuArch) -> GpuFacts:
    """Read the target's limits and matrix intrinsics through `iree_gpu.TargetInfo`."""
    info = iree_gpu.TargetInfo.get_gpu_target_info(variant_target)
    return GpuFacts(
        arch=str(info.arch),
        subgroup_sizes=tuple(int(size) for size in info.subgroup_size_choices),
        max_threads=int(info.max_thread_count_per_workgroup),
        max_workgroup_memory_bytes=int(info.max_workgroup_memory_bytes),
        intrinsics=tuple(str(intrinsic) for intrinsic in info.mma_intrinsics),
        compute_units=arch.compute_units,
    )
