"""What the reduction and element-wise families share: one-result `linalg.generic` ops.

Both families' records hold the same description of a generic (its loop sizes, operands, maps,
body and source) and differ only in what they add to it (a reduction's loop roles). No match op
of IREE's transform extensions describes a generic by its sizes, so both match with a
`cast_compatible_dag_from_root` holding a copy of the op, and read such a matcher back by parsing
that copy; the two families are told apart by their iterator types.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import ClassVar, TypeVar

from iree.compiler import ir
from iree.compiler.dialects import func, transform

from ireetune.core.errors import IreetuneError
from ireetune.problem.family import (
    MatchOpSpec,
    MatchPattern,
    OpFamily,
    Problem,
    ReferenceInputs,
    bind_loop_sizes,
    clone_with_captured_constants,
    drop_config_attributes,
    element_type_name,
    narrow,
    static_shape,
    tensor_type_text,
)

DAG_MATCH = "transform.iree.match.cast_compatible_dag_from_root"
OPERATION_NAME_MATCH = "transform.match.operation_name"
STRUCTURED_MATCH = "transform.match.structured"
TYPE_MATCH = "transform.iree.match.cast_compatible_type"
GENERIC_MATCH = MatchOpSpec(DAG_MATCH, (), ("loops",))
# Body ops that move values around rather than compute.
NEUTRAL_BODY_OPS = frozenset({"linalg.yield", "linalg.index"})


@dataclass(frozen=True)
class GenericOpProblem:
    """A one-result generic's loops, operands and body (its family's record adds to these)."""

    KIND: ClassVar[str]
    reference_carries_config: ClassVar[bool] = True

    kind: str
    op_name: str
    loop_sizes: tuple[int, ...]
    input_types: tuple[str, ...]
    input_shapes: tuple[tuple[int, ...], ...]
    output_type: str
    output_shape: tuple[int, ...]
    indexing_maps: tuple[str, ...]
    body: tuple[str, ...]
    # The op alone, its operands the arguments of `func.func @reduction` (what the matcher copies).
    source: str

    @property
    def family(self) -> str:
        """Name the family: a generic family's records are its one kind."""
        return self.KIND

    @property
    def iterator_types(self) -> tuple[str, ...]:
        """Name each loop's iterator type (all parallel unless the record says otherwise)."""
        return ("parallel",) * len(self.loop_sizes)

    @property
    def operand_tensor_types(self) -> tuple[str, ...]:
        """Return the operands' tensor types, the result's last (a DAG matcher's block types)."""
        return tuple(
            tensor_type_text(shape, element)
            for shape, element in zip(
                (*self.input_shapes, self.output_shape),
                (*self.input_types, self.output_type),
                strict=True,
            )
        )

    @property
    def flops(self) -> int:
        """Count one operation per body op and loop iteration."""
        work = [op for op in self.body if op not in NEUTRAL_BODY_OPS]
        return math.prod(self.loop_sizes) * max(1, len(work))


GenericRecord = TypeVar("GenericRecord", bound=GenericOpProblem)


def iterator_names(root_op: ir.Operation) -> list[str]:
    """Read a generic's `#linalg.iterator_type<parallel>` attributes as `parallel` and
    `reduction`."""
    return [
        "reduction" if "reduction" in str(attribute) else "parallel"
        for attribute in ir.ArrayAttr(root_op.attributes["iterator_types"])
    ]


def parse_generic(
    root_op: ir.Operation, record: type[GenericRecord], what: str, **loop_roles: tuple[int, ...]
) -> GenericRecord:
    """Read a generic the family's parser has checked into its record: loop sizes bound from
    the static operand shapes, the operands' types, maps, body and source, and `loop_roles`
    (the fields the record adds)."""
    operands = list(root_op.operands)
    maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(root_op.attributes["indexing_maps"])]
    shapes = [static_shape(operand.type, f"operand {i}") for i, operand in enumerate(operands)]
    loop_sizes = bind_loop_sizes(maps, shapes, what)
    block = root_op.regions[0].blocks[0]
    return record(
        kind=record.KIND,
        op_name=root_op.name,
        loop_sizes=loop_sizes,
        input_types=tuple(element_type_name(operand.type) for operand in operands[:-1]),
        input_shapes=tuple(shapes[:-1]),
        output_type=element_type_name(operands[-1].type),
        output_shape=shapes[-1],
        indexing_maps=tuple(str(m) for m in maps),
        body=tuple(op.operation.name for op in block.operations),
        source=dag_source(root_op),
        **loop_roles,
    )


def dag_source(root_op: ir.Operation) -> str:
    """Print the op alone, each operand an argument of `func.func @reduction` (what a DAG
    matcher copies, for both families: the name is part of stored keys)."""
    context = root_op.context
    with context, ir.Location.unknown():
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            types = [operand.type for operand in root_op.operands]
            function = func.FuncOp("reduction", (types, []))
            with ir.InsertionPoint(function.add_entry_block()):
                clone = clone_with_captured_constants(root_op)
                for index, argument in enumerate(function.arguments):
                    clone.operands[index] = argument
                drop_config_attributes(clone)
                func.ReturnOp([])
        assert module.operation.verify(), "reduction source does not verify"
        return str(module)


def source_op(source: ir.Module, op_name: str) -> ir.Operation:
    """Return the op named `op_name` that a `dag_source` module holds."""
    block = source.body.operations[0].regions[0].blocks[0]
    return next(op.operation for op in block.operations if op.operation.name == op_name)


def build_dag_matcher(source_text: str, op_handle: ir.Value, op_name: str) -> None:
    """Emit a DAG matcher holding a copy of the generic in `source_text` (a `dag_source`):

    %ins, %outs = transform.iree.match.cast_compatible_dag_from_root %op {
    ^bb0(%x: tensor<32x1024xf32>, %m: tensor<32xf32>, %acc: tensor<32xf32>):
      %r = linalg.generic {...} ins(%x, %m : ...) outs(%acc : ...) { ... } -> tensor<32xf32>
    } : (!transform.any_op) -> (!transform.any_value, !transform.any_value)
    """
    source = ir.Module.parse(source_text)
    function = source.body.operations[0]
    source_block = function.regions[0].blocks[0]
    value_type = ir.Type.parse("!transform.any_value")
    dag = ir.Operation.create(
        DAG_MATCH, results=[value_type, value_type], operands=[op_handle], regions=1
    )
    block = dag.regions[0].blocks.append(*[argument.type for argument in source_block.arguments])
    with ir.InsertionPoint(block):
        clone = clone_with_captured_constants(source_op(source, op_name))
        for index, argument in enumerate(block.arguments):
            clone.operands[index] = argument
        transform.YieldOp([])


def dag_root(match_op: ir.Operation, op_name: str) -> ir.Operation | None:
    """Return the one op named `op_name` a DAG matcher holds (None when it holds other ops
    too)."""
    inner = [op.operation for op in match_op.regions[0].blocks[0].operations]
    roots = [op for op in inner if op.name == op_name]
    others = [op for op in inner if op.name not in (op_name, "arith.constant", "transform.yield")]
    return roots[0] if len(roots) == 1 and not others else None


@contextmanager
def structured_match(op_handle: ir.Value) -> Iterator[ir.Value]:
    """Emit a `transform.match.structured` on `op_handle` (failures propagate) and yield its
    block's handle, at whose end the checks the caller emits inside go, then its yield."""
    any_op = transform.AnyOpType.get()
    structured = ir.Operation.create(
        STRUCTURED_MATCH,
        results=[any_op],
        operands=[op_handle],
        attributes={
            "failure_propagation_mode": ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 1)
        },
        regions=1,
    )
    block = structured.regions[0].blocks.append(any_op)
    (handle,) = block.arguments
    with ir.InsertionPoint(block):
        yield handle
        ir.Operation.create("transform.match.structured.yield", operands=[handle])


def build_structured_operand(handle: ir.Value, role: str, position: int) -> ir.Value:
    """Emit `transform.match.structured.<role> %handle[position]` (role `input` or `init`)."""
    return ir.Operation.create(
        f"transform.match.structured.{role}",
        results=[ir.Type.parse("!transform.any_value")],
        operands=[handle],
        attributes={"raw_position_list": ir.DenseI64ArrayAttr.get([position])},
    ).result


def build_loop_sizes_match(handle: ir.Value, loop_sizes: tuple[int, ...]) -> None:
    """Emit, inside a structured matcher, `dims_equal` of all its op's loops to `loop_sizes`."""
    dims = ir.Operation.create(
        "transform.match.structured.dim",
        results=[ir.Type.parse("!transform.param<i64>")],
        operands=[handle],
        attributes={"is_all": ir.UnitAttr.get(), "raw_dim_list": ir.DenseI64ArrayAttr.get([])},
    ).result
    ir.Operation.create(
        "transform.iree.match.dims_equal",
        operands=[dims],
        attributes={"expected_values": ir.DenseI64ArrayAttr.get(list(loop_sizes))},
    )


class GenericOpFamily(OpFamily):
    """A family of one-result generics, matched by a DAG matcher holding a copy of the op."""

    match_op = GENERIC_MATCH
    # The family's record.
    record: ClassVar[type[GenericOpProblem]]
    # The op its DAG matchers hold.
    root_name: ClassVar[str] = "linalg.generic"

    def expected_pattern(self, problem: Problem) -> MatchPattern:
        generic = narrow(problem, self.record)
        return MatchPattern(
            DAG_MATCH,
            generic.operand_tensor_types,
            generic.indexing_maps,
            (generic.loop_sizes,),
            generic.iterator_types + generic.body,
        )

    def reference_inputs(self, problem: Problem) -> ReferenceInputs:
        """The reference program takes the op's inputs; each result sums the op's reduction
        loops (one term for an op of parallel loops only)."""
        generic = narrow(problem, self.record)
        reduced = math.prod(
            size
            for size, kind in zip(generic.loop_sizes, generic.iterator_types, strict=True)
            if kind == "reduction"
        )
        return ReferenceInputs(
            generic.input_shapes, generic.input_types, generic.output_type, reduced
        )

    def build_matcher(self, problem: Problem, op_handle: ir.Value) -> ir.Value | None:
        """Emit a DAG matcher holding a copy of the problem's op."""
        build_dag_matcher(narrow(problem, self.record).source, op_handle, self.root_name)
        return None

    def read_pattern(self, match_op: ir.Operation, body: list[ir.Operation]) -> MatchPattern | None:
        """Parse the op inside a DAG matcher; None when it is no static generic of this family."""
        root = dag_root(match_op, self.root_name)
        if root is None:
            return None
        try:
            problem = self.parse(root)
        except IreetuneError:
            return None
        return self.expected_pattern(problem)
