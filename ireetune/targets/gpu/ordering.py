"""Order GPU candidates so that the likely-fast ones are compiled and measured first.

The score uses the features that seeds/002 (the SHARK tuner's talk) found predictive, on the
matrix-multiplication view of the problem (convolutions as implicit GEMMs):

- a power-of-two K tile of at least 32 (short K tiles starve the tensor cores between barriers);
- the intrinsic area-to-volume ratio: outputs per loaded element of the workgroup tile and of each
  subgroup's tile (data reuse from shared memory and from registers);
- quantization inefficiency: work padded up to whole tiles, over the real work;
- occupancy: enough workgroups for every compute unit, and the last wave not mostly idle;
- power-of-two workgroup tiles (aligned loads; odd tiles also fail VectorDistribute's layout
  analysis more often);
- 128 to 256 threads per workgroup, and accumulators that fit in registers;
- no workgroup tile that leaves a remainder unless the configuration pads it (the guarded
  remainder code ran up to 100x slower on the H100).

Each feature is read from the filled template of the compiler's own space, so the heuristic does
not restate any validity rule; the weights were set by hand (docs/gpu.md says how they did on the
H100).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ireetune.problem.contraction import ContractionProblem
from ireetune.problem.convolution import ConvolutionProblem
from ireetune.targets.gpu.constraints import ConstraintSpace
from ireetune.targets.gpu.resources import loop_entry, workgroup_tile
from ireetune.targets.gpu.template import ResolvedDict

# The problems with a GEMM view (convolutions as implicit GEMMs).
GemmProblem = ContractionProblem | ConvolutionProblem
# Accumulator registers per thread above which spills become likely (of 255 per thread).
MAX_ACCUMULATORS_PER_THREAD = 128


@dataclass(frozen=True)
class TileShape:
    """What a configuration means in matrix-multiplication terms."""

    tile_m: int
    tile_n: int
    tile_k: int
    subgroup_m: int
    subgroup_n: int
    threads: int
    workgroups: int
    unpadded_remainder: bool = False


def _int_list(value: object) -> list[int]:
    assert isinstance(value, list), f"expected a list of sizes, got {value!r}"
    return [int(v) for v in value if isinstance(v, int)]


def compute_tile_shape(
    problem: GemmProblem, space: ConstraintSpace, config: ResolvedDict
) -> TileShape:
    """Read the GEMM-view tile sizes of a filled template.

    Workgroup tile sizes are elements (0: the loop is not tiled, its whole extent). In TileAndFuse
    the subgroup and reduction tiles count intrinsics; in VectorDistribute the reduction tile
    counts elements and `subgroup_basis` gives subgroups per dimension. A template whose lists
    are shorter than the op's loops (a convolution as implicit GEMM, its K loops flattened) is
    read over its leading loops, and its last reduction entry as the flattened K.
    """
    workgroup = _int_list(config.get("workgroup", []))
    reduction = _int_list(config.get("reduction", []))
    mma_m, mma_n, mma_k = space.mma_shape(config)

    m_dims = tuple(d for d in problem.m_dims if d < len(workgroup))
    n_dims = tuple(d for d in problem.n_dims if d < len(workgroup))
    tile_m = workgroup_tile(problem.loop_sizes, workgroup, m_dims)
    tile_n = workgroup_tile(problem.loop_sizes, workgroup, n_dims)
    reduction_count = math.prod(r for r in reduction if r > 0) or 1
    tile_k = reduction_count * mma_k if space.pipeline == "TileAndFuse" else reduction_count
    workgroup_size = _int_list(config.get("workgroup_size", [1]))
    threads = math.prod(workgroup_size) or 1
    inner_m = max(problem.m_dims[-1:], default=0)
    inner_n = max(problem.n_dims[-1:], default=0)
    if "subgroup" in config:
        # TileAndFuse: each subgroup's tile, in intrinsics.
        subgroup = _int_list(config["subgroup"])
        subgroup_m = loop_entry(subgroup, inner_m, 1) * mma_m
        subgroup_n = loop_entry(subgroup, inner_n, 1) * mma_n
    else:
        # VectorDistribute: `subgroup_basis` counts the subgroups along each loop.
        basis = config.get("subgroup_basis", [[]])
        counts = _int_list(basis[0]) if isinstance(basis, list) and basis else []
        subgroup_m = max(mma_m, loop_entry(workgroup, inner_m, 0) // loop_entry(counts, inner_m, 1))
        subgroup_n = max(mma_n, loop_entry(workgroup, inner_n, 0) // loop_entry(counts, inner_n, 1))
    total_m = math.prod(problem.loop_sizes[d] for d in problem.m_dims)
    total_n = math.prod(problem.loop_sizes[d] for d in problem.n_dims)
    workgroups = math.ceil(total_m / tile_m) * math.ceil(total_n / tile_n)
    unpadded = "padding" not in config and any(
        0 < tile < problem.loop_sizes[i] and problem.loop_sizes[i] % tile != 0
        for i, tile in enumerate(workgroup[: len(problem.loop_sizes)])
    )
    return TileShape(tile_m, tile_n, tile_k, subgroup_m, subgroup_n, threads, workgroups, unpadded)


def occupancy_loss(workgroups: int, compute_units: int) -> float:
    """Return the share of the compute units a grid leaves idle: too few workgroups leave units
    idle; otherwise the last wave's idle share is lost."""
    waves = workgroups / compute_units
    return 1.0 - waves if waves < 1.0 else 1.0 - waves / math.ceil(waves)


def score_candidate(problem: GemmProblem, shape: TileShape, compute_units: int) -> float:
    """Score one configuration's tile shape; higher is more promising."""
    total_m = math.prod(problem.loop_sizes[d] for d in problem.m_dims)
    total_n = math.prod(problem.loop_sizes[d] for d in problem.n_dims)
    total_k = math.prod(problem.loop_sizes[d] for d in problem.k_dims)
    k_tile = shape.tile_k
    power_of_two_k = 1.0 if k_tile & (k_tile - 1) == 0 and k_tile >= 32 else 0.0
    short_k = 1.0 if k_tile < 32 and total_k >= 64 else 0.0

    workgroup_reuse = (shape.tile_m * shape.tile_n) / (shape.tile_m + shape.tile_n) / 64.0
    subgroup_reuse = (
        (shape.subgroup_m * shape.subgroup_n) / (shape.subgroup_m + shape.subgroup_n) / 32.0
    )

    padded = (
        math.ceil(total_m / shape.tile_m) * shape.tile_m
        * math.ceil(total_n / shape.tile_n) * shape.tile_n
        * math.ceil(total_k / k_tile) * k_tile
    )  # fmt: skip
    padding = padded / (total_m * total_n * total_k) - 1.0

    power_of_two_tiles = sum(1.0 for t in (shape.tile_m, shape.tile_n) if t & (t - 1) == 0) / 2.0
    threads_off = 0.0 if 128 <= shape.threads <= 256 else 0.5 if shape.threads in (64, 512) else 1.0
    accumulators = shape.tile_m * shape.tile_n / shape.threads
    register_pressure = max(0.0, accumulators / MAX_ACCUMULATORS_PER_THREAD - 1.0)

    return (
        1.0 * power_of_two_k
        + 1.0 * power_of_two_tiles
        - 1.0 * short_k
        + 1.5 * min(workgroup_reuse, 1.5)
        + 1.0 * min(subgroup_reuse, 1.5)
        - 3.0 * min(padding, 1.0)
        - 1.5 * occupancy_loss(shape.workgroups, compute_units)
        - 0.5 * threads_off
        - 2.0 * min(register_pressure, 1.0)
        - 4.0 * shape.unpadded_remainder
    )
