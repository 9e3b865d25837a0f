"""What the contraction and convolution families share: ops of two inputs and one output that
are, loop by loop, a matrix multiplication (a convolution through im2col).

Their records hold the same operands (types, maps and shapes) and add their loops by role; their
families differ only in how they recognise and parse a root op and in the pattern their matcher
requires, so each is a `MatmulFamily` declared with those three functions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Generic, TypeVar

from iree.compiler import ir

from ireetune.problem.family import (
    MatchOpSpec,
    MatchPattern,
    MatmulRecord,
    MatmulSizes,
    OpFamily,
    Problem,
    ReferenceInputs,
    element_type_name,
    matmul_reference_inputs,
    narrow,
)


@dataclass(frozen=True)
class MatmulProblem(MatmulSizes):
    """The op and operands of a matmul-like problem (its family's record adds its loops by role).

    Loop dimensions are numbered as in the op's indexing maps; `loop_sizes[d]` is the static
    extent of loop d.
    """

    # The reference program (the op alone as `@main`) takes the spec's config like the dispatch does.
    reference_carries_config: ClassVar[bool] = True

    op_name: str
    loop_sizes: tuple[int, ...]
    batch_dims: tuple[int, ...]
    lhs_type: str
    rhs_type: str
    output_type: str
    indexing_maps: tuple[str, str, str]
    lhs_shape: tuple[int, ...]
    rhs_shape: tuple[int, ...]
    output_shape: tuple[int, ...]


MatmulProblemT = TypeVar("MatmulProblemT", bound=MatmulProblem)


def build_matmul_problem(
    record: type[MatmulProblemT],
    root_op: ir.Operation,
    affine_maps: list[ir.AffineMap],
    shapes: list[tuple[int, ...]],
    loop_sizes: tuple[int, ...],
    roles: dict[str, tuple[int, ...]],
) -> MatmulProblemT:
    """Build the record of a root op of two inputs and one output from its maps, its operands'
    shapes, its loop sizes and its loops by role (`batch_dims` and the record's own roles)."""
    lhs, rhs, output = root_op.operands
    return record(
        op_name=root_op.name,
        loop_sizes=loop_sizes,
        lhs_type=element_type_name(lhs.type),
        rhs_type=element_type_name(rhs.type),
        output_type=element_type_name(output.type),
        indexing_maps=tuple(str(m) for m in affine_maps),  # type: ignore[arg-type]
        lhs_shape=shapes[0],
        rhs_shape=shapes[1],
        output_shape=shapes[2],
        **roles,
    )


RecordT = TypeVar("RecordT", bound=MatmulRecord)


@dataclass(frozen=True)
class MatmulFamily(OpFamily, Generic[RecordT]):
    """A family of matmul-like ops, declared by how it recognises and parses a root op and the
    pattern its matcher requires: its reference program takes both operands, and each result
    sums the products of the K loops."""

    name: str
    match_op: MatchOpSpec
    record: type[RecordT]
    recognise: Callable[[ir.Operation], bool]
    parse_record: Callable[[ir.Operation], RecordT]
    build_pattern: Callable[[RecordT], MatchPattern]

    def recognises(self, root_op: ir.Operation) -> bool:
        return self.recognise(root_op)

    def parse(self, root_op: ir.Operation) -> Problem:
        return self.parse_record(root_op)

    def expected_pattern(self, problem: Problem) -> MatchPattern:
        return self.build_pattern(narrow(problem, self.record))

    def reference_inputs(self, problem: Problem) -> ReferenceInputs:
        return matmul_reference_inputs(narrow(problem, self.record))
