"""The llvm-cpu target: one hand-written search space per op family (no compiler emitter exists
for the CPU pipelines)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from ireetune.problem.family import Problem
from ireetune.targets.base import SpaceFactory, Target
from ireetune.targets.llvm_cpu.conv_space import CpuConvolutionSpace
from ireetune.targets.llvm_cpu.reduction_space import CpuReductionSpace
from ireetune.targets.llvm_cpu.space import CpuContractionSpace

# IREE's llvm-cpu pipeline runs this after the tuning spec: it gives a convolution whose unit
# batch global optimisation folded away (every batch-1 convolution of a model) its batch loop
# back, and drops the attributes of the op it replaces, the spec's compilation_info among them.
INSERT_BATCH_DIM_PASS = "iree-codegen-insert-batch-dim-for-batchless-conv"


class LlvmCpuTarget(Target):
    """IREE's llvm-cpu backend, run on the `local-task` device."""

    def __init__(self, cpu: str = "host", threads: int | None = None) -> None:
        self.cpu = cpu
        self.threads = threads or len(os.sched_getaffinity(0))

    @property
    def name(self) -> str:
        return "cpu" if self.cpu == "host" else f"cpu:{self.cpu}"

    @property
    def backend(self) -> str:
        return "llvm-cpu"

    @property
    def runtime_device(self) -> str:
        return "local-task"

    @property
    def decides_at_model_level(self) -> bool:
        # Measured here: a 1024^3 f32 matmul's dispatch benchmark took 40 ms on uninitialised
        # buffers and 23 ms on real inputs, and a 1.68x dispatch-level win was 1.085x on real data.
        return True

    def compile_flags(self) -> list[str]:
        return [
            "--iree-hal-target-device=local",
            "--iree-hal-local-target-device-backends=llvm-cpu",
            f"--iree-llvmcpu-target-cpu={self.cpu}",
        ]

    def spec_flags(self, spec_path: Path) -> list[str]:
        return [f"--iree-codegen-tuning-spec-path={spec_path}"]

    def spec_prologue(self, problem: Problem) -> tuple[str, ...]:
        # The dispatch benchmark shows the convolution with its batch loop (the pass ran before
        # the dump); a model, and the reference program, reach the spec without it.
        return (INSERT_BATCH_DIM_PASS,) if problem.family == "convolution" else ()

    def needs_more_than_compilation_info(self, problem: Problem) -> bool:
        # A reduction sets the configs of its dispatch's other ops too.
        return problem.family == "reduction"

    @property
    def renders_without_dispatch(self) -> bool:
        return True

    def family_spaces(self) -> Mapping[str, SpaceFactory]:
        return {
            "contraction": lambda: CpuContractionSpace(self.threads),
            "batch_contraction": lambda: CpuContractionSpace(self.threads),
            "convolution": lambda: CpuConvolutionSpace(self.threads),
            "reduction": lambda: CpuReductionSpace(self.threads),
        }

    def unsupported_families(self) -> Mapping[str, str]:
        return {
            "attention": (
                "IREE 3.13 lowers CPU attention with its own tile-and-vectorize pipeline, which "
                "has no hand-written space here yet"
            ),
        }
