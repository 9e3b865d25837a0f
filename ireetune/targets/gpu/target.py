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
from ireetune.core.flag_space import FlagSpace
from ireetune.core.target import SpaceFactory, Target, TargetTraits
from ireetune.problem.family import Problem
from ireetune.targets.gpu.archs import GpuArch
from ireetune.targets.gpu.attention_space import attention_spaces, score_attention
from ireetune.targets.gpu.batch_proxy import BatchContractionSpace
from ireetune.targets.gpu.constraints import ConstraintSpace
from ireetune.targets.gpu.extra_knobs import (
    NO_BANK_CONFLICT_REDUCTION,
    REORDER_WORKGROUPS,
    ExtraKnob,
)
from ireetune.targets.gpu.facts import GpuFacts
from ireetune.targets.gpu.flags import CUDA_FLAG_SPACE, ROCM_FLAG_SPACE
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
            "unpack": "data-tiling unpacks are tuned on the CPU only",
            "buffer_copy": "copies on buffers (a pad's copy into its padded buffer) are tuned on the CPU only",
            "inner_tiled": (
                "data-tiled matmuls on inner tiles (iree_codegen.inner_tiled) are tuned on the CPU "
                "only"
            ),
        }


class CudaTarget(GpuTarget):
    """`cuda:sm_NN`: compiled with `--iree-cuda-target`, run on `cuda://N`.

    IREE 3.13's CUDA backend ignores `--iree-codegen-tuning-spec-path` (every candidate compiled
    that way is byte-identical to the default). The same tuning spec applies through
    `--iree-codegen-transform-dialect-library`, whose default entry point is `__kernel_config`,
    the entry point of every tuning spec; so candidates are compiled that way, and the spec
    written for the user is still a standard tuning spec (see docs/gpu.md).
    """

    backend = "cuda"
    runtime_device = "cuda://0"
    traits = replace(GpuTarget.traits, spec_flag="--iree-codegen-transform-dialect-library")

    def target_flags(self) -> list[str]:
        return ["--iree-hal-target-device=cuda", f"--iree-cuda-target={self.arch.name}"]

    def flag_space(self) -> FlagSpace:
        return CUDA_FLAG_SPACE


class RocmTarget(GpuTarget):
    """`rocm:gfxNNNN`: AMD GPUs through IREE's ROCm (HIP) backend, compiled with
    `--iree-rocm-target`, run on `hip://N`; specs apply through the tuning-spec flag."""

    backend = "rocm"
    runtime_device = "hip://0"
    # IREE ships default tuning specs for ROCm only; `--iree-codegen-enable-default-tuning-specs`
    # links them after the user's.
    traits = replace(GpuTarget.traits, has_default_specs=True)

    @property
    def extra_knobs(self) -> tuple[ExtraKnob, ...]:
        # Workgroup reordering lands on ROCm's VectorDistribute only (extra_knobs.py).
        return (*super().extra_knobs, REORDER_WORKGROUPS)

    def target_flags(self) -> list[str]:
        return ["--iree-hal-target-device=hip", f"--iree-rocm-target={self.arch.name}"]

    def flag_space(self) -> FlagSpace:
        return ROCM_FLAG_SPACE
