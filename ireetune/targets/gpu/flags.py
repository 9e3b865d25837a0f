"""The GPU targets' global compiler options worth searching, as data.

Read from `iree-compile --help-hidden` of IREE 3.13 and checked by compiling a 512x768x1024 f16
matmul for sm_80 and gfx942 on 2026-11-24: disabling TileAndFuse for matmuls (which then take
VectorDistribute) and `--iree-opt-level=O3` changed both binaries; the prefetch depth and data
tiling changed the gfx942 one only. Workgroup reordering and shared-memory reuse changed neither
there but act on other dispatches (reductions, large grids); the flag search never times a set
whose binary equals the default's.
"""

from __future__ import annotations

from ireetune.core.flag_space import FlagOption, FlagSpace

_PREFETCH = "--iree-llvmgpu-prefetch-num-stages"
_TILE_AND_FUSE_MATMUL = "--iree-codegen-llvmgpu-use-tile-and-fuse-matmul"
_VECTOR_DISTRIBUTION = "--iree-codegen-llvmgpu-use-vector-distribution"
_REORDER = "--iree-codegen-reorder-workgroups-strategy"
_OPT_LEVEL = "--iree-opt-level"

_SHARED_OPTIONS = (
    FlagOption(
        "prefetch",
        ((f"{_PREFETCH}=1",), (f"{_PREFETCH}=3",)),
        "shared-memory prefetch stages: 1 turns pipelining off, 3 deepens it (default: heuristic)",
    ),
    FlagOption(
        "matmul-pipeline",
        ((f"{_TILE_AND_FUSE_MATMUL}=false",),),
        "matmuls take the VectorDistribute pipeline instead of TileAndFuse",
    ),
    FlagOption(
        "vector-distribution",
        ((f"{_VECTOR_DISTRIBUTION}=false",),),
        "turns the vector distribution pipeline off (reductions and attention fall back)",
    ),
    FlagOption(
        "reorder-workgroups",
        ((f"{_REORDER}=transpose",),),
        "transposes the workgroup order for better L2 reuse on large grids",
    ),
    FlagOption(
        "opt-level",
        ((f"{_OPT_LEVEL}=O3",),),
        "the compiler's most aggressive global optimisation level (the default is O2)",
    ),
)

CUDA_FLAG_SPACE = FlagSpace(
    options=_SHARED_OPTIONS,
    combinations=((f"{_TILE_AND_FUSE_MATMUL}=false", f"{_PREFETCH}=3"),),
)

ROCM_FLAG_SPACE = FlagSpace(
    options=(
        *_SHARED_OPTIONS,
        FlagOption(
            "data-tiling",
            (("--iree-opt-data-tiling",),),
            "data-tiled layouts for matmuls (checked to change gfx942 binaries; never timed here)",
        ),
    ),
    combinations=((f"{_TILE_AND_FUSE_MATMUL}=false", f"{_PREFETCH}=3"),),
)
