"""The llvm-cpu search space for 1-D sliding-window sums with no channel reduction: a local
response normalisation's sum of squares over neighbouring channels (DoubleTilingExpert).

IREE's convolution interface takes such a window (`(d0 + d3, d1, d2)`, a window operand that only
gives the shape), and IREE 3.13 configures it as a reduction with three tiling levels. For the
window of 5 channels over a 16x17x17 image of `LRN_MODEL` (tests) on haswell:

    distribution = [2, 1, 17, 0], vector_common_parallel = [1, 1, 8, 0],
    vector_reduction = [0, 0, 0, 8]

A 1-D sum pool (`linalg.pooling_nwc_sum`) and a 1-D depthwise convolution
(`linalg.depthwise_conv_1d_nwc_wc`) have the same form and pipeline on haswell, and take this
space too. Its parallel loops (channels, rows, columns) are tiled as an element-wise op's are, so the space
is the element-wise space (`elementwise_space.py`) over those loops, in loop order, with one more
knob:

- `vec_k`: the vector tile of the window (a divisor of it, all of it, or one masked vector over
  it).

The default's neighbours come first, then a seeded walk.
"""

from __future__ import annotations

from dataclasses import dataclass

import z3

from ireetune.core.candidate import Knobs
from ireetune.core.errors import IreetuneError
from ireetune.problem.convolution import ConvolutionProblem
from ireetune.problem.family import element_bytes
from ireetune.targets.llvm_cpu.common import (
    SizedCpuSpace,
    SizedFamily,
    enough_tiles,
    positive_knobs,
    tile_levels,
)
from ireetune.targets.llvm_cpu.elementwise_space import (
    CpuElementwiseSizes,
    elementwise_domains,
    fits_loop,
    read_loop_knobs,
    score_elementwise_candidate,
)
from ireetune.targets.llvm_cpu.facts import CpuFacts
from ireetune.targets.neighbourhood import NearDefaultSpace, Neighbourhood, domain_constraints

WINDOW_SUM_PIPELINE = "DoubleTilingExpert"
_WINDOW_VECTOR_CHOICES = (1, 2, 4, 8, 16, 32)
_MAX_NEIGHBOURS = 16


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


class CpuWindowSumSpace(SizedCpuSpace[ConvolutionProblem, CpuWindowSumSizes]):
    """DoubleTilingExpert tiles of 1-D window sums over channels (a local response
    normalisation's)."""

    family = SizedFamily(
        ConvolutionProblem,
        WINDOW_SUM_PIPELINE,
        compute_window_sum_sizes,
        WINDOW_SUM_SPACE.enumerate,
        parse_default_window_sum_knobs,
        score_window_sum_candidate,
        window_sum_tile_lists,
    )
