"""A compile-only stand-in for the GPU targets, used only while `ireetune.targets.gpu` is absent.

TODO(gpu-target): delete this module once `ireetune/targets/gpu.py` (`make_gpu_target`) is merged;
`resolve_target` then always returns `parse_target`'s answer. The stand-in knows the flags that
select CUDA (sm_80) and ROCm (gfx942) and how each applies a spec (see REFERENCE.md: CUDA ignores
`--iree-codegen-tuning-spec-path`), but has no search space: `--configs N` finds nothing on it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from iree.compiler import ir

from ireetune.errors import IreetuneError
from ireetune.problem.contraction import ContractionProblem
from ireetune.search.candidate import Knobs
from ireetune.targets import parse_target
from ireetune.targets.base import Target


class CompileOnlyGpuTarget(Target):
    """CUDA or ROCm flags with an empty search space."""

    def __init__(self, family: str, arch: str) -> None:
        self.family = "rocm" if family == "hip" else family
        self.arch = arch or ("sm_80" if self.family == "cuda" else "gfx942")

    @property
    def name(self) -> str:
        return f"{self.family}:{self.arch}"

    @property
    def backend(self) -> str:
        return "cuda" if self.family == "cuda" else "rocm"

    @property
    def runtime_device(self) -> str:
        return "cuda" if self.family == "cuda" else "hip"

    def compile_flags(self) -> list[str]:
        if self.family == "cuda":
            return ["--iree-hal-target-device=cuda", f"--iree-cuda-target={self.arch}"]
        return ["--iree-hal-target-device=hip", f"--iree-rocm-target={self.arch}"]

    def spec_flags(self, spec_path: Path) -> list[str]:
        if self.family == "cuda":
            return [f"--iree-codegen-transform-dialect-library={spec_path}"]
        return [f"--iree-codegen-tuning-spec-path={spec_path}"]

    def generate_candidates(
        self,
        problem: ContractionProblem,
        variant_target: ir.Attribute,
        default_knobs: Knobs | None,
        seed: int,
    ) -> Iterator[Knobs]:
        return iter(())

    def order_candidates(
        self, problem: ContractionProblem, pool: list[Knobs], seed: int
    ) -> list[tuple[Knobs, float]]:
        return [(knobs, 0.0) for knobs in pool]

    def compilation_info(
        self, problem: ContractionProblem, knobs: Knobs, context: ir.Context
    ) -> str:
        raise IreetuneError(
            f"knob configurations need the GPU target module, absent in this build ({self.name})"
        )

    def parse_default_knobs(
        self, problem: ContractionProblem, root_op: ir.Operation
    ) -> Knobs | None:
        return None


def resolve_target(text: str) -> Target:
    """Return `parse_target(text)`, or the compile-only GPU stand-in when its module is missing."""
    try:
        return parse_target(text)
    except ModuleNotFoundError as error:
        if error.name != "ireetune.targets.gpu":
            raise
        family, _, arch = text.partition(":")
        return CompileOnlyGpuTarget(family.strip().lower(), arch.strip())
