"""What CUDA and ROCm share: one search space per op family, SMT problems sampled with z3.

Before candidates are generated, the family's `GpuSpace.prepare` strips the dispatch's
configuration and compiles it to the configuration stage with
`--iree-codegen-emit-pipeline-constraints`: the compiler writes one SMT problem and knob template
per pipeline it could use for the root op (TileAndFuse and VectorDistribute for matmuls and
convolutions; two TileAndFuse variants for convolutions, direct and implicit GEMM; VectorDistribute
for attention on ROCm). Where it writes none, the family's hand-written problems in the same form
are searched: VectorDistribute attention on CUDA (`attention_space.py`), reductions and softmax
(`reduction_space.py`), f32 contractions on CUDA, which have no matrix instruction
(`simt_space.py`). Batch contractions go through a batch-free proxy (`batch_proxy.py`). Every
candidate is checked against the target's shared memory and registers (`resources.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from ireetune.core.errors import IreetuneError
from ireetune.core.target import SpaceFactory, Target, TargetTraits
from ireetune.problem.family import Problem
from ireetune.targets.gpu.archs import GpuArch
from ireetune.targets.gpu.attention_space import attention_spaces, score_attention
from ireetune.targets.gpu.batch_proxy import BatchContractionSpace
from ireetune.targets.gpu.constraints import ConstraintSpace
from ireetune.targets.gpu.extra_knobs import NO_BANK_CONFLICT_REDUCTION, ExtraKnob
from ireetune.targets.gpu.facts import GpuFacts
from ireetune.targets.gpu.reduction_space import (
    gpu_reduction_refusal,
    reduction_siblings,
    reduction_spaces,
    score_reduction,
)
from ireetune.targets.gpu.simt_space import score_simt, simt_contraction_spaces
from ireetune.targets.gpu.space import PIPELINES, GpuSettings, GpuSpace, score_gemm_view
from ireetune.targets.gpu.template import ResolvedDict


def score_contraction(
    problem: Problem, space: ConstraintSpace, config: ResolvedDict, facts: GpuFacts
) -> float:
    """Score a contraction: the SIMT space has no matrix instruction, its tiles are per thread,
    not per MMA."""
    if "thread" in config and "mma_kind" not in config:
        return score_simt(problem, space, config, facts)
    return score_gemm_view(problem, space, config, facts)


class GpuTarget(Target):
    """A GPU target; subclasses say how to compile for it, run on it and apply a spec."""

    traits = TargetTraits(
        # Attention sets a decomposition_config, a reduction the configs of its dispatch's
        # other ops.
        full_configuration_families=frozenset({"attention", "reduction"}),
    )

    def __init__(self, arch: GpuArch, pipelines: Sequence[str] = ()) -> None:
        for pipeline in pipelines:
            if pipeline not in PIPELINES:
                raise IreetuneError(
                    f"unknown pipeline '{pipeline}'; choose from {', '.join(PIPELINES)}"
                )
        self.arch = arch
        self.pipelines = tuple(pipelines) or PIPELINES

    @property
    def name(self) -> str:
        return f"{self.arch.family.value}:{self.arch.name}"

    @property
    def extra_knobs(self) -> tuple[ExtraKnob, ...]:
        """The knobs searched beside the compiler's template (targets/gpu/extra_knobs.py)."""
        return (NO_BANK_CONFLICT_REDUCTION,)

    def family_spaces(self) -> Mapping[str, SpaceFactory]:
        gpu = GpuSettings(self, self.arch, self.pipelines, self.extra_knobs, self.cache_folder)
        hand_written = replace(gpu, extra_knobs=())
        return {
            "contraction": lambda _: GpuSpace(gpu, simt_contraction_spaces, score_contraction),
            "batch_contraction": lambda _: BatchContractionSpace(gpu),
            "convolution": lambda _: GpuSpace(gpu),
            "attention": lambda _: GpuSpace(hand_written, attention_spaces, score_attention),
            "reduction": lambda _: GpuSpace(
                hand_written,
                reduction_spaces,
                score_reduction,
                reduction_siblings,
                gpu_reduction_refusal,
            ),
        }

    def unsupported_families(self) -> Mapping[str, str]:
        return {
            "elementwise": (
                "element-wise ops are not tuned on GPUs: they are bound by memory bandwidth, "
                "and no GPU space is written for them (only the CPU has one)"
            ),
            "pack": "data-tiling packs are tuned on the CPU only",
        }
