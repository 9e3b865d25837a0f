"""The SPIR-V space of 2-D convolutions (NHWC layout), written as z3 constraints.

IREE 3.13 generalizes a convolution before configuring it on SPIR-V, so its own convolution
heuristic never applies and the default is the naive BaseDistribute (one output element per
thread). The space is BaseVectorize, in the four levels IREE's convolution config uses:

    tile_sizes = [[1, wg_oh, wg_ow, wg_oc, 0, 0, 0],      workgroup
                  [1, th_oh, th_ow, th_oc, 0, 0, 0],      thread
                  [0, 0, 0, 0, 1, 1, tile_ic],            reduction (filter window by 1)
                  [0, 1, 0, 0, 0, 0, 0]]                  window: one output row at a time

with the workgroup `wg_x` = `wg_oc / th_oc` (x along output channels), `wg_y` = `wg_ow / th_ow`,
`wg_z` = `wg_oh / th_oh`. The constraints: tiles divide their loops, workgroup dimensions are
powers of two within the target's per-dimension and total limits and hold whole subgroups, and a
thread's block of accumulators stays small. Convolutions whose output channels are not the
innermost parallel loop (NCHW), depthwise ones and those without two output image loops are not
searched.
"""

from __future__ import annotations

from dataclasses import dataclass

import z3

from ireetune.core.candidate import Knobs
from ireetune.core.errors import IreetuneError
from ireetune.problem.convolution import ConvolutionProblem
from ireetune.targets.vulkan.config import SpirvConfig, SpirvPipeline
from ireetune.targets.vulkan.facts import VulkanFacts
from ireetune.targets.vulkan.matmul_space import (
    MAX_WORKGROUP_TILE,
    Space,
    dividing,
    subgroup_choices,
)
from ireetune.targets.z3_enumerate import divisors, one_of

_POWERS_OF_TWO = tuple(1 << shift for shift in range(11))
_CHANNEL_TILES = (1, 2, 4, 8)
_WIDTH_TILES = (1, 2, 4)
_HEIGHT_TILES = (1, 2)
_IC_TILES = (1, 2, 4, 8, 16)
_MAX_THREAD_BLOCK = 32
KNOB_NAMES = (
    "wg_oh", "wg_ow", "wg_oc", "th_oh", "th_ow", "th_oc", "tile_ic", "wg_x", "wg_y", "wg_z",
    "subgroup_size",
)  # fmt: skip


@dataclass(frozen=True)
class ConvSizes:
    """The loops the convolution space tiles: output height, width, channels, input channels."""

    oh: int
    ow: int
    oc: int
    ic: int


def compute_conv_sizes(problem: ConvolutionProblem) -> ConvSizes:
    """Reduce a convolution to its sizes, or raise an IreetuneError for a layout not searched."""
    if problem.depth_dims:
        raise IreetuneError("depthwise convolutions have no SPIR-V space yet")
    if len(problem.output_image_dims) != 2 or not problem.input_channel_dims:
        raise IreetuneError("only 2-D convolutions with input channels have a SPIR-V space")
    last_parallel = max((*problem.output_image_dims, *problem.output_channel_dims))
    if problem.output_channel_dims[-1] != last_parallel:
        raise IreetuneError(
            "the SPIR-V space needs the output channels innermost (NHWC); this convolution is "
            f"{problem.op_name}"
        )
    loops = problem.loop_sizes
    oh_dim, ow_dim = problem.output_image_dims
    return ConvSizes(
        oh=loops[oh_dim],
        ow=loops[ow_dim],
        oc=loops[problem.output_channel_dims[-1]],
        ic=loops[problem.input_channel_dims[-1]],
    )


def build_conv_space(
    sizes: ConvSizes, facts: VulkanFacts, whole_subgroups: bool, context: z3.Context
) -> Space:
    """Build the BaseVectorize convolution space (see the module docstring)."""
    v = {name: z3.Int(name, context) for name in KNOB_NAMES}
    threads = v["wg_x"] * v["wg_y"] * v["wg_z"]
    limits = facts.max_workgroup_sizes
    constraints = [
        one_of(v["wg_oh"], divisors(sizes.oh, 64)),
        one_of(v["wg_ow"], divisors(sizes.ow, 64)),
        one_of(v["wg_oc"], divisors(sizes.oc, MAX_WORKGROUP_TILE)),
        one_of(v["th_oh"], dividing(sizes.oh, _HEIGHT_TILES)),
        one_of(v["th_ow"], dividing(sizes.ow, _WIDTH_TILES)),
        one_of(v["th_oc"], dividing(sizes.oc, _CHANNEL_TILES)),
        one_of(v["tile_ic"], dividing(sizes.ic, _IC_TILES)),
        one_of(v["subgroup_size"], subgroup_choices(facts, optional=True)),
        one_of(v["wg_x"], [s for s in _POWERS_OF_TWO if s <= limits[0]]),
        one_of(v["wg_y"], [s for s in _POWERS_OF_TWO if s <= limits[1]]),
        one_of(v["wg_z"], [s for s in _POWERS_OF_TWO if s <= limits[2]]),
        v["wg_oc"] == v["wg_x"] * v["th_oc"],
        v["wg_ow"] == v["wg_y"] * v["th_ow"],
        v["wg_oh"] == v["wg_z"] * v["th_oh"],
        v["th_oh"] * v["th_ow"] * v["th_oc"] <= _MAX_THREAD_BLOCK,
        threads <= facts.max_threads,
    ]
    if whole_subgroups:
        subgroup = z3.If(v["subgroup_size"] == 0, min(facts.subgroup_sizes), v["subgroup_size"])
        constraints.append(threads % subgroup == 0)
    return v, constraints


def convolution_config(problem: ConvolutionProblem, knobs: Knobs) -> SpirvConfig:
    """Spread a convolution candidate's knobs over the op's loops as BaseVectorize's levels."""
    values = {name: int(value) for name, value in knobs if name != "pipeline"}
    loops = len(problem.loop_sizes)
    oh_dim, ow_dim = problem.output_image_dims
    oc_dim, ic_dim = problem.output_channel_dims[-1], problem.input_channel_dims[-1]
    outer = {*problem.batch_dims, *problem.output_channel_dims[:-1]}

    def parallel_level(oh: int, ow: int, oc: int) -> tuple[int, ...]:
        level = [1 if d in outer else 0 for d in range(loops)]
        level[oh_dim], level[ow_dim], level[oc_dim] = oh, ow, oc
        return tuple(level)

    reduction = [
        1 if d in (*problem.filter_dims, *problem.input_channel_dims) else 0 for d in range(loops)
    ]
    reduction[ic_dim] = values["tile_ic"]
    window = [0] * loops
    window[oh_dim] = 1
    return SpirvConfig(
        SpirvPipeline.BASE,
        (
            parallel_level(values["wg_oh"], values["wg_ow"], values["wg_oc"]),
            parallel_level(values["th_oh"], values["th_ow"], values["th_oc"]),
            tuple(reduction),
            tuple(window),
        ),
        (values["wg_x"], values["wg_y"], values["wg_z"]),
        values["subgroup_size"],
    )


def convolution_knobs(problem: ConvolutionProblem, config: SpirvConfig) -> dict[str, int] | None:
    """Read a BaseVectorize convolution configuration back into knobs (None for another form)."""
    if config.pipeline is not SpirvPipeline.BASE or len(config.tile_sizes) < 3:
        return None
    loops = len(problem.loop_sizes)
    wg, thread, reduction = (
        list(level) + [0] * (loops - len(level)) for level in config.tile_sizes[:3]
    )
    oh_dim, ow_dim = problem.output_image_dims
    oc_dim, ic_dim = problem.output_channel_dims[-1], problem.input_channel_dims[-1]
    x, y, z = config.workgroup_size
    return {
        "wg_oh": wg[oh_dim], "wg_ow": wg[ow_dim], "wg_oc": wg[oc_dim], "th_oh": thread[oh_dim],
        "th_ow": thread[ow_dim], "th_oc": thread[oc_dim], "tile_ic": reduction[ic_dim],
        "wg_x": x, "wg_y": y, "wg_z": z, "subgroup_size": config.subgroup_size,
    }  # fmt: skip
