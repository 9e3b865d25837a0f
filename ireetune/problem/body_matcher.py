"""The body matcher: how a spec reaches a generic whose body reads a constant defined outside it
(an element-wise ReLU's 0, a sigmoid's 1; a reduction's sum of a ReLU, as a CNN's global average
pool over a ReLU reads it).

IREE 3.13's DAG matcher never matches such an op: it compares the op's region with only the
op's operands mapped, and the constant is none of them (pinned by
tests/targets/llvm_cpu/test_cpu_spec_reach.py). `transform.foreach_match` visits the ops inside
a generic's body too, so the body matcher starts at the body's `linalg.yield`:

    transform.match.operation_name %op ["linalg.yield"]
    %v = transform.get_operand %op[0]              the value the body yields
    %d = transform.get_defining_op %v
    transform.iree.match.cast_compatible_dag_from_root %d {
    ^bb0(%in: f32, %acc: f32):                    the body's arguments it reads
      %c = arith.constant 0.0 : f32                the constants it reads, compared by value
      %m = arith.maximumf %in, %c : f32            the body's ops up to the yielded one
      %r = arith.addf %m, %acc : f32
    }
    %g = transform.get_parent_op %op               the generic, which the action configures
    transform.match.structured %g { dims_equal of every loop; which loops are parallel and
        which reduce; each operand's tensor type }

It checks the body's ops, constants, element types, loop sizes, iterator types and operand
types, not which operand each body argument is nor the indexing maps (a read-back pattern has
none: any maps).
"""

from __future__ import annotations

import functools

from iree.compiler import ir
from iree.compiler.dialects import transform

from ireetune.core.errors import IreetuneError
from ireetune.problem.family import MatchPattern, Problem, captured_values, narrow
from ireetune.problem.generic import (
    DAG_MATCH,
    OPERATION_NAME_MATCH,
    STRUCTURED_MATCH,
    TYPE_MATCH,
    GenericOpFamily,
    GenericOpProblem,
    build_loop_sizes_match,
    build_structured_operand,
    source_op,
    structured_match,
)
from ireetune.problem.op_kind import name_root_op

GENERIC = "linalg.generic"
ITERATOR_KINDS = ("parallel", "reduction")
# The ops a body matcher opens with, in order (its config constants and yield follow).
BODY_MATCHER_OPS = (
    OPERATION_NAME_MATCH,
    "transform.get_operand",
    "transform.get_defining_op",
    DAG_MATCH,
    "transform.get_parent_op",
    STRUCTURED_MATCH,
)


def _describe_constant(constant: ir.Operation) -> str:
    """Name a constant a body reads as a pattern's body does: `constant 0.000000e+00 : f32`."""
    return f"constant {constant.attributes['value']}"


@functools.lru_cache(maxsize=256)
def _read_source_constants(source: str) -> tuple[str, ...]:
    """Name the constants the body of a `dag_source`'s generic reads, in the order its body
    matcher holds them."""
    with ir.Context():
        module = ir.Module.parse(source)
        return tuple(
            _describe_constant(value.owner.operation)
            for value in captured_values(source_op(module, GENERIC))
        )


def reads_constants(problem: GenericOpProblem) -> bool:
    """Say whether the problem's body reads constants defined outside it."""
    return bool(_read_source_constants(problem.source))


def check_body_matchable(root_op: ir.Operation) -> None:
    """Refuse a body a matcher can not reach: one that reads a value from outside it other
    than a constant, or reads constants and loop indices (`linalg.index` verifies only inside a
    linalg op, so a body matcher can not hold it), or yields a value it does not compute."""
    captured = captured_values(root_op)
    if not captured:
        return
    if any(isinstance(v.owner, ir.Block) or v.owner.name != "arith.constant" for v in captured):
        raise IreetuneError(
            f"{name_root_op(root_op)} is not tunable: its body reads a value from outside it "
            "that is not a constant"
        )
    block = root_op.regions[0].blocks[0]
    operations = [op.operation for op in block.operations]
    if any(op.name == "linalg.index" for op in operations):
        raise IreetuneError(
            f"{name_root_op(root_op)} is not tunable: its body reads both constants from "
            "outside it and loop indices (linalg.index), which no matcher of IREE 3.13 holds"
        )
    if any(op.name == "arith.constant" for op in operations):
        raise IreetuneError(
            f"{name_root_op(root_op)} is not tunable: its body reads constants from outside it "
            "and defines constants of its own, which a body matcher does not read back alike"
        )
    yielded = operations[-1].operands[0]
    if isinstance(yielded.owner, ir.Block) or yielded.owner.operation not in operations:
        raise IreetuneError(
            f"{name_root_op(root_op)} is not tunable: its body yields a value it does not compute"
        )
    if len(_slice_yielded(block)[1]) != len(operations) - 1:
        raise IreetuneError(
            f"{name_root_op(root_op)} is not tunable: its body computes values it does not yield "
            "(a body matcher holds only what the yielded value depends on)"
        )


def _slice_yielded(block: ir.Block) -> tuple[list[ir.Value], list[ir.Operation]]:
    """Return the body arguments the yielded value depends on (in argument order) and the body
    ops it depends on (in body order, the yielded value's producer last)."""
    *computing, terminator = [op.operation for op in block.operations]
    needed = [terminator.operands[0].owner.operation]
    index = len(computing)
    while index > 0:
        index -= 1
        op = computing[index]
        if op in needed:
            needed.extend(
                value.owner.operation
                for value in op.operands
                if not isinstance(value.owner, ir.Block) and value.owner.operation in computing
            )
    ops = [op for op in computing if op in needed]
    arguments = [
        argument
        for argument in block.arguments
        if any(operand == argument for op in ops for operand in op.operands)
    ]
    return arguments, ops


def build_body_matcher(problem: GenericOpProblem, op_handle: ir.Value) -> ir.Value:
    """Emit the body matcher (the module's docstring) for an op whose body reads constants;
    return the handle of the generic, which the action configures."""
    any_op = transform.AnyOpType.get()
    any_value = ir.Type.parse("!transform.any_value")
    source = ir.Module.parse(problem.source)
    generic = source_op(source, GENERIC)
    constants = captured_values(generic)
    arguments, ops = _slice_yielded(generic.regions[0].blocks[0])
    transform.MatchOperationNameOp(op_handle, ["linalg.yield"])
    yielded = transform.GetOperandOp(any_value, op_handle, [0]).result
    producer = transform.GetDefiningOp(any_op, yielded).result
    dag = ir.Operation.create(
        DAG_MATCH, results=[any_value, any_value], operands=[producer], regions=1
    )
    block = dag.regions[0].blocks.append(*[argument.type for argument in arguments])
    with ir.InsertionPoint(block):
        copies: list[tuple[ir.Value, ir.Value]] = list(zip(arguments, block.arguments, strict=True))
        for constant in constants:
            copies.append((constant, constant.owner.operation.clone().results[0]))
        for op in ops:
            clone = op.clone()
            for position, operand in enumerate(op.operands):
                clone.operands[position] = next(new for old, new in copies if old == operand)
            copies.extend(zip(op.results, clone.results, strict=True))
        transform.YieldOp([])
    parent = transform.GetParentOp(any_op, op_handle).result
    _build_shape_match(problem, parent)
    return parent


def _build_shape_match(problem: GenericOpProblem, generic: ir.Value) -> None:
    """Emit a structured matcher of the generic's loop sizes, which loops are parallel and
    which reduce, and its operands' tensor types."""
    with structured_match(generic) as handle:
        build_loop_sizes_match(handle, problem.loop_sizes)
        for kind in ITERATOR_KINDS:
            dims = [d for d, named in enumerate(problem.iterator_types) if named == kind]
            if dims:
                ir.Operation.create(
                    "transform.match.structured.dim",
                    operands=[handle],
                    attributes={
                        kind: ir.UnitAttr.get(),
                        "raw_dim_list": ir.DenseI64ArrayAttr.get(dims),
                    },
                )
        *inputs, output = problem.operand_tensor_types
        operands = [("input", position, text) for position, text in enumerate(inputs)]
        for role, position, text in [*operands, ("init", 0, output)]:
            ir.Operation.create(
                TYPE_MATCH,
                operands=[build_structured_operand(handle, role, position)],
                attributes={"target_type": ir.TypeAttr.get(ir.Type.parse(text))},
            )


def _checked_dims(attributes: ir.OpAttributeMap, rank: int) -> list[int] | None:
    """Return the loops a `transform.match.structured.dim` names: `all`, a list (a negative
    position counts from the last loop, as IREE reads it) or `except(...)` a list; None for a
    position out of range."""
    if "is_all" in attributes:
        return list(range(rank))
    listed = [int(d) for d in ir.DenseI64ArrayAttr(attributes["raw_dim_list"])]
    dims = [d + rank if d < 0 else d for d in listed]
    if not all(0 <= d < rank for d in dims):
        return None
    if "is_inverted" in attributes:
        return [d for d in range(rank) if d not in dims]
    return dims


def _read_iterators(structured: ir.Operation, rank: int) -> tuple[str, ...] | None:
    """Read the iterator types a body matcher's structured match checks (all parallel when it
    checks none, as the element-wise body matchers written before 2026-12-03 did); None when
    they do not name every loop exactly once."""
    named: dict[int, str] = {}
    for op in structured.regions[0].blocks[0].operations:
        attributes = op.operation.attributes
        kinds = [kind for kind in ITERATOR_KINDS if kind in attributes]
        if op.operation.name != "transform.match.structured.dim" or not kinds:
            continue
        dims = _checked_dims(attributes, rank)
        if dims is None:
            return None
        for dim in dims:
            if dim in named:
                return None
            named[dim] = kinds[0]
    if not named:
        return ("parallel",) * rank
    if len(named) != rank:
        return None
    return tuple(named[dim] for dim in range(rank))


def has_body_matcher_form(body: list[ir.Operation]) -> bool:
    """Say whether a matcher's body opens as a body matcher does (`BODY_MATCHER_OPS`, matching
    a `linalg.yield` first), whether or not its checks read back into a pattern."""
    if tuple(op.name for op in body[: len(BODY_MATCHER_OPS)]) != BODY_MATCHER_OPS:
        return False
    names = ir.ArrayAttr(body[0].attributes["op_names"])
    return [ir.StringAttr(a).value for a in names] == ["linalg.yield"]


def read_body_matcher(body: list[ir.Operation]) -> MatchPattern | None:
    """Read a matcher's body of exactly the body matcher's form into the pattern its problem
    expects (no maps: it checks none); None for any other body."""
    if not has_body_matcher_form(body):
        return None
    _, _, _, dag, _, structured = body[: len(BODY_MATCHER_OPS)]
    work = [op.operation for op in dag.regions[0].blocks[0].operations]
    computed = tuple(op.name for op in work if op.name not in ("arith.constant", "transform.yield"))
    constants = tuple(_describe_constant(op) for op in work if op.name == "arith.constant")
    sizes: tuple[int, ...] | None = None
    types: list[str] = []
    for op in structured.regions[0].blocks[0].operations:
        if op.operation.name == "transform.iree.match.dims_equal":
            sizes = tuple(ir.DenseI64ArrayAttr(op.operation.attributes["expected_values"]))
        elif op.operation.name == TYPE_MATCH:
            types.append(str(ir.TypeAttr(op.operation.attributes["target_type"]).value))
    if not sizes or not computed or len(types) < 2:
        return None
    iterators = _read_iterators(structured, len(sizes))
    if iterators is None:
        return None
    checked = (*iterators, *computed, "linalg.yield", *constants)
    return MatchPattern(DAG_MATCH, tuple(types), (), (sizes,), checked)


class BodyMatchedFamily(GenericOpFamily):
    """A family of one-result generics matched by a DAG matcher holding a copy of the op, or
    by a body matcher when the body reads constants (which IREE 3.13's DAG matcher never
    matches)."""

    def expected_pattern(self, problem: Problem) -> MatchPattern:
        """The DAG matcher's pattern; a body matcher's has no maps (it checks none) and names
        the constants its body reads."""
        generic = narrow(problem, self.record)
        pattern = super().expected_pattern(problem)
        if not reads_constants(generic):
            return pattern
        body = (*pattern.body, *_read_source_constants(generic.source))
        return MatchPattern(pattern.match_op, pattern.types, (), pattern.sizes, body)

    def build_matcher(self, problem: Problem, op_handle: ir.Value) -> ir.Value | None:
        """Emit a DAG matcher holding a copy of the op, or a body matcher for a body that reads
        constants; return the generic's handle for the latter."""
        generic = narrow(problem, self.record)
        if reads_constants(generic):
            return build_body_matcher(generic, op_handle)
        return super().build_matcher(problem, op_handle)

    def read_pattern(self, match_op: ir.Operation, body: list[ir.Operation]) -> MatchPattern | None:
        """Read a DAG matcher holding a generic of this family; None for one whose body reads
        constants, which IREE 3.13 never matches (test_cpu_spec_reach.py pins it)."""
        pattern = super().read_pattern(match_op, body)
        if pattern is not None and any(item.startswith("constant ") for item in pattern.body):
            return None
        return pattern

    def read_whole_matcher(self, body: list[ir.Operation]) -> tuple[MatchPattern, int] | None:
        """Read a body matcher (its opening ops, `BODY_MATCHER_OPS`) of this family."""
        pattern = read_body_matcher(body)
        if pattern is None or not self.claims(pattern):
            return None
        return pattern, len(BODY_MATCHER_OPS)
