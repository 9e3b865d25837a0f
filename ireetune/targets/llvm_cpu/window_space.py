"""The llvm-cpu search space for 2-D windows without a channel reduction: pooling (max, sum,
average) and depthwise convolutions (ConvTileAndDecomposeExpert).

They reach the convolution family (IREE's convolution interface takes them), but have no input
channel to reduce: every output channel reads its own image channel, through a window of
weights (depthwise) or of nothing at all (pooling, whose second operand is a shape-only
`tensor<3x3xf32>`). IREE's default for a 3x3 stride-2 max pool of 1x16x18x18 f32 on haswell:

    distribution = [0, 2, 8, 8, 0, 0], vector_common_parallel = [1, 2, 1, 8, 0, 0],
    vector_reduction = [0, 0, 0, 0, 1, 3]

(loops n, c, oh, ow, kh, kw). The knobs:

- `dist_c`, `dist_oh`, `dist_ow`: the distribution tile over channels, output rows and columns;
- `vec_c`, `vec_ow`: the vector tile over channels and output columns (the decomposition into
  1-D windows needs vector tile 1 on the output rows and the window rows);
- `vec_kw`: the vector tile of the window's columns, 1 or all of them.

Other batch loops get tile 1. The default's neighbours come first, then a seeded walk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import z3

from ireetune.core.candidate import Knobs
from ireetune.core.errors import IreetuneError
from ireetune.problem.convolution import ConvolutionProblem
from ireetune.problem.family import element_bytes
from ireetune.targets.llvm_cpu.common import (
    SizedCpuSpace,
    SizedFamily,
    nearness_penalty,
    positive_knobs,
    window_levels,
)
from ireetune.targets.llvm_cpu.facts import CpuFacts, thread_imbalance
from ireetune.targets.neighbourhood import (
    NearDefaultSpace,
    Neighbourhood,
    domain_constraints,
)
from ireetune.targets.z3_enumerate import divisors

WINDOW_PIPELINE = "ConvTileAndDecomposeExpert"
WINDOW_KNOB_NAMES = ("dist_c", "dist_oh", "dist_ow", "vec_c", "vec_ow", "vec_kw")
_VEC_C_CHOICES = (1, 2, 4, 8, 16, 32)
_VEC_OW_CHOICES = (1, 2, 4, 7, 8, 14, 16)
_MAX_NEIGHBOURS = 16


def is_window_problem(problem: ConvolutionProblem) -> bool:
    """Say whether a convolution is a 2-D window with no channel reduction (pooling,
    depthwise): two output image loops, two window loops, no input or output channel loop."""
    return (
        len(problem.output_image_dims) == 2
        and len(problem.filter_dims) == 2
        and not problem.input_channel_dims
        and not problem.output_channel_dims
        and len(problem.depth_dims) <= 1
        and bool(problem.depth_dims or problem.batch_dims)
    )


def channel_dim(problem: ConvolutionProblem) -> int:
    """Return the loop of the window's channels: the depth loop of a depthwise convolution, the
    innermost batch-like loop of a pooling window (IREE's convolution interface calls a pooled
    channel a batch loop: it indexes the image and the output, not the window)."""
    return problem.depth_dims[0] if problem.depth_dims else problem.batch_dims[-1]


@dataclass(frozen=True)
class CpuWindowSizes:
    """The extents a window config tiles."""

    c: int
    oh: int
    ow: int
    kw: int
    outer: int
    element_bytes: int


def compute_window_sizes(problem: ConvolutionProblem) -> CpuWindowSizes:
    """Reduce a pooling or depthwise window to the sizes the space reasons about."""
    if not is_window_problem(problem):
        raise IreetuneError(f"{problem.signature}: not a 2-D pooling or depthwise window")
    sizes = problem.loop_sizes
    channel = channel_dim(problem)
    outer = math.prod(sizes[d] for d in problem.batch_dims if d != channel)
    oh_dim, ow_dim = problem.output_image_dims
    return CpuWindowSizes(
        c=sizes[channel],
        oh=sizes[oh_dim],
        ow=sizes[ow_dim],
        kw=sizes[problem.filter_dims[1]],
        outer=outer,
        element_bytes=max(element_bytes(problem.lhs_type), element_bytes(problem.output_type)),
    )


def window_domains(sizes: CpuWindowSizes) -> dict[str, list[int]]:
    """Return each knob's candidate values."""
    return {
        "dist_c": divisors(sizes.c, 512),
        "dist_oh": divisors(sizes.oh, 64),
        "dist_ow": divisors(sizes.ow, 128),
        "vec_c": [x for x in _VEC_C_CHOICES if x <= sizes.c and sizes.c % x == 0],
        "vec_ow": [x for x in _VEC_OW_CHOICES if x <= sizes.ow],
        "vec_kw": sorted({1, sizes.kw}),
    }


def build_window_constraints(
    sizes: CpuWindowSizes,
    facts: CpuFacts,
    require_parallelism: bool,
    context: z3.Context,
    default: Knobs | None = None,
) -> tuple[dict[str, z3.ArithRef], list[z3.BoolRef]]:
    """State the space: vector tiles nest in the distribution tiles, the register block and
    the stack-allocation limit hold, and (when required) every thread gets a tile."""
    lanes = max(1, facts.native_vector_bytes // sizes.element_bytes)
    v = {name: z3.Int(name, context) for name in WINDOW_KNOB_NAMES}
    constraints = domain_constraints(v, window_domains(sizes), default)
    constraints += [
        v["dist_c"] % v["vec_c"] == 0,
        z3.Or(v["dist_ow"] % v["vec_ow"] == 0, v["vec_ow"] >= v["dist_ow"]),
        (v["vec_c"] * v["vec_ow"] + lanes - 1) / lanes + 2 <= facts.vector_registers,
        v["vec_c"] * v["vec_ow"] * v["vec_kw"] * sizes.element_bytes < facts.max_vector_bytes,
    ]
    if require_parallelism:
        tiles = (
            (sizes.c / v["dist_c"]) * (sizes.oh / v["dist_oh"]) * (sizes.ow / v["dist_ow"])
        ) * sizes.outer
        constraints.append(tiles >= facts.threads)
    return v, constraints


# Valid window configurations, lazily: the default's neighbours first, then a seeded walk.
WINDOW_SPACE = NearDefaultSpace(
    build_window_constraints,
    lambda sizes, facts: Neighbourhood(window_domains(sizes), _MAX_NEIGHBOURS),
)
enumerate_window_space = WINDOW_SPACE.enumerate


def score_window_candidate(
    sizes: CpuWindowSizes, facts: CpuFacts, knobs: Knobs, default: Knobs | None
) -> float:
    """Score a configuration; higher is more promising: whole vectors along the channels, a
    register block of a few vectors, balanced threads, and nearness to the default."""
    values = {name: int(value) for name, value in knobs}
    lanes = max(1, facts.native_vector_bytes // sizes.element_bytes)
    whole_vectors = 1.0 if values["vec_c"] % lanes == 0 or values["vec_c"] == sizes.c else 0.0
    registers = values["vec_c"] * values["vec_ow"] / lanes
    register_fit = -abs(math.log2(max(registers, 0.25) / 4.0))
    tiles = (
        math.ceil(sizes.c / values["dist_c"])
        * math.ceil(sizes.oh / values["dist_oh"])
        * math.ceil(sizes.ow / values["dist_ow"])
        * sizes.outer
    )
    imbalance = thread_imbalance(tiles, facts.threads)
    score = 1.0 * whole_vectors + 0.5 * register_fit - 1.0 * imbalance
    return score - nearness_penalty(knobs, default)


def window_tile_lists(problem: ConvolutionProblem, knobs: Knobs) -> dict[str, list[int]]:
    """Spread the knobs over the window's loops as the three CPU tiling levels."""
    values = {name: int(value) for name, value in knobs}
    channels = (channel_dim(problem), values["dist_c"], values["vec_c"])
    levels = window_levels(problem, values, channels)
    kh_dim, kw_dim = problem.filter_dims
    levels["vector_reduction"][kh_dim], levels["vector_reduction"][kw_dim] = 1, values["vec_kw"]
    return levels


def parse_default_window_knobs(
    problem: ConvolutionProblem, levels: dict[str, list[int]]
) -> Knobs | None:
    """Read the compiler's default into knobs (None when it is not of this space's form)."""
    channel = channel_dim(problem)
    oh_dim, ow_dim = problem.output_image_dims
    kh_dim, kw_dim = problem.filter_dims
    distribution, parallel = levels["distribution"], levels["vector_common_parallel"]
    if parallel[oh_dim] != 1 or levels["vector_reduction"][kh_dim] != 1:
        return None
    sizes = problem.loop_sizes
    values = {
        # A distribution tile of 0 leaves the loop whole.
        "dist_c": distribution[channel] or sizes[channel],
        "dist_oh": distribution[oh_dim] or sizes[oh_dim],
        "dist_ow": distribution[ow_dim] or sizes[ow_dim],
        "vec_c": parallel[channel],
        "vec_ow": parallel[ow_dim],
        "vec_kw": levels["vector_reduction"][kw_dim],
    }
    return positive_knobs(values)


class CpuWindowSpace(SizedCpuSpace[ConvolutionProblem, CpuWindowSizes]):
    """ConvTileAndDecomposeExpert tiles of pooling windows and depthwise convolutions."""

    family = SizedFamily(
        ConvolutionProblem,
        WINDOW_PIPELINE,
        compute_window_sizes,
        enumerate_window_space,
        parse_default_window_knobs,
        score_window_candidate,
        window_tile_lists,
    )
