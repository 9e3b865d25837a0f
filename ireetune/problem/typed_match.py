"""Matchers that name an op and check its operands' static types, for ops no match op describes
by its sizes and a DAG matcher holding a copy of does not match in a model (`linalg.unpack`,
`iree_codegen.inner_tiled`):

    transform.match.operation_name %op ["linalg.unpack"] : !transform.any_op
    %source = transform.get_operand %op[0] : (!transform.any_op) -> !transform.any_value
    transform.iree.match.cast_compatible_type %source = tensor<8x16x8x8xf32> : !transform.any_value
    ...one type check per operand

A family of this kind says which op it names and how its loop sizes follow from its operands'
shapes; the pattern's body is the op's name alone, which is how it claims its patterns.
"""

from __future__ import annotations

from typing import ClassVar

from iree.compiler import ir
from iree.compiler.dialects import transform

from ireetune.problem.family import MatchOpSpec, MatchPattern, Problem, narrow
from ireetune.problem.generic import OPERATION_NAME_MATCH, TYPE_MATCH, GenericOpFamily

TYPED_OPERANDS_MATCH = MatchOpSpec(TYPE_MATCH, (), ("loops",))


def _operand_position(value: ir.Value) -> int | None:
    """Return the one position a `transform.get_operand` takes (None for anything else)."""
    owner = value.owner
    if isinstance(owner, ir.Block):  # An argument of the sequence.
        return None
    if owner.name != "transform.get_operand" or "is_inverted" in owner.attributes:
        return None
    positions = list(ir.DenseI64ArrayAttr(owner.attributes["raw_position_list"]))
    return positions[0] if len(positions) == 1 else None


class TypedOperandsFamily(GenericOpFamily):
    """A family whose matcher names its op and checks each operand's static type."""

    match_op = TYPED_OPERANDS_MATCH
    # How many operands the matcher checks (all of the op's).
    operand_count: ClassVar[int]

    def loops_of(self, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
        """Return the loop sizes that operands of these static shapes give the op."""
        raise NotImplementedError

    def expected_pattern(self, problem: Problem) -> MatchPattern:
        record = narrow(problem, self.record)
        return MatchPattern(
            TYPE_MATCH, record.operand_tensor_types, (), (record.loop_sizes,), (self.root_name,)
        )

    def build_matcher(self, problem: Problem, op_handle: ir.Value) -> None:
        """Emit the op's name check and one type check per operand."""
        transform.MatchOperationNameOp(op_handle, [self.root_name])
        value_type = ir.Type.parse("!transform.any_value")
        for position, type_text in enumerate(narrow(problem, self.record).operand_tensor_types):
            operand = transform.GetOperandOp(value_type, op_handle, [position]).result
            ir.Operation.create(
                TYPE_MATCH,
                operands=[operand],
                attributes={"target_type": ir.TypeAttr.get(ir.Type.parse(type_text))},
            )

    def claims(self, pattern: MatchPattern) -> bool:
        return pattern.body == (self.root_name,)

    def read_pattern(self, match_op: ir.Operation, body: list[ir.Operation]) -> MatchPattern | None:
        """Read a matcher that names this family's op alone and checks every operand's static
        type; None for any other use of a type check (a contraction's operand, say)."""
        names = [
            [ir.StringAttr(a).value for a in ir.ArrayAttr(op.attributes["op_names"])]
            for op in body
            if op.name == OPERATION_NAME_MATCH
        ]
        if names != [[self.root_name]]:
            return None
        types: dict[int, ir.Type] = {}
        for op in body:
            if op.name == TYPE_MATCH:
                position = _operand_position(op.operands[0])
                if position is None or position in types:
                    return None
                types[position] = ir.TypeAttr(op.attributes["target_type"]).value
        positions = list(range(self.operand_count))
        if sorted(types) != positions:
            return None
        try:
            shaped = [ir.RankedTensorType(types[position]) for position in positions]
        except ValueError:
            return None
        if not all(t.has_static_shape for t in shaped):
            return None
        loops = self.loops_of([tuple(t.shape) for t in shaped])
        return MatchPattern(
            TYPE_MATCH,
            tuple(str(types[position]) for position in positions),
            (),
            (loops,),
            (self.root_name,),
        )
