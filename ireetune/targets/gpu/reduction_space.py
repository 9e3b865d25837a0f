"""Placeholder."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ireetune.problem.family import Problem
from ireetune.targets.gpu.constraints import CompilerSpace, ConstraintSpace
from ireetune.targets.gpu.template import ResolvedDict

if TYPE_CHECKING:
    from ireetune.targets.gpu.target import GpuFacts


def reduction_spaces(
    problem: Problem, facts: GpuFacts, compiler: CompilerSpace
) -> tuple[ConstraintSpace, ...]:
    return ()


def score_reduction(
    problem: Problem, space: ConstraintSpace, config: ResolvedDict, facts: GpuFacts
) -> float:
    return 0.0
