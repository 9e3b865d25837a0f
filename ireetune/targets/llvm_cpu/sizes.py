"""The sizes a CPU contraction space reasons about."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypeVar

import z3

from ireetune.problem.contraction import ContractionProblem
from ireetune.problem.family import element_bytes

# K is streamed through the cache in panels; this bounds the panel a distribution tile holds.
K_PANEL = 256
# A tile size: a number, or a z3 term in a space's constraints.
Tile = TypeVar("Tile", int, z3.ArithRef)


@dataclass(frozen=True)
class CpuProblemSizes:
    """The sizes the CPU space tiles: innermost M, N, K and the product of batch and outer loops."""

    m: int
    n: int
    k: int
    outer_parallel: int
    input_bytes: int
    accumulator_bytes: int


def compute_problem_sizes(problem: ContractionProblem) -> CpuProblemSizes:
    """Reduce a contraction to the sizes the CPU space reasons about."""
    outer = 1
    for size in (*problem.batch_sizes, *problem.m_sizes[:-1], *problem.n_sizes[:-1]):
        outer *= size
    return CpuProblemSizes(
        m=problem.m_sizes[-1],
        n=problem.n_sizes[-1],
        k=problem.k_sizes[-1],
        outer_parallel=outer,
        input_bytes=max(element_bytes(problem.lhs_type), element_bytes(problem.rhs_type)),
        accumulator_bytes=element_bytes(problem.output_type),
    )


def distribution_bytes(sizes: CpuProblemSizes, dist_m: Tile, dist_n: Tile) -> Tile:
    """Count what a distribution tile keeps in L2: its operand panels and its accumulators."""
    panel = min(sizes.k, K_PANEL)
    return (dist_m + dist_n) * panel * sizes.input_bytes + (
        dist_m * dist_n * sizes.accumulator_bytes
    )


def count_tiles(sizes: CpuProblemSizes, dist_m: int, dist_n: int) -> int:
    """Count a contraction's distribution tiles, over its outer loops too."""
    return math.ceil(sizes.m / dist_m) * math.ceil(sizes.n / dist_n) * sizes.outer_parallel
