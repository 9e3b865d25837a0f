"""AMD GPUs through IREE's ROCm (HIP) backend; specs apply through the tuning-spec flag."""

from __future__ import annotations

from dataclasses import replace

from ireetune.core.flag_space import FlagSpace
from ireetune.targets.gpu.extra_knobs import REORDER_WORKGROUPS, ExtraKnob
from ireetune.targets.gpu.flags import ROCM_FLAG_SPACE
from ireetune.targets.gpu.target import GpuTarget


class RocmTarget(GpuTarget):
    """`rocm:gfxNNNN`: compiled with `--iree-rocm-target`, run on `hip://N`."""

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
