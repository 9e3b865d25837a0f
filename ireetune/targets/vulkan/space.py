"""The Vulkan family spaces: one z3 space per SPIR-V pipeline, sampled in turn.

Each family names its pipelines' spaces (`matmul_space.py`, `conv_space.py`); a candidate is one
solution plus the pipeline it came from:

    (("pipeline", "BaseVectorize"), ("subgroup_size", 0), ("th_m", 4), ..., ("wg_y", 4))

The spaces take turns (targets/z3_enumerate.py draws each lazily with a seed), so a pool of any
size covers every pipeline; each space first asks for whole subgroups and falls back to a space
without that for a problem too small for it.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable, Iterator, Sequence
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
from ireetune.targets.vulkan.conv_space import (
    build_conv_space,
    compute_conv_sizes,
    convolution_config,
    convolution_knobs,
)
from ireetune.targets.vulkan.facts import VulkanFacts, read_vulkan_facts
from ireetune.targets.vulkan.matmul_space import (
    Space,
    build_base_space,
    build_cooperative_space,
    build_promote_space,
    compute_matmul_sizes,
    contraction_config,
    contraction_knobs,
)
from ireetune.targets.z3_enumerate import enumerate_space, parallel_first

PIPELINE_KNOB = "pipeline"
# Builds one pipeline's space: (whole subgroups required, z3 context) -> variables, constraints.
PipelineSpace = Callable[[bool, z3.Context], Space]


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
    """2-D NHWC convolutions: BaseVectorize (`conv_space.py`)."""

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
