"""The sizes a CPU contraction space reasons about, and the bytes of an element type."""

from __future__ import annotations

from dataclasses import dataclass

from ireetune.problem.contraction import ContractionProblem

_BYTES = {"f64": 8, "f32": 4, "i32": 4, "f16": 2, "bf16": 2, "i16": 2, "i8": 1}


def element_bytes(type_name: str) -> int:
    """Return the size in bytes of an element type name such as `f16`."""
    return _BYTES.get(type_name, 4)


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
