"""Targets: what each IREE backend needs to compile, apply a spec and run a dispatch.

Generic code talks to a `Target` (core/target.py) and the `FamilySpace` it makes for a
problem; knowledge of one backend lives in its own folder (`llvm_cpu/`, `gpu/` for CUDA and
ROCm, `vulkan/`). Beside them (the cache of drawn solutions is `database/space_cache.py`): the
z3 enumeration the hand-written spaces share, near the default first (`z3_enumerate.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ireetune.core.errors import IreetuneError

# For types only: the flag spaces under this package are read on hosts without the compiler
# (a run folder's flags are checked there, flows/handoff/folder_flags.py), and a target needs it.
if TYPE_CHECKING:
    from ireetune.core.target import Target


def parse_target(text: str, pipelines: Sequence[str] = ()) -> Target:
    """Turn a `--target` value (`cpu`, `cpu:znver4`, `cuda:sm_80`, `rocm:gfx942`,
    `vulkan`, `vulkan:valhall4`) into a Target.

    `pipelines` restricts a GPU target's search to those codegen pipelines.
    """
    family, _, arch = text.partition(":")
    family = family.strip().lower()
    if family in ("cpu", "llvm-cpu", "llvmcpu", "host"):
        if pipelines:
            raise IreetuneError(
                "--pipeline applies to GPU targets; the cpu target has one pipeline"
            )
        from ireetune.targets.llvm_cpu.target import LlvmCpuTarget

        return LlvmCpuTarget(cpu=arch or "host")
    if family in ("cuda", "rocm", "hip"):
        from ireetune.targets.gpu import make_gpu_target

        return make_gpu_target(family, arch, pipelines)
    if family == "vulkan":
        from ireetune.targets.vulkan import make_vulkan_target

        return make_vulkan_target(arch, pipelines)
    raise IreetuneError(
        f"unknown target '{text}'; known targets: cpu, cuda:<sm_NN>, rocm:<gfxNNN>, vulkan[:NAME]"
    )


__all__ = ["parse_target"]
