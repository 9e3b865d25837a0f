"""What the Vulkan spaces check candidates against: the target's limits and cooperative matrices.

IREE validates little of a user's SPIR-V configuration (its matmul verifiers never see a matmul:
dispatches are generalized before configuration), so every limit here is enforced by ireetune's
own constraints before anything is compiled.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from iree.compiler import ir
from iree.compiler.dialects import iree_gpu

# The matrix instructions SPIR-V lowers as KHR cooperative matrices: one M x N x K shape with one
# input and one accumulator type (not NVIDIA's mma.sync, nor AMD's multi-block or virtual ones),
# and 16 x 16 only: gfx942's MFMA_F32_32x32x8_F16 compiled to "no GPU subgroup mma compute ops
# generated" (seen 2026-11-25), and IREE's own defaults use 16 x 16 x K on every target.
_COOPERATIVE_NAME = re.compile(
    r"^(?:WMMAR3|WMMAR4|NV_WMMA|MFMA)_(F32|F16|I32|BF16)_(\d+)x(\d+)x(\d+)_(F16|BF16|I8|F32)$"
)


@dataclass(frozen=True)
class CooperativeShape:
    """One cooperative-matrix shape of the target, as `[M, N, K]` with its element types."""

    name: str
    m: int
    n: int
    k: int
    input_type: str
    accumulator_type: str


@dataclass(frozen=True)
class VulkanFacts:
    """The target's limits, as `iree_gpu.TargetInfo` reads them from the executable target."""

    arch: str
    subgroup_sizes: tuple[int, ...]
    max_workgroup_sizes: tuple[int, int, int]
    max_threads: int
    max_workgroup_memory_bytes: int
    cooperative_shapes: tuple[CooperativeShape, ...] = ()

    def shapes_for(self, input_type: str, accumulator_type: str) -> tuple[CooperativeShape, ...]:
        """Return the cooperative-matrix shapes for inputs and an accumulator of these types."""
        return tuple(
            shape
            for shape in self.cooperative_shapes
            if shape.input_type == input_type and shape.accumulator_type == accumulator_type
        )


def parse_cooperative_shape(name: str) -> CooperativeShape | None:
    """Read `WMMAR3_F32_16x16x16_F16` as a shape, or None for an intrinsic SPIR-V cannot use."""
    match = _COOPERATIVE_NAME.match(name)
    if match is None:
        return None
    accumulator, m, n, k, inputs = match.groups()
    if (m, n) != ("16", "16"):
        return None
    return CooperativeShape(name, int(m), int(n), int(k), inputs.lower(), accumulator.lower())


def read_vulkan_facts(variant_target: ir.Attribute) -> VulkanFacts:
    """Read the limits of a `vulkan-spirv` executable target through `iree_gpu.TargetInfo`."""
    info = iree_gpu.TargetInfo.get_gpu_target_info(variant_target)
    sizes = [int(size) for size in info.max_workgroup_sizes]
    sizes += [1] * (3 - len(sizes))
    shapes = (parse_cooperative_shape(str(name)) for name in info.mma_intrinsics)
    return VulkanFacts(
        arch=str(info.arch),
        subgroup_sizes=tuple(int(size) for size in info.subgroup_size_choices),
        max_workgroup_sizes=(sizes[0], sizes[1], sizes[2]),
        max_threads=int(info.max_thread_count_per_workgroup),
        max_workgroup_memory_bytes=int(info.max_workgroup_memory_bytes),
        cooperative_shapes=tuple(shape for shape in shapes if shape is not None),
    )
