"""The element-wise family: `linalg.generic` ops of parallel loops only and one result (a bias
add and ReLU, a scale, an exponential; copies, transposes and broadcasts, whose body only
yields, are element-wise too).

IREE's dispatch creation collapses an element-wise dispatch's loops as far as its maps allow (a
plain 4x8x16 add becomes one loop of 512; a bias add over rows keeps its two loops), so the root
a dispatch shows is already in its final form:

    %r = linalg.generic {indexing_maps = [(d0, d1) -> (d0, d1), (d0, d1) -> (d1),
        (d0, d1) -> (d0, d1)], iterator_types = ["parallel", "parallel"]}
        ins(%x, %b : tensor<64x96xf32>, tensor<96xf32>) outs(%e : tensor<64x96xf32>) {
      ^bb0(%in: f32, %bias: f32, %out: f32):
        linalg.yield max(%in + %bias, 0)   (arith.addf, arith.maximumf)
    } -> tensor<64x96xf32>

As for reductions, no match op of IREE's transform extensions describes a generic by its sizes:
the matcher is a `cast_compatible_dag_from_root` holding a copy of the op (`generic.py` builds
and reads it for both families; the two are told apart by their iterator types). The reference
program is the op alone.

A body that reads a constant defined outside it (a ReLU's 0, a sigmoid's 1) is never matched by
that DAG matcher in IREE 3.13: it compares the op's region with only the op's operands mapped,
and the constant is none of them. Such an op gets a body matcher instead (pinned by
tests/targets/llvm_cpu/test_cpu_spec_reach.py). `transform.foreach_match` visits the ops inside
a generic's body too, so the matcher starts at the body's `linalg.yield`:

    transform.match.operation_name %op ["linalg.yield"]
    %v = transform.get_operand %op[0]              the value the body yields
    %d = transform.get_defining_op %v
    transform.iree.match.cast_compatible_dag_from_root %d {
    ^bb0(%in: f32):                               the body's arguments it reads
      %c = arith.constant 0.0 : f32                the constants it reads, compared by value
      %r = arith.maximumf %in, %c : f32            the body's ops up to the yielded one
    }
    %g = transform.get_parent_op %op               the generic, which the action configures
    transform.match.structured %g { dims_equal of every loop; each operand's tensor type }

It checks the body's ops, constants, element types, loop sizes and operand types, not which
operand each body argument is nor the indexing maps (a read-back pattern has none: any maps).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from iree.compiler import ir
from iree.compiler.dialects import transform

from ireetune.core.errors import IreetuneError
from ireetune.problem.family import MatchPattern, Problem, captured_values, narrow
from ireetune.problem.generic import (
    DAG_MATCH,
    NEUTRAL_BODY_OPS,
    OPERATION_NAME_MATCH,
    STRUCTURED_MATCH,
    TYPE_MATCH,
    GenericOpFamily,
    GenericOpProblem,
    build_loop_sizes_match,
    build_structured_operand,
    iterator_names,
    parse_generic,
    structured_match,
)
from ireetune.problem.op_kind import name_root_op

GENERIC = "linalg.generic"


@dataclass(frozen=True)
class ElementwiseProblem(GenericOpProblem):
    """An element-wise generic's loops, operands and body."""

    KIND = "elementwise"

    @property
    def signature(self) -> str:
        """Name it by its loop sizes and element types."""
        sizes = "x".join(str(s) for s in self.loop_sizes)
        types = "_".join((*self.input_types, self.output_type))
        return f"elementwise_{sizes}_{types}"

    @property
    def reads_constants(self) -> bool:
        """Say whether the body reads constants defined outside it."""
        return bool(_read_source_constants(self.source))


def parse_elementwise(root_op: ir.Operation) -> ElementwiseProblem:
    """Parse a `linalg.generic` with one result and parallel loops only."""
    if root_op.name == "linalg.generic" and not root_op.results:
        # Pinned by tests/targets/llvm_cpu/test_cpu_spec_reach.py.
        raise IreetuneError(
            f"{name_root_op(root_op)} on buffers is not tuned yet: IREE 3.13 bufferises a "
            "copy-only dispatch before it applies tuning specs, and only a copy into a padded "
            "buffer has a space (the buffer_copy family, matched by a transform.match.structured "
            "matcher)"
        )
    if root_op.name != "linalg.generic" or len(root_op.results) != 1:
        raise IreetuneError(f"root op '{root_op.name}' is not a one-result generic")
    if "reduction" in iterator_names(root_op):
        raise IreetuneError(f"root op '{root_op.name}' has a reduction loop")
    _check_body_matchable(root_op)
    return parse_generic(root_op, ElementwiseProblem, f"element-wise op '{root_op.name}'")


def _describe_constant(constant: ir.Operation) -> str:
    """Name a constant a body reads as a pattern's body does: `constant 0.000000e+00 : f32`."""
    return f"constant {constant.attributes['value']}"


def _source_generic(source: ir.Module) -> ir.Operation:
    """Return the generic a `dag_source` module holds."""
    block = source.body.operations[0].regions[0].blocks[0]
    return next(op.operation for op in block.operations if op.operation.name == GENERIC)


@functools.lru_cache(maxsize=256)
def _read_source_constants(source: str) -> tuple[str, ...]:
    """Name the constants the body of a `dag_source`'s generic reads, in the order its body
    matcher holds them."""
    with ir.Context():
        module = ir.Module.parse(source)
        return tuple(
            _describe_constant(value.owner.operation)
            for value in captured_values(_source_generic(module))
        )


def _check_body_matchable(root_op: ir.Operation) -> None:
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


def build_body_matcher(problem: ElementwiseProblem, op_handle: ir.Value) -> ir.Value:
    """Emit the body matcher (the module's docstring) for an op whose body reads constants;
    return the handle of the generic, which the action configures."""
    any_op = transform.AnyOpType.get()
    any_value = ir.Type.parse("!transform.any_value")
    source = ir.Module.parse(problem.source)
    generic = _source_generic(source)
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


def _build_shape_match(problem: ElementwiseProblem, generic: ir.Value) -> None:
    """Emit a structured matcher of the generic's loop sizes and its operands' tensor types."""
    with structured_match(generic) as handle:
        build_loop_sizes_match(handle, problem.loop_sizes)
        *inputs, output = problem.operand_tensor_types
        operands = [("input", position, text) for position, text in enumerate(inputs)]
        for role, position, text in [*operands, ("init", 0, output)]:
            ir.Operation.create(
                TYPE_MATCH,
                operands=[build_structured_operand(handle, role, position)],
                attributes={"target_type": ir.TypeAttr.get(ir.Type.parse(text))},
            )


# The ops a body matcher opens with, in order (its config constants and yield follow).
BODY_MATCHER_OPS = (
    OPERATION_NAME_MATCH,
    "transform.get_operand",
    "transform.get_defining_op",
    DAG_MATCH,
    "transform.get_parent_op",
    STRUCTURED_MATCH,
)


def read_body_matcher(body: list[ir.Operation]) -> MatchPattern | None:
    """Read a matcher's body of exactly the body matcher's form into the pattern its problem
    expects (no maps: it checks none); None for any other body."""
    if tuple(op.name for op in body[: len(BODY_MATCHER_OPS)]) != BODY_MATCHER_OPS:
        return None
    names, _, _, dag, _, structured = body[: len(BODY_MATCHER_OPS)]
    if [ir.StringAttr(a).value for a in ir.ArrayAttr(names.attributes["op_names"])] != [
        "linalg.yield"
    ]:
        return None
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
    checked = (*("parallel",) * len(sizes), *computed, "linalg.yield", *constants)
    return MatchPattern(DAG_MATCH, tuple(types), (), (sizes,), checked)


class ElementwiseFamily(GenericOpFamily):
    """One-result generics of parallel loops only (a generic without results, on buffers, is
    recognised to be refused with its reason)."""

    name = "elementwise"
    record = ElementwiseProblem

    def recognises(self, root_op: ir.Operation) -> bool:
        return (
            root_op.name == "linalg.generic"
            and len(root_op.results) <= 1
            and "reduction" not in iterator_names(root_op)
        )

    def parse(self, root_op: ir.Operation) -> Problem:
        return parse_elementwise(root_op)

    def expected_pattern(self, problem: Problem) -> MatchPattern:
        """The DAG matcher's pattern; a body matcher's has no maps (it checks none) and names
        the constants its body reads."""
        elementwise = narrow(problem, ElementwiseProblem)
        pattern = super().expected_pattern(problem)
        if not elementwise.reads_constants:
            return pattern
        body = (*pattern.body, *_read_source_constants(elementwise.source))
        return MatchPattern(pattern.match_op, pattern.types, (), pattern.sizes, body)

    def build_matcher(self, problem: Problem, op_handle: ir.Value) -> ir.Value | None:
        """Emit a DAG matcher holding a copy of the op, or a body matcher for a body that reads
        constants (which IREE 3.13's DAG matcher never matches); return the generic's handle
        for the latter."""
        elementwise = narrow(problem, ElementwiseProblem)
        if elementwise.reads_constants:
            return build_body_matcher(elementwise, op_handle)
        return super().build_matcher(problem, op_handle)

    def read_pattern(self, match_op: ir.Operation, body: list[ir.Operation]) -> MatchPattern | None:
        """Read a DAG matcher holding an element-wise generic; None for one whose body reads
        constants, which IREE 3.13 never matches (test_cpu_spec_reach.py pins it)."""
        pattern = super().read_pattern(match_op, body)
        if pattern is not None and any(item.startswith("constant ") for item in pattern.body):
            return None
        return pattern

    def read_whole_matcher(self, body: list[ir.Operation]) -> tuple[MatchPattern, int] | None:
        """Read a body matcher (its opening ops, `BODY_MATCHER_OPS`)."""
        pattern = read_body_matcher(body)
        return None if pattern is None else (pattern, len(BODY_MATCHER_OPS))

    def claims(self, pattern: MatchPattern) -> bool:
        return "reduction" not in pattern.body

    def describe(self, pattern: MatchPattern) -> str:
        *inputs, output = pattern.types
        sizes = pattern.sizes[0]
        work = [op for op in pattern.body if op != "parallel" and op not in NEUTRAL_BODY_OPS]
        return (
            f"element-wise {' x '.join(inputs)} -> {output}, loops={list(sizes or ())}, "
            f"body {', '.join(work) or 'a copy'}, maps {'; '.join(pattern.indexing_maps) or 'any'}"
        )
