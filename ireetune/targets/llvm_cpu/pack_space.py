"""The llvm-cpu search space for packs (`linalg.pack`, the DataTiling pipeline).

IREE 3.13 tiles a pack's loops (the destination's outer dimensions) at two levels, one entry per
loop, as it tiles an element-wise op's: `distribution = [1, 48], vector_common_parallel = [1, 1]`
for a 64x96 f32 left-hand side packed into 8x96 tiles of 8x1 on haswell. The space is the
element-wise one (`elementwise_space.py`) over those loops, under the DataTiling pipeline: the
default's neighbours first, then a seeded walk.
"""

from __future__ import annotations

from ireetune.problem.pack import PackProblem
from ireetune.targets.llvm_cpu.common import SizedCpuSpace, SizedFamily
from ireetune.targets.llvm_cpu.elementwise_space import (
    ELEMENTWISE_LEVELS,
    CpuElementwiseSizes,
    compute_elementwise_sizes,
    elementwise_tile_lists,
    enumerate_elementwise_space,
    parse_default_elementwise_knobs,
    score_elementwise_candidate,
)

PACK_PIPELINE = "DataTiling"


class CpuPackSpace(SizedCpuSpace[PackProblem, CpuElementwiseSizes]):
    """DataTiling tiles of a pack's outer loops."""

    levels = ELEMENTWISE_LEVELS
    family = SizedFamily(
        PackProblem,
        PACK_PIPELINE,
        compute_elementwise_sizes,
        enumerate_elementwise_space,
        parse_default_elementwise_knobs,
        score_elementwise_candidate,
        elementwise_tile_lists,
    )
