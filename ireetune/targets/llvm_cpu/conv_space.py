"""The llvm-cpu search space for 2-D convolutions (ConvTileAndDecomposeExpert), as z3 constraints.

IREE lowers a CPU convolution by tiling, then decomposing the 2-D window into 1-D convolutions,
which needs vector tiles of 1 on the output height and both filter loops. The knobs are:

- `dist_f`, `dist_oh`, `dist_ow`: the distribution tile over output channels, rows and columns;
- `vec_f`, `vec_ow`: the vector tile over output channels and columns (the register block);
- `vec_c`: the vector tile of the input-channel reduction.

Batch loops get tile 1; grouped convolutions and depthwise ones with a channel multiplier are not
covered.

The second space, of the same pipeline, is for 2-D windows without a channel reduction: pooling
(max, sum, average) and depthwise convolutions. They reach the convolution family (IREE's convolution interface takes them), but have no input
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
from collections.abc import Mapping
from dataclasses import dataclass

import z3

from ireetune.core.candidate import Knobs
from ireetune.core.errors import IreetuneError
from ireetune.problem.convolution import GROUPED_CONVOLUTION, ConvolutionProblem
from ireetune.problem.family import Problem, element_bytes
from ireetune.targets.llvm_cpu.common import (
    CpuFacts,
    SizedCpuSpace,
    SizedFamily,
    nearness_penalty,
    positive_knobs,
    score_near_default,
    thread_imbalance,
    tile_levels,
    tile_multiples,
)
from ireetune.targets.llvm_cpu.space import Tile
from ireetune.targets.z3_enumerate import (
    NearDefaultSpace,
    Neighbourhood,
    divisors,
    domain_constraints,
)

CONV_KNOB_NAMES = ("dist_f", "dist_oh", "dist_ow", "vec_f", "vec_ow", "vec_c")
WINDOW_KNOB_NAMES = ("dist_c", "dist_oh", "dist_ow", "vec_c", "vec_ow", "vec_kw")
CONV_PIPELINE = "ConvTileAndDecomposeExpert"
_VEC_F_CHOICES = (1, 2, 4, 8, 16, 32, 48, 64)
_VEC_OW_CHOICES = (1, 2, 3, 4, 6, 7, 8, 12, 14, 16)
_VEC_C_CHOICES = (1, 2, 4, 8, 16, 32)
_WINDOW_VEC_OW_CHOICES = (1, 2, 4, 7, 8, 14, 16)
_C_PANEL = 64
# The default's neighbours tried first; enough for every single-knob step and the nearest pairs.
_MAX_NEIGHBOURS = 24
_MAX_WINDOW_NEIGHBOURS = 16


@dataclass(frozen=True)
class CpuConvSizes:
    """The extents a CPU convolution config tiles, plus what its working set depends on."""

    batch: int
    f: int
    oh: int
    ow: int
    c: int
    kh: int
    kw: int
    stride_h: int
    stride_w: int
    dilation_h: int
    dilation_w: int
    input_bytes: int
    accumulator_bytes: int


def describe_conv_refusal(problem: ConvolutionProblem) -> str | None:
    """Say what a convolution-interface op is when this space cannot tune it (None: it can).

    IREE's convolution interface takes more than convolutions: a local response normalisation's
    sum over neighbouring channels is a 1-D window with no weights (`(d0 + d3, d1, d2)`), and
    pooling and depthwise windows, which `CpuWindowSpace` tunes, have no channel reduction.
    """
    images, window = len(problem.output_image_dims), len(problem.filter_dims)
    has_channels = bool(problem.input_channel_dims or problem.output_channel_dims)
    if not has_channels and images == 1 and window == 1:
        return (
            f"a 1-D sliding-window {'sum' if not problem.depth_dims else 'filter'} of "
            f"{problem.loop_sizes[problem.filter_dims[0]]} (a local response normalisation's, "
            "over channels, say) is not tuned on the CPU"
        )
    if not has_channels:
        return (
            f"a {images}-D window with a {window}-D kernel and no channels is not tuned on the CPU"
        )
    if images != 2 or window != 2:
        return f"a {images}-D convolution (not 2-D) is not tuned on the CPU"
    if problem.depth_dims and problem.input_channel_dims:
        groups = math.prod(problem.loop_sizes[d] for d in problem.depth_dims)
        return f"{GROUPED_CONVOLUTION} ({groups} groups) is not tuned on the CPU"
    if problem.depth_dims:
        return "a depthwise convolution with a channel multiplier is not tuned on the CPU"
    if len(problem.output_channel_dims) != 1 or len(problem.input_channel_dims) != 1:
        return "a grouped convolution (several channel loops) is not tuned on the CPU"
    return None


def compute_conv_sizes(problem: ConvolutionProblem) -> CpuConvSizes:
    """Reduce a 2-D convolution to the sizes the space reasons about."""
    refusal = describe_conv_refusal(problem)
    if refusal is not None:
        raise IreetuneError(f"{problem.signature}: {refusal}")
    sizes = problem.loop_sizes
    batch = math.prod(sizes[d] for d in problem.batch_dims)
    strides = (*problem.strides, 1, 1)[:2]
    dilations = (*problem.dilations, 1, 1)[:2]
    return CpuConvSizes(
        batch=batch,
        f=sizes[problem.output_channel_dims[0]],
        oh=sizes[problem.output_image_dims[0]],
        ow=sizes[problem.output_image_dims[1]],
        c=sizes[problem.input_channel_dims[0]],
        kh=sizes[problem.filter_dims[0]],
        kw=sizes[problem.filter_dims[1]],
        stride_h=strides[0],
        stride_w=strides[1],
        dilation_h=dilations[0],
        dilation_w=dilations[1],
        input_bytes=max(element_bytes(problem.lhs_type), element_bytes(problem.rhs_type)),
        accumulator_bytes=element_bytes(problem.output_type),
    )


def conv_domains(sizes: CpuConvSizes) -> dict[str, list[int]]:
    """Return each knob's candidate values (before the constraints that tie knobs together)."""
    vec_f_values = [x for x in _VEC_F_CHOICES if x <= sizes.f]
    vec_ow_values = [x for x in _VEC_OW_CHOICES if x <= sizes.ow]
    return {
        "vec_f": vec_f_values,
        "vec_ow": vec_ow_values,
        "vec_c": [x for x in _VEC_C_CHOICES if x <= sizes.c and sizes.c % x == 0],
        "dist_f": tile_multiples(sizes.f, vec_f_values, 512),
        "dist_oh": tile_multiples(sizes.oh, [1], 256),
        "dist_ow": tile_multiples(sizes.ow, vec_ow_values, 256),
    }


def conv_working_set(sizes: CpuConvSizes, dist_f: Tile, dist_oh: Tile, dist_ow: Tile) -> Tile:
    """Count what a distribution tile keeps in L2: its input window and filter over a panel of
    input channels, and its accumulators."""
    panel = min(sizes.c, _C_PANEL)
    input_rows = dist_oh * sizes.stride_h + (sizes.kh - 1) * sizes.dilation_h
    input_cols = dist_ow * sizes.stride_w + (sizes.kw - 1) * sizes.dilation_w
    return (
        input_rows * input_cols * panel * sizes.input_bytes
        + dist_f * panel * sizes.kh * sizes.kw * sizes.input_bytes
        + dist_f * dist_oh * dist_ow * sizes.accumulator_bytes
    )


def count_conv_tiles(sizes: CpuConvSizes, dist_f: int, dist_oh: int, dist_ow: int) -> int:
    """Count a convolution's distribution tiles, over its batch too."""
    return (
        math.ceil(sizes.f / dist_f)
        * math.ceil(sizes.oh / dist_oh)
        * math.ceil(sizes.ow / dist_ow)
        * sizes.batch
    )


def build_conv_constraints(
    sizes: CpuConvSizes,
    facts: CpuFacts,
    require_parallelism: bool,
    context: z3.Context,
    default: Knobs | None = None,
) -> tuple[dict[str, z3.ArithRef], list[z3.BoolRef]]:
    """State the space: register block fits, vectors under the stack limit, tiles nest and
    divide the problem (or cover it whole), and, for the walk (no `default` known), the
    heuristic rules: a distribution tile's working set fits L2 and (when required) there are at
    least as many tiles as threads. The default's neighbours need only compile: without the
    heuristic rules it is the set of configurations that compile."""
    lanes = max(1, facts.native_vector_bytes // sizes.accumulator_bytes)
    variables = {name: z3.Int(name, context) for name in CONV_KNOB_NAMES}
    v = variables
    constraints = domain_constraints(v, conv_domains(sizes), default)
    constraints += [
        v["dist_f"] % v["vec_f"] == 0,
        v["dist_ow"] % v["vec_ow"] == 0,
    ]
    accumulator_registers = (v["vec_f"] * v["vec_ow"] + lanes - 1) / lanes
    constraints.append(accumulator_registers + 2 <= facts.vector_registers)
    constraints.append(
        v["vec_f"] * v["vec_ow"] * v["vec_c"] * sizes.accumulator_bytes < facts.max_vector_bytes
    )
    working_set = conv_working_set(sizes, v["dist_f"], v["dist_oh"], v["dist_ow"])
    if default is not None:
        return variables, constraints
    constraints.append(working_set <= facts.l2_bytes)
    if require_parallelism:
        tiles = (
            ((sizes.f + v["dist_f"] - 1) / v["dist_f"])
            * ((sizes.oh + v["dist_oh"] - 1) / v["dist_oh"])
            * ((sizes.ow + v["dist_ow"] - 1) / v["dist_ow"])
            * sizes.batch
        )
        constraints.append(tiles >= facts.threads)
    return variables, constraints


# Valid convolution configurations, lazily: the default's neighbours first (when the default is
# known), then a seeded walk.
CONV_SPACE = NearDefaultSpace(
    build_conv_constraints,
    lambda sizes, facts: Neighbourhood(conv_domains(sizes), _MAX_NEIGHBOURS),
)
enumerate_conv_space = CONV_SPACE.enumerate


def score_conv_candidate(sizes: CpuConvSizes, facts: CpuFacts, knobs: Knobs) -> float:
    """Score a convolution configuration; higher is more promising.

    Unlike a matmul's, a decomposed convolution's best register block is small: on the 2-core
    znver4 machine, blocks of 4-8 vector registers (vec_f x vec_ow of 32-128 f32 elements) with a
    channel tile of 4-16 measured fastest, and blocks of 28 registers ran 1.7x slower than
    IREE's default; 64-element blocks with vec_c below 4 were 4-10x slower. The score prefers that
    region, power-of-two channel tiles, little padding and balanced threads.
    """
    values = {name: int(value) for name, value in knobs}
    lanes = max(1, facts.native_vector_bytes // sizes.accumulator_bytes)
    block_registers = values["vec_f"] * values["vec_ow"] / lanes
    block_fit = -abs(math.log2(max(block_registers, 0.25) / 4.0))
    channel_fit = -abs(math.log2(values["vec_c"] / 8.0))
    pow2_f = 1.0 if values["vec_f"] & (values["vec_f"] - 1) == 0 and values["vec_f"] >= 4 else 0.0
    padded = (
        math.ceil(sizes.f / values["dist_f"])
        * values["dist_f"]
        * math.ceil(sizes.ow / values["dist_ow"])
        * values["dist_ow"]
    )
    padding_waste = padded / (sizes.f * sizes.ow) - 1.0
    tiles = count_conv_tiles(sizes, values["dist_f"], values["dist_oh"], values["dist_ow"])
    imbalance = thread_imbalance(tiles, facts.threads)
    tiny_c = 1.0 if values["vec_c"] < 4 else 0.0
    return (
        1.5 * block_fit
        + 1.0 * channel_fit
        - 2.0 * tiny_c
        + 0.5 * pow2_f
        - 2.0 * padding_waste
        - 1.0 * imbalance
    )


def conv_tile_lists(problem: ConvolutionProblem, knobs: Knobs) -> dict[str, list[int]]:
    """Spread the knobs over the convolution's loops as the three CPU tiling levels."""
    values = {name: int(value) for name, value in knobs}
    f_dim = problem.output_channel_dims[0]
    levels = window_levels(problem, values, (f_dim, values["dist_f"], values["vec_f"]))
    for dim in problem.filter_dims:
        levels["vector_reduction"][dim] = 1
    levels["vector_reduction"][problem.input_channel_dims[0]] = values["vec_c"]
    return levels


def parse_default_conv_knobs(
    problem: ConvolutionProblem, levels: dict[str, list[int]]
) -> Knobs | None:
    """Read the compiler's default convolution config back into knobs: a distribution tile of 0
    (the loop untiled) is the whole loop; None when it has no form (a vector tile of 0)."""
    try:
        oh_dim, ow_dim = problem.output_image_dims
        f_dim, c_dim = problem.output_channel_dims[0], problem.input_channel_dims[0]
        distribution, sizes = levels["distribution"], problem.loop_sizes
        values = {
            "dist_f": distribution[f_dim] or sizes[f_dim],
            "dist_oh": distribution[oh_dim] or sizes[oh_dim],
            "dist_ow": distribution[ow_dim] or sizes[ow_dim],
            "vec_f": levels["vector_common_parallel"][f_dim],
            "vec_ow": levels["vector_common_parallel"][ow_dim],
            "vec_c": levels["vector_reduction"][c_dim],
        }
    except (ValueError, IndexError, KeyError):
        return None
    return positive_knobs(values)


def window_levels(
    problem: ConvolutionProblem, values: Mapping[str, int], channels: tuple[int, int, int]
) -> dict[str, list[int]]:
    """Start the three tile lists of a ConvTileAndDecomposeExpert config (a convolution or a
    window): batch loops one at a time, the output rows tiled by `dist_oh` one row per vector
    step, the output columns by `dist_ow` and `vec_ow`, and the channel loop `channels` (its
    dimension, distribution tile and vector tile); every reduction tile left 0 for the caller."""
    count = len(problem.loop_sizes)
    distribution, parallel, reduction = [0] * count, [0] * count, [0] * count
    for dim in problem.batch_dims:
        distribution[dim], parallel[dim] = 1, 1
    channel, channel_distribution, channel_vector = channels
    oh_dim, ow_dim = problem.output_image_dims
    distribution[channel], parallel[channel] = channel_distribution, channel_vector
    distribution[oh_dim], parallel[oh_dim] = values["dist_oh"], 1
    distribution[ow_dim], parallel[ow_dim] = values["dist_ow"], values["vec_ow"]
    return tile_levels(distribution, parallel, reduction)


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
        "vec_ow": [x for x in _WINDOW_VEC_OW_CHOICES if x <= sizes.ow],
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
    lambda sizes, facts: Neighbourhood(window_domains(sizes), _MAX_WINDOW_NEIGHBOURS),
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


class CpuConvolutionSpace(SizedCpuSpace[ConvolutionProblem, CpuConvSizes]):
    """ConvTileAndDecomposeExpert tiles of 2-D convolutions."""

    family = SizedFamily(
        ConvolutionProblem,
        CONV_PIPELINE,
        compute_conv_sizes,
        enumerate_conv_space,
        parse_default_conv_knobs,
        score_near_default(score_conv_candidate),
        conv_tile_lists,
    )

    def stored_knob_names(self, problem: Problem) -> frozenset[str] | None:
        return frozenset(CONV_KNOB_NAMES)


class CpuWindowSpace(SizedCpuSpace[ConvolutionProblem, CpuWindowSizes]):
    """ConvTileAndDecomposeExpert tiles of pooling windows and depthwise convolutions."""

    family = SizedFamily(
        ConvolutionProblem,
        CONV_PIPELINE,
        compute_window_sizes,
        enumerate_window_space,
        parse_default_window_knobs,
        score_window_candidate,
        window_tile_lists,
    )
