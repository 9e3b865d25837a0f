"""The sizes a CPU contraction space reasons about."""

from __future__ import annotations

from dataclasses import dataclass

from ireetune.problem.contraction import ContractionProblem
from ireetune.problem.family import element_bytes


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
