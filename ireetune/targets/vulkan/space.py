"""The Vulkan family spaces: one z3 space per SPIR-V pipeline, sampled in turn.

Each family names its pipelines' spaces (`matmul_space.py`, the convolutions' below); a candidate
is one solution plus the pipeline it came from:

    (("pipeline", "BaseVectorize"), ("subgroup_size", 0), ("th_m", 4), ..., ("wg_y", 4))

The spaces take turns (targets/z3_enumerate.py draws each lazily with a seed), so a pool of any
size covers every pipeline; each space first asks for whole subgroups and falls back to a space
without that for a problem too small for it.

Convolutions (NHWC): IREE 3.13 generalizes a convolution before configuring it on SPIR-V, so its
own convolution heuristic never applies and the default is the naive BaseDistribute (one output
element per thread). Their space is BaseVectorize, in the four levels IREE's convolution config
uses:

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

import abc
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial

import z3
from iree.compiler import ir

from ireetune.core.candidate import Knobs, make_knobs, order_in_turns
from ireetune.core.errors import IreetuneError
from ireetune.core.target import FamilySpace, OpConfiguration, SpaceRequest
from ireetune.problem.contraction import ContractionProblem
from ireetune.problem.convolution import ConvolutionProblem
from ireetune.problem.family import Problem, narrow
from ireetune.targets.vulkan.config import (
    SpirvConfig,
    SpirvPipeline,
    read_spirv_config,
    render_compilation_info,
)
from ireetune.targets.vulkan.facts import VulkanFacts, read_vulkan_facts
from ireetune.targets.vulkan.matmul_space import (
    MAX_THREAD_BLOCK,
    MAX_WORKGROUP_TILE,
    POWERS_OF_TWO,
    Space,
    build_base_space,
    build_cooperative_space,
    build_promote_space,
    compute_matmul_sizes,
    contraction_config,
    contraction_knobs,
    dividing,
    subgroup_choices,
)
from ireetune.targets.z3_enumerate import divisors, enumerate_space, one_of, parallel_first

PIPELINE_KNOB = "pipeline"
# Builds one pipeline's space: (whole subgroups required, z3 context) -> variables, constraints.
PipelineSpace = Callable[[bool, z3.Context], Space]
_CHANNEL_TILES = (1, 2, 4, 8)
_WIDTH_TILES = (1, 2, 4)
_HEIGHT_TILES = (1, 2)
_IC_TILES = (1, 2, 4, 8, 16)
CONV_KNOB_NAMES = (
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
        kind = "grouped" if problem.input_channel_dims else "depthwise"
        raise IreetuneError(f"{kind} convolutions have no SPIR-V space yet")
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
    v = {name: z3.Int(name, context) for name in CONV_KNOB_NAMES}
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
        one_of(v["wg_x"], [s for s in POWERS_OF_TWO if s <= limits[0]]),
        one_of(v["wg_y"], [s for s in POWERS_OF_TWO if s <= limits[1]]),
        one_of(v["wg_z"], [s for s in POWERS_OF_TWO if s <= limits[2]]),
        v["wg_oc"] == v["wg_x"] * v["th_oc"],
        v["wg_ow"] == v["wg_y"] * v["th_ow"],
        v["wg_oh"] == v["wg_z"] * v["th_oh"],
        v["th_oh"] * v["th_ow"] * v["th_oc"] <= MAX_THREAD_BLOCK,
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


class VulkanSpace(FamilySpace):
    """One family's SPIR-V spaces, restricted to the pipelines the user allows."""

    def __init__(self, pipelines: Sequence[SpirvPipeline]) -> None:
        self.pipelines = tuple(pipelines)
        self._facts: VulkanFacts | None = None

    @abc.abstractmethod
    def pipeline_spaces(
        self, problem: Problem, facts: VulkanFacts
    ) -> list[tuple[SpirvPipeline, PipelineSpace]]:
        """Name the spaces of a problem, one per pipeline that applies to it on this target."""

    @abc.abstractmethod
    def render(self, problem: Problem, pipeline: SpirvPipeline, knobs: Knobs) -> SpirvConfig:
        """Spread a candidate's knobs over the op's loops."""

    @abc.abstractmethod
    def read_knobs(self, problem: Problem, config: SpirvConfig) -> dict[str, int] | None:
        """Read a configuration back into knobs (None when it has no form in the space)."""

    def facts(self, variant_target: ir.Attribute) -> VulkanFacts:
        """Return (and remember) the limits of the dispatch's executable target."""
        if self._facts is None:
            self._facts = read_vulkan_facts(variant_target)
        return self._facts

    def generate(self, request: SpaceRequest) -> Iterator[Knobs]:
        problem = request.problem
        facts = self.facts(request.variant_target)
        default = dict(request.default_knobs or ())
        streams = []
        for pipeline, build in self.pipeline_spaces(problem, facts):
            if pipeline not in self.pipelines:
                continue
            excluded = None
            if default.get(PIPELINE_KNOB) == pipeline.value:
                excluded = make_knobs({k: v for k, v in default.items() if k != PIPELINE_KNOB})
            streams.append(
                (pipeline, enumerate_space(parallel_first(build), request.seed, excluded))
            )
        return _take_turns(streams)

    def order(self, request: SpaceRequest, pool: list[Knobs]) -> list[tuple[Knobs, float]]:
        """Rank each pipeline's candidates by `score_config`, then take the pipelines in turn
        (scores compare within one pipeline, not across)."""
        problem = request.problem
        return order_in_turns(
            pool,
            lambda knobs: str(dict(knobs)[PIPELINE_KNOB]),
            lambda knobs: score_config(problem, self._config_of(problem, knobs)),
            request.seed,
        )

    def _config_of(self, problem: Problem, knobs: Knobs) -> SpirvConfig:
        pipeline = SpirvPipeline(str(dict(knobs)[PIPELINE_KNOB]))
        return self.render(problem, pipeline, knobs)

    def configuration(self, problem: Problem, knobs: Knobs, context: ir.Context) -> OpConfiguration:
        return OpConfiguration(render_compilation_info(self._config_of(problem, knobs), context))

    def parse_default_knobs(self, problem: Problem, root_op: ir.Operation) -> Knobs | None:
        config = read_spirv_config(root_op)
        if config is None:
            return None
        values = self.read_knobs(problem, config)
        if values is None:
            return None
        return make_knobs({**values, PIPELINE_KNOB: config.pipeline.value})


def _take_turns(streams: list[tuple[SpirvPipeline, Iterator[Knobs]]]) -> Iterator[Knobs]:
    """Yield one solution of each pipeline's space in turn, tagged with its pipeline."""
    live = list(streams)
    while live:
        for entry in list(live):
            pipeline, stream = entry
            values = next(stream, None)
            if values is None:
                live.remove(entry)
                continue
            yield make_knobs({**dict(values), PIPELINE_KNOB: pipeline.value})


def score_config(problem: Problem, config: SpirvConfig) -> float:
    """Score a configuration, higher first: 64-256 threads, 8-32 outputs per thread, enough
    workgroups to fill a device, and a workgroup tile that reuses what it loads."""
    workgroup_tile = config.tile_sizes[0]
    tiles = [t for t in workgroup_tile if t > 0]
    workgroups = math.prod(
        math.ceil(size / tile)
        for size, tile in zip(problem.loop_sizes, workgroup_tile, strict=False)
        if tile > 0
    )
    threads = math.prod(config.workgroup_size)
    outputs = math.prod(tiles) / max(threads, 1)
    thread_fit = -abs(math.log2(threads / 128)) / 4
    block_fit = -abs(math.log2(max(outputs, 1) / 16)) / 4
    fill = -max(0.0, 1.0 - workgroups / 32)
    square = sorted(tiles)[-2:] if len(tiles) >= 2 else [1, 1]
    reuse = min(square[0] * square[1] / (square[0] + square[1]) / 32, 1.5)
    return thread_fit + block_fit + fill + reuse


class VulkanContractionSpace(VulkanSpace):
    """Matmuls and batch matmuls: BaseVectorize always; MatmulPromoteVectorize for single M, N
    and K loops of one input type; CooperativeMatrixVectorize where the target has a matrix of
    the problem's types."""

    def pipeline_spaces(
        self, problem: Problem, facts: VulkanFacts
    ) -> list[tuple[SpirvPipeline, PipelineSpace]]:
        sizes = compute_matmul_sizes(narrow(problem, ContractionProblem))
        spaces: list[tuple[SpirvPipeline, PipelineSpace]] = [
            (SpirvPipeline.BASE, partial(build_base_space, sizes, facts))
        ]
        if sizes.single_loops and sizes.input_bits in (16, 32):
            spaces.append((SpirvPipeline.PROMOTE, partial(build_promote_space, sizes, facts)))
        if sizes.single_loops and facts.shapes_for(sizes.input_type, sizes.accumulator_type):
            spaces.append(
                (SpirvPipeline.COOPERATIVE, partial(build_cooperative_space, sizes, facts))
            )
        return spaces

    def render(self, problem: Problem, pipeline: SpirvPipeline, knobs: Knobs) -> SpirvConfig:
        return contraction_config(narrow(problem, ContractionProblem), pipeline, knobs)

    def read_knobs(self, problem: Problem, config: SpirvConfig) -> dict[str, int] | None:
        return contraction_knobs(narrow(problem, ContractionProblem), config)


class VulkanConvolutionSpace(VulkanSpace):
    """2-D NHWC convolutions: BaseVectorize (`build_conv_space`)."""

    def refusal(self, problem: Problem) -> str | None:
        try:
            compute_conv_sizes(narrow(problem, ConvolutionProblem))
        except IreetuneError as error:
            return str(error)
        if SpirvPipeline.BASE not in self.pipelines:
            return "convolutions are searched with BaseVectorize only"
        return None

    def pipeline_spaces(
        self, problem: Problem, facts: VulkanFacts
    ) -> list[tuple[SpirvPipeline, PipelineSpace]]:
        sizes = compute_conv_sizes(narrow(problem, ConvolutionProblem))
        return [(SpirvPipeline.BASE, partial(build_conv_space, sizes, facts))]

    def render(self, problem: Problem, pipeline: SpirvPipeline, knobs: Knobs) -> SpirvConfig:
        assert pipeline is SpirvPipeline.BASE, "convolutions have a BaseVectorize space only"
        return convolution_config(narrow(problem, ConvolutionProblem), knobs)

    def read_knobs(self, problem: Problem, config: SpirvConfig) -> dict[str, int] | None:
        return convolution_knobs(narrow(problem, ConvolutionProblem), config)
