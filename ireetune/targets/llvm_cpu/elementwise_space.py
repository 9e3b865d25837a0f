"""The llvm-cpu search space for element-wise generics (DoubleTilingExpert), as z3 constraints.

IREE 3.13 configures an element-wise dispatch (copies, transposes and broadcasts included) with
DoubleTilingExpert and two tiling levels, one entry per loop. For a 64x96 f32 bias add and ReLU
on haswell:

    distribution = [64, 96], vector_common_parallel = [1, 8]

and for a 64x32 transpose `distribution = [8, 32], vector_common_parallel = [8, 8]`. The knobs:

- `dist_<i>`: the distribution tile of loop i (outermost first), one task's share;
- `vec_<i>`: its vector tile (a divisor of the task's tile, or one masked vector over all of it).

Candidates are the default's neighbours first, then a seeded walk ordered by whole vectors along
the innermost loop, a few registers' worth of elements per vector tile, balanced threads, and
nearness to the default.

Packs (`linalg.pack`, the DataTiling pipeline) take the same space: IREE 3.13 tiles a pack's loops
(the destination's outer dimensions) at the same two levels, one entry per loop:
`distribution = [1, 48], vector_common_parallel = [1, 1]` for a 64x96 f32 left-hand side packed
into 8x96 tiles of 8x1 on haswell. Unpacks (`linalg.unpack`) do too, over the destination's
dimensions: `distribution = [8, 64], vector_common_parallel = [8, 8]` for a 64x128 f32 result
unpacked from 8x8 tiles. Copies on buffers (a pad's copy of its input into the padded buffer,
BufferOpsTileAndVectorize) do too: `distribution = [3, 32, 32], vector_common_parallel = [1, 1,
8]` for a 3x32x32 f32 copy on haswell, one workgroup for the whole copy.

1-D sliding-window sums with no channel reduction (a local response normalisation's sum of
squares over neighbouring channels, a 1-D sum pool, a 1-D depthwise convolution) reach the
convolution interface (`(d0 + d3, d1, d2)`, a window operand that only gives the shape), and IREE
3.13 configures them with DoubleTilingExpert and three levels. For the window of 5 channels over a
16x17x17 image of `LRN_MODEL` (tests) on haswell:

    distribution = [2, 1, 17, 0], vector_common_parallel = [1, 1, 8, 0],
    vector_reduction = [0, 0, 0, 8]

Their parallel loops (channels, rows, columns) take the element-wise knobs, in loop order, with
one more: `vec_k`, the vector tile of the window (a divisor of it, all of it, or one masked vector
over it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

import z3

from ireetune.core.candidate import Knobs, make_knobs
from ireetune.core.errors import IreetuneError
from ireetune.problem.buffer_copy import BufferCopyProblem
from ireetune.problem.convolution import ConvolutionProblem
from ireetune.problem.elementwise import ElementwiseProblem
from ireetune.problem.family import element_bytes
from ireetune.problem.pack import PackProblem, UnpackProblem
from ireetune.targets.llvm_cpu.common import (
    CpuFacts,
    SizedCpuSpace,
    SizedFamily,
    enough_tiles,
    nearness_penalty,
    positive_knobs,
    thread_imbalance,
    tile_levels,
)
from ireetune.targets.z3_enumerate import (
    NearDefaultSpace,
    Neighbourhood,
    domain_constraints,
)

ELEMENTWISE_PIPELINE = "DoubleTilingExpert"
PACK_PIPELINE = "DataTiling"
BUFFER_COPY_PIPELINE = "BufferOpsTileAndVectorize"
# The records the element-wise space searches: element-wise ops, packs, unpacks, buffer copies.
ElementwiseRecord = TypeVar("ElementwiseRecord", bound=ElementwiseProblem)
ELEMENTWISE_LEVELS = ("distribution", "vector_common_parallel")
_INNER_VECTOR_CHOICES = (1, 2, 4, 8, 16, 32, 64)
_OUTER_VECTOR_CHOICES = (1, 2, 4, 8, 16)
_MAX_DISTRIBUTION = 8192
_WINDOW_VECTOR_CHOICES = (1, 2, 4, 8, 16, 32)
_MAX_NEIGHBOURS = 16


@dataclass(frozen=True)
class CpuElementwiseSizes:
    """The loops an element-wise config tiles, and the widest element in bytes."""

    loops: tuple[int, ...]
    element_bytes: int
    # Per loop, the multiple its distribution tiles keep (an unpack's inner tile); none when
    # empty.
    multiples: tuple[int, ...] = ()

    @property
    def knob_names(self) -> tuple[str, ...]:
        """Name the knobs: `dist_<i>` per loop, then `vec_<i>` per loop."""
        count = len(self.loops)
        return (*(f"dist_{i}" for i in range(count)), *(f"vec_{i}" for i in range(count)))


def compute_elementwise_sizes(problem: ElementwiseProblem) -> CpuElementwiseSizes:
    """Reduce an element-wise op to its loops; refuse one with none."""
    if not problem.loop_sizes:
        raise IreetuneError(f"{problem.signature}: a scalar element-wise op has no loop to tile")
    return CpuElementwiseSizes(
        loops=problem.loop_sizes,
        element_bytes=max(element_bytes(t) for t in (*problem.input_types, problem.output_type)),
    )


def compute_unpack_sizes(problem: UnpackProblem) -> CpuElementwiseSizes:
    """Reduce an unpack to its loops (the destination's dimensions), its distribution tiles
    held at multiples of the inner tiles it reads each dimension in, as IREE's own
    configuration holds them (`distribution = [8, 64]` for 8x8 tiles): a task whose tile splits
    an inner tile reads part of it, and another task reads the rest. Vector tiles stay free:
    held at multiples too, 16x16 tiles leave no vector tile within a 16-register file."""
    sizes = compute_elementwise_sizes(problem)
    return CpuElementwiseSizes(sizes.loops, sizes.element_bytes, problem.inner_tiles)


def fits_loop(extent: int, vector: int) -> bool:
    """Say whether a vector tile divides a loop or covers it in one masked vector."""
    return extent % vector == 0 or vector // 2 < extent < vector


def elementwise_domains(sizes: CpuElementwiseSizes) -> dict[str, list[int]]:
    """Return each knob's candidate values."""
    last = len(sizes.loops) - 1
    domains = {
        f"dist_{i}": [v for v in range(1, min(size, _MAX_DISTRIBUTION) + 1) if size % v == 0]
        for i, size in enumerate(sizes.loops)
    }
    for i, size in enumerate(sizes.loops):
        choices = _INNER_VECTOR_CHOICES if i == last else _OUTER_VECTOR_CHOICES
        domains[f"vec_{i}"] = [x for x in choices if fits_loop(size, x)]
    for i, multiple in enumerate(sizes.multiples):
        if multiple > 1 and sizes.loops[i] % multiple == 0:
            domains[f"dist_{i}"] = [v for v in domains[f"dist_{i}"] if v % multiple == 0]
    return domains


def build_elementwise_constraints(
    sizes: CpuElementwiseSizes,
    facts: CpuFacts,
    require_parallelism: bool,
    context: z3.Context,
    default: Knobs | None = None,
) -> tuple[dict[str, z3.ArithRef], list[z3.BoolRef]]:
    """State the space: vector tiles nest in the distribution tiles, a vector tile fits the
    register file and the stack-allocation limit, and (when required) every thread gets a
    tile."""
    v = {name: z3.Int(name, context) for name in sizes.knob_names}
    constraints = domain_constraints(v, elementwise_domains(sizes), default)
    elements = z3.IntVal(1, context)
    for i in range(len(sizes.loops)):
        dist, vec = v[f"dist_{i}"], v[f"vec_{i}"]
        constraints.append(z3.Or(dist % vec == 0, z3.And(vec > dist, vec < 2 * dist)))
        elements = elements * vec
    register_file = facts.vector_registers * facts.native_vector_bytes
    constraints += [
        elements * sizes.element_bytes <= register_file,
        elements * sizes.element_bytes < facts.max_vector_bytes,
    ]
    if require_parallelism:
        extents = [(size, v[f"dist_{i}"]) for i, size in enumerate(sizes.loops)]
        constraints.append(enough_tiles(context, extents, facts.threads))
    return v, constraints


# A task of fewer elements than this costs the thread pool more to hand out than to run.
# ZFNet-512's im2col gather (3x7x7x109x109 f32, under --iree-global-opt-use-im2col-for-convs):
# IREE 3.13 tiled it into 11881 tasks of 147 elements (7.5 ms); one whole 109-wide row per task
# ran 8.3x faster, and 23 of the default's neighbours (steps of two) had not found it
# (2026-12-06).
_MIN_TASK_ELEMENTS = 1024
# ...where there are more tasks than this many per thread (otherwise the default keeps its
# centre).
_MANY_TASKS_PER_THREAD = 64


def elementwise_anchor(sizes: CpuElementwiseSizes, threads: int, default: Knobs) -> Knobs:
    """Return the configuration the search centres on: the default itself, or, where the
    default's tasks are tiny and very many (fewer than _MIN_TASK_ELEMENTS elements each, more
    than _MANY_TASKS_PER_THREAD a thread), the default with its distribution tiles widened,
    innermost loop first, to the smallest allowed tile (a multiple of the loop's vector tile)
    that gives a task that many elements, or the loop's whole extent."""
    values = {name: int(value) for name, value in default}
    count = len(sizes.loops)
    if any(f"dist_{i}" not in values or f"vec_{i}" not in values for i in range(count)):
        return default
    tiles = math.prod(math.ceil(n / values[f"dist_{i}"]) for i, n in enumerate(sizes.loops))
    if tiles <= _MANY_TASKS_PER_THREAD * threads:
        return default
    domains = elementwise_domains(sizes)
    for i in reversed(range(count)):
        task = math.prod(values[f"dist_{j}"] for j in range(count))
        if task >= _MIN_TASK_ELEMENTS:
            break
        name = f"dist_{i}"
        others = task // values[name]
        wider = [d for d in domains[name] if d >= values[name] and d % values[f"vec_{i}"] == 0]
        enough = [d for d in wider if d * others >= _MIN_TASK_ELEMENTS]
        values[name] = min(enough) if enough else max(wider, default=values[name])
    return make_knobs(values)


# Valid configurations, lazily: the anchor (the default, or wider tasks where the default's are
# tiny) and its neighbours first, then a seeded walk.
ELEMENTWISE_SPACE = NearDefaultSpace(
    build_elementwise_constraints,
    lambda sizes, facts: Neighbourhood(
        elementwise_domains(sizes),
        _MAX_NEIGHBOURS,
        centre=partial(elementwise_anchor, sizes, facts.threads),
    ),
)
enumerate_elementwise_space = ELEMENTWISE_SPACE.enumerate


def score_elementwise_candidate(
    sizes: CpuElementwiseSizes, facts: CpuFacts, knobs: Knobs, default: Knobs | None
) -> float:
    """Score a configuration; higher is more promising.

    An element-wise op streams memory: whole native vectors along the innermost loop, a vector
    tile of a few registers, and tasks that keep every thread busy; nearness to IREE's own
    choice weighs most.
    """
    values = {name: int(value) for name, value in knobs}
    last = len(sizes.loops) - 1
    lanes = max(1, facts.native_vector_bytes // sizes.element_bytes)
    inner = values[f"vec_{last}"]
    whole_vectors = 1.0 if inner % lanes == 0 or inner >= sizes.loops[last] else 0.0
    elements = math.prod(values[f"vec_{i}"] for i in range(len(sizes.loops)))
    register_fit = -abs(math.log2(max(elements / lanes, 0.125) / 4.0))
    tiles = math.prod(math.ceil(size / values[f"dist_{i}"]) for i, size in enumerate(sizes.loops))
    imbalance = thread_imbalance(tiles, facts.threads)
    score = 1.0 * whole_vectors + 0.5 * register_fit - 1.0 * imbalance
    return score - nearness_penalty(knobs, default)


def score_near_anchor(
    sizes: CpuElementwiseSizes, facts: CpuFacts, knobs: Knobs, default: Knobs | None
) -> float:
    """Score a configuration as `score_elementwise_candidate` does, its nearness counted to the
    anchor (`elementwise_anchor`) instead of the default."""
    anchor = elementwise_anchor(sizes, facts.threads, default) if default is not None else None
    return score_elementwise_candidate(sizes, facts, knobs, anchor)


def elementwise_tile_lists(problem: ElementwiseProblem, knobs: Knobs) -> dict[str, list[int]]:
    """Spread the knobs over the op's loops as IREE's two tiling levels."""
    values = {name: int(value) for name, value in knobs}
    count = len(problem.loop_sizes)
    return {
        "distribution": [values[f"dist_{i}"] for i in range(count)],
        "vector_common_parallel": [values[f"vec_{i}"] for i in range(count)],
    }


def parse_default_elementwise_knobs(
    problem: ElementwiseProblem, levels: dict[str, list[int]]
) -> Knobs | None:
    """Read the compiler's default into knobs."""
    return make_knobs(read_loop_knobs(levels, problem.loop_sizes, range(len(problem.loop_sizes))))


def read_loop_knobs(
    levels: dict[str, list[int]], loop_sizes: Sequence[int], dims: Iterable[int]
) -> dict[str, int]:
    """Read the compiler's tiles of the loops `dims` as `dist_<i>` and `vec_<i>`, i counting
    them in order (a distribution tile of 0 leaves the loop whole, a vector tile of 0 is one
    element)."""
    values: dict[str, int] = {}
    for i, dim in enumerate(dims):
        values[f"dist_{i}"] = levels["distribution"][dim] or loop_sizes[dim]
        values[f"vec_{i}"] = levels["vector_common_parallel"][dim] or 1
    return values


def is_window_sum_problem(problem: ConvolutionProblem) -> bool:
    """Say whether a convolution is a 1-D window over one image loop with no channel reduction
    (a local response normalisation's sum over channels)."""
    return (
        len(problem.output_image_dims) == 1
        and len(problem.filter_dims) == 1
        and not problem.input_channel_dims
        and not problem.output_channel_dims
    )


@dataclass(frozen=True)
class CpuWindowSumSizes:
    """The window's parallel loops, as an element-wise op's, and the window's length."""

    parallel: CpuElementwiseSizes
    window: int


def compute_window_sum_sizes(problem: ConvolutionProblem) -> CpuWindowSumSizes:
    """Reduce a 1-D window sum to its parallel loops (in loop order) and its window."""
    if not is_window_sum_problem(problem):
        raise IreetuneError(f"{problem.signature}: not a 1-D window with no channel reduction")
    (window_dim,) = problem.filter_dims
    loops = tuple(size for dim, size in enumerate(problem.loop_sizes) if dim != window_dim)
    widest = max(element_bytes(t) for t in (problem.lhs_type, problem.output_type))
    return CpuWindowSumSizes(CpuElementwiseSizes(loops, widest), problem.loop_sizes[window_dim])


def window_sum_domains(sizes: CpuWindowSumSizes) -> dict[str, list[int]]:
    """Return each knob's candidate values: the element-wise ones and the window's."""
    domains = elementwise_domains(sizes.parallel)
    window = [x for x in (*_WINDOW_VECTOR_CHOICES, sizes.window) if fits_loop(sizes.window, x)]
    domains["vec_k"] = sorted(set(window))
    return domains


def build_window_sum_constraints(
    sizes: CpuWindowSumSizes,
    facts: CpuFacts,
    require_parallelism: bool,
    context: z3.Context,
    default: Knobs | None = None,
) -> tuple[dict[str, z3.ArithRef], list[z3.BoolRef]]:
    """State the space: each vector tile divides its distribution tile, fits in it (the rest
    peeled, as IREE's own 8 over a window sum's 17 columns) or covers it in one masked vector;
    the parallel vector fits the register file, and with the window tile stays below the
    stack-allocation limit; and (when required) every thread gets a tile."""
    v = {name: z3.Int(name, context) for name in (*sizes.parallel.knob_names, "vec_k")}
    constraints = domain_constraints(v, window_sum_domains(sizes), default)
    elements = z3.IntVal(1, context)
    for i in range(len(sizes.parallel.loops)):
        constraints.append(v[f"vec_{i}"] < 2 * v[f"dist_{i}"])
        elements = elements * v[f"vec_{i}"]
    register_file = facts.vector_registers * facts.native_vector_bytes
    element_size = sizes.parallel.element_bytes
    constraints += [
        elements * element_size <= register_file,
        elements * v["vec_k"] * element_size < facts.max_vector_bytes,
    ]
    if require_parallelism:
        extents = [(size, v[f"dist_{i}"]) for i, size in enumerate(sizes.parallel.loops)]
        constraints.append(enough_tiles(context, extents, facts.threads))
    return v, constraints


# Valid configurations, lazily: the default's neighbours first, then a seeded walk.
WINDOW_SUM_SPACE = NearDefaultSpace(
    build_window_sum_constraints,
    lambda sizes, facts: Neighbourhood(window_sum_domains(sizes), _MAX_NEIGHBOURS),
)


def score_window_sum_candidate(
    sizes: CpuWindowSumSizes, facts: CpuFacts, knobs: Knobs, default: Knobs | None
) -> float:
    """Score a configuration as the element-wise space scores its parallel tiles (nearness to
    the default counts every knob, the window's too)."""
    return score_elementwise_candidate(sizes.parallel, facts, knobs, default)


def window_sum_tile_lists(problem: ConvolutionProblem, knobs: Knobs) -> dict[str, list[int]]:
    """Spread the knobs over the op's loops: the parallel loops' tiles in loop order, the
    window's only in the reduction level."""
    values = {name: int(value) for name, value in knobs}
    (window_dim,) = problem.filter_dims
    count = len(problem.loop_sizes)
    distribution, parallel, reduction = [0] * count, [0] * count, [0] * count
    parallel_dims = [dim for dim in range(count) if dim != window_dim]
    for i, dim in enumerate(parallel_dims):
        distribution[dim], parallel[dim] = values[f"dist_{i}"], values[f"vec_{i}"]
    reduction[window_dim] = values["vec_k"]
    return tile_levels(distribution, parallel, reduction)


def parse_default_window_sum_knobs(
    problem: ConvolutionProblem, levels: dict[str, list[int]]
) -> Knobs | None:
    """Read the compiler's default into knobs (a distribution tile of 0 leaves the loop whole, a
    vector tile of 0 is one element; None when the window has no vector tile)."""
    (window_dim,) = problem.filter_dims
    parallel_dims = [dim for dim in range(len(problem.loop_sizes)) if dim != window_dim]
    values = read_loop_knobs(levels, problem.loop_sizes, parallel_dims)
    values["vec_k"] = levels["vector_reduction"][window_dim]
    return positive_knobs(values)


def elementwise_family(
    record: type[ElementwiseRecord],
    pipeline: str,
    compute_sizes: Callable[[ElementwiseRecord], CpuElementwiseSizes] = compute_elementwise_sizes,
) -> SizedFamily[ElementwiseRecord, CpuElementwiseSizes]:
    """Return the element-wise space's family for `record` under `pipeline` (the element-wise
    ops, and the layout changes and copies IREE tiles the same way)."""
    return SizedFamily(
        record,
        pipeline,
        compute_sizes,
        enumerate_elementwise_space,
        parse_default_elementwise_knobs,
        score_near_anchor,
        elementwise_tile_lists,
    )


class CpuElementwiseSpace(SizedCpuSpace[ElementwiseProblem, CpuElementwiseSizes]):
    """DoubleTilingExpert tiles of element-wise generics."""

    levels = ELEMENTWISE_LEVELS
    family = elementwise_family(ElementwiseProblem, ELEMENTWISE_PIPELINE)


class CpuPackSpace(SizedCpuSpace[PackProblem, CpuElementwiseSizes]):
    """DataTiling tiles of a pack's outer loops."""

    levels = ELEMENTWISE_LEVELS
    family = elementwise_family(PackProblem, PACK_PIPELINE)


class CpuUnpackSpace(SizedCpuSpace[UnpackProblem, CpuElementwiseSizes]):
    """DataTiling tiles of an unpack's loops (its destination's dimensions)."""

    levels = ELEMENTWISE_LEVELS
    family = elementwise_family(UnpackProblem, PACK_PIPELINE, compute_unpack_sizes)


class CpuBufferCopySpace(SizedCpuSpace[BufferCopyProblem, CpuElementwiseSizes]):
    """BufferOpsTileAndVectorize tiles of a copy on buffers (a pad's copy into its padded
    buffer)."""

    levels = ELEMENTWISE_LEVELS
    family = elementwise_family(BufferCopyProblem, BUFFER_COPY_PIPELINE)


class CpuWindowSumSpace(SizedCpuSpace[ConvolutionProblem, CpuWindowSumSizes]):
    """DoubleTilingExpert tiles of 1-D window sums over channels (a local response
    normalisation's)."""

    family = SizedFamily(
        ConvolutionProblem,
        ELEMENTWISE_PIPELINE,
        compute_window_sum_sizes,
        WINDOW_SUM_SPACE.enumerate,
        parse_default_window_sum_knobs,
        score_window_sum_candidate,
        window_sum_tile_lists,
    )
