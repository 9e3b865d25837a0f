"""Knobs the compiler's template leaves fixed, searched beside the template's own.

IREE 3.13's knob template (`--iree-codegen-emit-pipeline-constraints`) fixes some choices that
can change the generated code: `no_reduce_shared_memory_bank_conflicts` is always false and no
workgroup reordering is set. A knob is searched only where it was proved to land: the same
configuration compiled with and without it gives different binaries, and the option appears in
the `--iree-hal-dump-executable-configurations-to` dump (tests/targets/gpu/test_gpu_extra_knobs.py, for
sm_80 and gfx942, TileAndFuse and VectorDistribute). What did not land is in docs/gpu.md.

A knob's first value is the compiler's default (the option left alone), so the default
configuration is expressed with every extra knob at that value. Values are drawn uniformly and
reproducibly for each solution of the template's space (`choose_extra_values`); in a pipeline
where a knob does not land it stays at its default.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ireetune.targets.gpu.template import PIPELINE_OPTIONS_KEY, OpaqueAttr, ResolvedDict

ALL_PIPELINES = ("TileAndFuse", "VectorDistribute")


@dataclass(frozen=True)
class ExtraKnob:
    """One knob outside the template: its name among a candidate's knobs, its values (the first
    is the compiler's default), the pipeline option a value other than the default sets (and to
    what), and the pipelines where it is searched."""

    name: str
    values: tuple[int, ...]
    option: str
    setting: bool | OpaqueAttr
    pipelines: tuple[str, ...] = ALL_PIPELINES

    def apply(self, config: ResolvedDict, value: int) -> None:
        """Change a filled template as the knob's value says."""
        if value:
            options = config.setdefault(PIPELINE_OPTIONS_KEY, {})
            assert isinstance(options, dict), "pipeline options are a dictionary"
            options[self.option] = self.setting


# Shared memory is padded to avoid bank conflicts unless this is set: padding costs memory (and
# occupancy) that some tiles need more than conflict-free access. Lands on sm_80 and gfx942 in
# both pipelines (for configurations that promote operands to shared memory).
NO_BANK_CONFLICT_REDUCTION = ExtraKnob(
    "no_bank_conflict_reduction", (0, 1), "no_reduce_shared_memory_bank_conflicts", True
)
# Workgroups launched in transposed order: changes which tiles share the L2 at a time. Lands only
# on ROCm's VectorDistribute in IREE 3.13 (sm_80 and ROCm's TileAndFuse give identical binaries).
REORDER_WORKGROUPS = ExtraKnob(
    "reorder_workgroups",
    (0, 1),
    "reorder_workgroups_strategy",
    OpaqueAttr("#iree_gpu.reorder_workgroups_strategy<Transpose>"),
    ("VectorDistribute",),
)


def choose_extra_values(
    knobs: Sequence[ExtraKnob], solution: Mapping[str, int], pipeline: str, seed: int
) -> dict[str, int]:
    """Draw each extra knob's value for one solution of the template, reproducibly."""
    rng = random.Random(f"{seed}:{sorted(solution.items())}")
    return {
        knob.name: rng.choice(knob.values) if pipeline in knob.pipelines else knob.values[0]
        for knob in knobs
    }


def default_extra_values(knobs: Sequence[ExtraKnob]) -> dict[str, int]:
    """Return every extra knob at the compiler's default."""
    return {knob.name: knob.values[0] for knob in knobs}


def apply_extra_values(
    config: ResolvedDict, knobs: Sequence[ExtraKnob], values: Mapping[str, int]
) -> None:
    """Change a filled template as the extra knobs' values say."""
    for knob in knobs:
        knob.apply(config, values.get(knob.name, knob.values[0]))
