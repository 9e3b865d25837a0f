"""ireetune's own count of a GPU candidate's shared memory and accumulator registers.

IREE 3.13's constraints bound shared memory for the operands they know about, but not always all
it allocates: a direct convolution promotes an image window larger than its output tile (the
halo of the filter), a batch tile multiplies every promoted tile, and a TileAndFuse matmul also
stages its accumulator tile through shared memory when it writes the result. On gfx942, 6 of 24
sampled f16 3x3 convolution candidates failed for that alone ("uses N bytes of shared memory;
exceeded the limit"). So every candidate is counted here before compiling and those that would
overflow are not generated.

The count follows what the compiler reported for candidates that overflowed (docs/gpu.md):

- each promoted operand's workgroup tile (`promote_operands`), in its element type: for a
  contraction the M x K and K x N tiles, for a direct convolution the image window
  (output tile + filter extent - 1 per image dimension) and the filter tile, for attention the
  query, key and value tiles and the M x K2 tile of probabilities that the second matmul reads
  (IREE 3.13's ROCm constraint checks each matmul alone: 2 of 24 gfx942 candidates used 81920
  bytes of 65536, 40960 per matmul);
- TileAndFuse matmuls also hold the M x N accumulator tile (f32);
- everything times the batch tile.

Accumulators: the workgroup's output tile over its threads, in 32-bit registers; above
`MAX_ACCUMULATOR_REGISTERS` a thread spills before it computes anything.

One more rule the compiler's VectorDistribute constraints leave out: each promoted operand tile
is copied to shared memory by every thread of the workgroup in 128-bit vectors, and its layout
cannot be derived ("failed to derive layout for promoted read-like op") unless those vectors
split evenly over the threads. A gfx942 mmt candidate with a 256 x 96 tile, K tile 32 and 256
threads failed so: its 96 x 32 f16 tile is 384 vectors, 1.5 per thread.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ireetune.problem.family import Problem, element_bytes, narrow
from ireetune.targets.gpu.constraints import ConstraintSpace
from ireetune.targets.gpu.template import (
    PIPELINE_OPTIONS_KEY,
    WORKGROUP_SIZE_KEY,
    ResolvedDict,
)

if TYPE_CHECKING:
    from ireetune.targets.gpu.facts import GpuFacts

# A thread has 255 32-bit registers on both vendors; accumulators alone above this cannot fit.
MAX_ACCUMULATOR_REGISTERS = 255


@dataclass(frozen=True)
class ResourceUsage:
    """What one workgroup of a candidate needs."""

    shared_memory_bytes: int
    accumulator_registers: int


def _ints(value: object) -> list[int]:
    if not isinstance(value, list):
        return []
    return [v if isinstance(v, int) and not isinstance(v, bool) else 0 for v in value]


def _threads(config: ResolvedDict) -> int:
    return max(1, math.prod(_ints(config.get(WORKGROUP_SIZE_KEY, [1]))))


def loop_entry(values: list[int], dim: int, missing: int) -> int:
    """Return a loop's entry of a per-loop tile list, `missing` where the list has none (or 0)."""
    return values[dim] if dim < len(values) and values[dim] > 0 else missing


def workgroup_tile(loop_sizes: tuple[int, ...], workgroup: list[int], dims: tuple[int, ...]) -> int:
    """Return the workgroup tile's extent over `dims` (0 in the config: the whole loop)."""
    return math.prod(loop_entry(workgroup, d, loop_sizes[d]) for d in dims)


def _reduction_tile(space: ConstraintSpace, config: ResolvedDict, dims: tuple[int, ...]) -> int:
    """Return the reduction tile in elements over `dims` (TileAndFuse counts intrinsics)."""
    reduction = _ints(config.get("reduction", []))
    mma_k = space.mma_shape(config)[2]
    scale = mma_k if space.pipeline == "TileAndFuse" else 1
    # A loop without a reduction tile counts 1.
    return math.prod(loop_entry(reduction, d, 0) * scale or 1 for d in dims)


def _promoted(config: ResolvedDict) -> set[int]:
    return set(_ints(config.get("promote_operands", [])))


def estimate_resources(
    problem: Problem, space: ConstraintSpace, config: ResolvedDict
) -> ResourceUsage:
    """Count a filled template's shared memory and accumulator registers per thread."""
    family = problem.family
    if family in ("contraction", "batch_contraction"):
        return _gemm_usage(problem, space, config)
    if family == "convolution":
        return _convolution_usage(problem, space, config)
    if family == "attention":
        return _attention_usage(problem, config)
    return ResourceUsage(0, 0)


def _gemm_usage(problem: Problem, space: ConstraintSpace, config: ResolvedDict) -> ResourceUsage:
    from ireetune.problem.contraction import ContractionProblem

    contraction = narrow(problem, ContractionProblem)
    workgroup = _ints(config.get("workgroup", []))
    sizes = contraction.loop_sizes
    batch = (
        workgroup_tile(sizes, workgroup, contraction.batch_dims) if contraction.batch_dims else 1
    )
    if any(d < len(workgroup) and workgroup[d] == 0 for d in contraction.batch_dims):
        batch = 1  # An untiled batch loop is distributed over workgroups, one matrix each.
    tile_m = workgroup_tile(sizes, workgroup, contraction.m_dims)
    tile_n = workgroup_tile(sizes, workgroup, contraction.n_dims)
    tile_k = _reduction_tile(space, config, contraction.k_dims)
    promoted = _promoted(config)
    shared = 0
    if 0 in promoted:
        shared += tile_m * tile_k * element_bytes(contraction.lhs_type)
    if 1 in promoted:
        shared += tile_k * tile_n * element_bytes(contraction.rhs_type)
    if space.pipeline == "TileAndFuse" and promoted and "mma_kind" in config:
        shared += tile_m * tile_n * 4
    accumulators = math.ceil(batch * tile_m * tile_n / _threads(config))
    return ResourceUsage(batch * shared, accumulators)


def _convolution_usage(
    problem: Problem, space: ConstraintSpace, config: ResolvedDict
) -> ResourceUsage:
    from ireetune.problem.convolution import ConvolutionProblem

    conv = narrow(problem, ConvolutionProblem)
    workgroup = _ints(config.get("workgroup", []))
    options = config.get(PIPELINE_OPTIONS_KEY, {})
    igemm = isinstance(options, dict) and options.get("use_igemm_convolution") is True
    if igemm or len(workgroup) != len(conv.loop_sizes):
        # An implicit GEMM's template is over the GEMM's loops, which the compiler's own shared
        # memory constraint counts correctly.
        return ResourceUsage(0, 0)
    sizes = conv.loop_sizes
    batch = workgroup_tile(sizes, workgroup, conv.batch_dims)
    channels_out = workgroup_tile(sizes, workgroup, (*conv.depth_dims, *conv.output_channel_dims))
    image_tiles = [workgroup_tile(sizes, workgroup, (d,)) for d in conv.output_image_dims]
    reduction = _ints(config.get("reduction", []))
    mma_k = space.mma_shape(config)[2]
    filter_tiles = [loop_entry(reduction, d, 1) for d in conv.filter_dims]
    channels_in = 1
    for d in conv.input_channel_dims:
        channels_in *= loop_entry(reduction, d, 1) * (
            mma_k if space.pipeline == "TileAndFuse" else 1
        )
    strides = (*conv.strides, *[1] * len(image_tiles))
    dilations = (*conv.dilations, *[1] * len(image_tiles))
    window = 1
    for index, (out, kernel) in enumerate(zip(image_tiles, filter_tiles, strict=False)):
        window *= (out - 1) * strides[index] + (kernel - 1) * dilations[index] + 1
    promoted = _promoted(config)
    shared = 0
    if 0 in promoted:
        shared += batch * window * channels_in * element_bytes(conv.lhs_type)
    if 1 in promoted:
        shared += (
            math.prod(filter_tiles) * channels_in * channels_out * element_bytes(conv.rhs_type)
        )
    outputs = batch * math.prod(image_tiles) * channels_out
    if space.pipeline == "TileAndFuse" and promoted and "mma_kind" in config:
        shared += outputs * 4
    return ResourceUsage(shared, math.ceil(outputs / _threads(config)))


def _attention_usage(problem: Problem, config: ResolvedDict) -> ResourceUsage:
    from ireetune.problem.attention import AttentionProblem

    attention = narrow(problem, AttentionProblem)
    workgroup = _ints(config.get("workgroup", []))
    reduction = _ints(config.get("reduction", []))
    sizes = attention.loop_sizes
    tile_m = workgroup_tile(sizes, workgroup, attention.m_dims)
    tile_n = workgroup_tile(sizes, workgroup, attention.n_dims)
    k1 = math.prod(sizes[d] for d in attention.k1_dims)
    tile_k2 = math.prod(loop_entry(reduction, d, sizes[d]) for d in attention.k2_dims)
    shared = (
        tile_m * k1 * element_bytes(attention.query_type)
        + tile_k2 * k1 * element_bytes(attention.key_type)
        + tile_k2 * tile_n * element_bytes(attention.value_type)
        + tile_m * tile_k2 * element_bytes(attention.value_type)
    )
    return ResourceUsage(shared, math.ceil(tile_m * tile_n / _threads(config)))


def check_tile_extents(problem: Problem, config: ResolvedDict) -> str | None:
    """Say which workgroup tile is larger than its loop, or None.

    IREE 3.13's implicit-GEMM constraints let a tile exceed its loop (a 32-wide tile of a
    16-wide output row); without padding in the configuration the compiler then fails
    (`tensor.expand_shape` "expected dimension 2 of collapsed type to be static value of 64":
    7 of 8 such gfx942 convolution candidates), and padded it only computes zeros.
    """
    workgroup = _ints(config.get("workgroup", []))
    if "padding" in config:
        return None
    for index, tile in enumerate(workgroup[: len(problem.loop_sizes)]):
        if tile > problem.loop_sizes[index]:
            return f"workgroup tile {tile} of loop {index} exceeds its {problem.loop_sizes[index]}"
    return None


def check_promoted_reads(
    problem: Problem, space: ConstraintSpace, config: ResolvedDict
) -> str | None:
    """Say why a VectorDistribute contraction's promoted tiles cannot be spread over its threads
    in 128-bit vectors, or None when they can (or the rule does not apply).

    Each promoted tile is copied by the workgroup's threads laid out as rows x vectors of its
    contiguous dimension: the vectors of a row must split evenly over the threads (or the
    threads over them), and the rows over the threads left. Seen failing otherwise on gfx942
    ("failed to derive layout for promoted read-like op"): an f16 mmt's 96 x 32 RHS tile over
    256 threads (4 vectors a row, 64 rows of threads for 96 rows) and an f32 matmul's 128 x 48
    LHS tile over 128 threads (12 vectors a row).
    """
    if space.pipeline != "VectorDistribute" or problem.family not in (
        "contraction",
        "batch_contraction",
    ):
        return None
    from ireetune.problem.contraction import ContractionProblem
    from ireetune.problem.family import map_dim_positions

    contraction = narrow(problem, ContractionProblem)
    workgroup = _ints(config.get("workgroup", []))
    reduction = _ints(config.get("reduction", []))
    threads = _threads(config)

    def loop_tile(d: int) -> int:
        if d in contraction.k_dims:
            return loop_entry(reduction, d, 1)
        return loop_entry(workgroup, d, contraction.loop_sizes[d])

    element_types = (contraction.lhs_type, contraction.rhs_type)
    for operand in sorted(_promoted(config)):
        if operand not in (0, 1):
            continue
        loops = [d for d in map_dim_positions(contraction.indexing_maps[operand]) if d >= 0]
        inner = loop_tile(loops[-1])
        rows = math.prod(loop_tile(d) for d in loops[:-1])
        per_vector = max(1, 16 // element_bytes(element_types[operand]))
        if inner % per_vector:
            return f"operand {operand}'s contiguous tile of {inner} is not whole 128-bit vectors"
        vectors = inner // per_vector
        spread = (
            threads % vectors == 0 and rows % (threads // vectors) == 0
            if vectors <= threads
            else vectors % threads == 0
        )
        if not spread:
            return (
                f"operand {operand}'s {rows} x {inner} tile ({vectors} vectors a row) does not "
                f"spread evenly over {threads} threads"
            )
    return None


def check_resources(usage: ResourceUsage, facts: GpuFacts) -> str | None:
    """Say why a candidate does not fit the target, or None when it does."""
    if usage.shared_memory_bytes > facts.max_workgroup_memory_bytes:
        return (
            f"needs {usage.shared_memory_bytes} bytes of shared memory, over the target's "
            f"{facts.max_workgroup_memory_bytes}"
        )
    if usage.accumulator_registers > MAX_ACCUMULATOR_REGISTERS:
        return (
            f"needs {usage.accumulator_registers} accumulator registers per thread, over "
            f"{MAX_ACCUMULATOR_REGISTERS}"
        )
    return None
