"""NVIDIA GPUs through IREE's CUDA backend.

IREE 3.13's CUDA backend ignores `--iree-codegen-tuning-spec-path` (every candidate compiled that
way is byte-identical to the default). The same tuning spec applies through
`--iree-codegen-transform-dialect-library`, whose default entry point is `__kernel_config`, the
entry point of every tuning spec; so candidates are compiled that way, and the spec written for
the user is still a standard tuning spec (see docs/gpu.md).
"""

from __future__ import annotations

from dataclasses import replace

from ireetune.core.flag_space import FlagSpace
from ireetune.targets.gpu.flags import CUDA_FLAG_SPACE
from ireetune.targets.gpu.target import GpuTarget


class CudaTarget(GpuTarget):
    """`cuda:sm_NN`: compiled with `--iree-cuda-target`, run on `cuda://N`."""

    backend = "cuda"
    runtime_device = "cuda://0"
    traits = replace(GpuTarget.traits, spec_flag="--iree-codegen-transform-dialect-library")

    def target_flags(self) -> list[str]:
        return ["--iree-hal-target-device=cuda", f"--iree-cuda-target={self.arch.name}"]

    def flag_space(self) -> FlagSpace:
        return CUDA_FLAG_SPACE
