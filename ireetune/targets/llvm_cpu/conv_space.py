"""The llvm-cpu search space for 2-D convolutions (ConvTileAndDecomposeExpert), as z3 constraints.

IREE lowers a CPU convolution by tiling, then decomposing the 2-D window into 1-D convolutions,
which needs vector tiles of 1 on the output height and both filter loops. The knobs are:

- `dist_f`, `dist_oh`, `dist_ow`: the distribution tile over output channels, rows and columns;
- `vec_f`, `vec_ow`: the vector tile over output channels and columns (the register block);
- `vec_c`: the vector tile of the input-channel reduction.

Batch loops get tile 1; depthwise convolutions (a depth loop) are not covered.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import z3

from ireetune.core.candidate import Knobs
from ireetune.core.errors import IreetuneError
from ireetune.problem.convolution import ConvolutionProblem
from ireetune.problem.family import Problem, element_bytes
from ireetune.targets.llvm_cpu.common import (
    SizedCpuSpace,
    SizedFamily,
    score_near_default,
    tile_multiples,
    window_levels,
)
from ireetune.targets.llvm_cpu.facts import CpuFacts, thread_imbalance
from ireetune.targets.llvm_cpu.sizes import Tile
from ireetune.targets.neighbourhood import (
    NearDefaultSpace,
    Neighbourhood,
    domain_constraints,
)

CONV_KNOB_NAMES = ("dist_f", "dist_oh", "dist_ow", "vec_f", "vec_ow", "vec_c")
CONV_PIPELINE = "ConvTileAndDecomposeExpert"
_VEC_F_CHOICES = (1, 2, 4, 8, 16, 32, 48, 64)
_VEC_OW_CHOICES = (1, 2, 3, 4, 6, 7, 8, 12, 14, 16)
_VEC_C_CHOICES = (1, 2, 4, 8, 16, 32)
_C_PANEL = 64
# The default's neighbours tried first; enough for every single-knob step and the nearest pairs.
_MAX_NEIGHBOURS = 24


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
    pooling and depthwise windows, which `window_space` tunes, have no channel reduction.
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
    """Read the compiler's default convolution config back into knobs (None if it has no form)."""
    try:
        oh_dim, ow_dim = problem.output_image_dims
        f_dim, c_dim = problem.output_channel_dims[0], problem.input_channel_dims[0]
        values = {
            "dist_f": levels["distribution"][f_dim],
            "dist_oh": levels["distribution"][oh_dim],
            "dist_ow": levels["distribution"][ow_dim],
            "vec_f": levels["vector_common_parallel"][f_dim],
            "vec_ow": levels["vector_common_parallel"][ow_dim],
            "vec_c": levels["vector_reduction"][c_dim],
        }
    except (ValueError, IndexError, KeyError):
        return None
    return tuple(sorted(values.items()))


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
