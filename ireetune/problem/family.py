"""The op-family interface: what generic code may ask of any problem and of its family.

An op family (contraction, batch contraction, convolution, attention, reduction) is one module
under `ireetune/problem/` that owns everything ireetune knows about its ops:

- its typed problem record (a frozen dataclass) and the parser that builds it from a root op;
- its name in the database: the record's fields (contraction and convolution keys are their
  fields, unchanged since they were first stored; newer families add a `kind` field);
- its matcher: the transform ops a tuning spec uses to recognise the op, built with the bindings,
  and the reader that turns those ops back into a `MatchPattern` (`spec show`, `spec compile` and
  the landing checks compare patterns with problems through the family, never by op class);
- its reference program and inputs (the op alone as `@main`, its operands' shapes and types).

Generic code (the dispatch tuner, verification, the spec tools, the database readers) reaches a
family through `ireetune.problem.registry`, never through `isinstance` on a problem class.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable
from dataclasses import Field, dataclass
from typing import Any, ClassVar, Protocol, TypeVar

from iree.compiler import ir
from iree.compiler.dialects import arith, func, linalg, preprocessing_transform, tensor

from ireetune.core.errors import IreetuneError


class Problem(Protocol):
    """What every op family's problem record offers generic code (records are dataclasses:
    their fields are their database key)."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]
    # The reference program (the op alone as `@main`) takes the spec's config as the dispatch does.
    reference_carries_config: ClassVar[bool]

    @property
    def op_name(self) -> str: ...

    @property
    def loop_sizes(self) -> tuple[int, ...]: ...

    @property
    def indexing_maps(self) -> tuple[str, ...]: ...

    @property
    def output_type(self) -> str: ...

    @property
    def family(self) -> str:
        """Name the op family that owns the record (`contraction`, `attention`, ...)."""
        ...

    @property
    def kind(self) -> str:
        """Name the op within its family (`mmt`, `conv`, `attention`)."""
        ...

    @property
    def signature(self) -> str:
        """Give a stable, readable name: kind, sizes and element types."""
        ...

    @property
    def flops(self) -> int:
        """Count the floating-point (or integer) operations of one run of the op."""
        ...


RecordT = TypeVar("RecordT")


def narrow(problem: Problem, record: type[RecordT]) -> RecordT:
    """Narrow a problem to the record its family says it is (an invariant, not a user error):
    `narrow(problem, ContractionProblem)`."""
    assert isinstance(problem, record), f"{problem.signature} is no {record.__name__}"
    return problem


@dataclass(frozen=True)
class ReferenceInputs:
    """The reference program's inputs, its result type and how many terms each result sums."""

    shapes: tuple[tuple[int, ...], ...]
    types: tuple[str, ...]
    output_type: str
    reduction_size: int


class MatmulRecord(Problem, Protocol):
    """A problem record seen as a matrix multiplication: its M, N and K loops and its operands."""

    @property
    def m_dims(self) -> tuple[int, ...]: ...

    @property
    def n_dims(self) -> tuple[int, ...]: ...

    @property
    def k_dims(self) -> tuple[int, ...]: ...

    @property
    def lhs_shape(self) -> tuple[int, ...]: ...

    @property
    def rhs_shape(self) -> tuple[int, ...]: ...

    @property
    def lhs_type(self) -> str: ...

    @property
    def rhs_type(self) -> str: ...


class MatmulSizes:
    """The M, N and K sizes and the operation count of a family whose ops are, loop by loop, a
    matrix multiplication (contractions, and convolutions seen through im2col)."""

    @property
    def m_sizes(self: MatmulRecord) -> tuple[int, ...]:
        return tuple(self.loop_sizes[d] for d in self.m_dims)

    @property
    def n_sizes(self: MatmulRecord) -> tuple[int, ...]:
        return tuple(self.loop_sizes[d] for d in self.n_dims)

    @property
    def k_sizes(self: MatmulRecord) -> tuple[int, ...]:
        return tuple(self.loop_sizes[d] for d in self.k_dims)

    @property
    def flops(self: MatmulRecord) -> int:
        """Count multiply and add as two operations, as GEMM benchmarks do."""
        return 2 * math.prod(self.loop_sizes)


def matmul_reference_inputs(problem: MatmulRecord) -> ReferenceInputs:
    """The reference program takes both operands; each result sums the K loops' products."""
    return ReferenceInputs(
        (problem.lhs_shape, problem.rhs_shape),
        (problem.lhs_type, problem.rhs_type),
        problem.output_type,
        math.prod(problem.loop_sizes[d] for d in problem.k_dims),
    )


@dataclass(frozen=True)
class MatchPattern:
    """What a matcher's match op and its `dims_equal` checks require.

    `types` are the match op's type attributes in order (`lhs_type`, `rhs_type`, `output_type` for
    a contraction), `sizes` the required sizes of each of its results (None: free), named by
    `MatchOpSpec.roles`. A DAG matcher (`cast_compatible_dag_from_root`) has the matched op's
    operand types as `types`, its loop sizes as its one size group, and its body in `body`.
    """

    match_op: str
    types: tuple[str, ...]
    indexing_maps: tuple[str, ...]
    sizes: tuple[tuple[int, ...] | None, ...]
    body: tuple[str, ...] = ()


@dataclass(frozen=True)
class MatchOpSpec:
    """A match op of IREE's transform extensions: its name, type attributes and result roles."""

    name: str
    type_attributes: tuple[str, ...]
    roles: tuple[str, ...]


class OpFamily(abc.ABC):
    """One op family: how to recognise, parse, match and reference-run its root ops."""

    # The family's name, as problems name it in `Problem.family`.
    name: str
    # The match op its matchers use.
    match_op: MatchOpSpec

    @abc.abstractmethod
    def recognises(self, root_op: ir.Operation) -> bool:
        """Say whether the root op belongs to this family."""

    @abc.abstractmethod
    def parse(self, root_op: ir.Operation) -> Problem:
        """Parse a root op of this family into its problem record."""

    @abc.abstractmethod
    def expected_pattern(self, problem: Problem) -> MatchPattern:
        """Return the pattern a matcher built for `problem` requires (the builder emits it)."""

    @abc.abstractmethod
    def reference_inputs(self, problem: Problem) -> ReferenceInputs:
        """Return the shapes and types of the reference program's arguments."""

    def build_reference(
        self, root_op: ir.Operation, problem: Problem, context: ir.Context
    ) -> ir.Module:
        """Return a module whose `@main` computes the root op from its inputs (default: the root
        op cloned, its result initialised to zero)."""
        return clone_as_main(root_op, context, init_value=None)

    def build_matcher(self, problem: Problem, op_handle: ir.Value) -> ir.Value | None:
        """Emit the match op and one `dims_equal` per size group at the insertion point; return
        the handle the action configures when it is not the matched op (None: the op)."""
        pattern = self.expected_pattern(problem)
        build_dims_match(self.match_op, pattern, op_handle)
        return None

    def claims(self, pattern: MatchPattern) -> bool:
        """Say whether a pattern of this family's match op is this family's (the reduction and
        element-wise families share the DAG matcher, told apart by their iterator types)."""
        return True

    def read_pattern(self, match_op: ir.Operation, body: list[ir.Operation]) -> MatchPattern | None:
        """Read a match op of this family, and the `dims_equal`s on its results, into a pattern
        (None when the op, a DAG matcher's for example, holds no op of this family)."""
        return read_dims_match(self.match_op, match_op, body)

    def read_whole_matcher(self, body: list[ir.Operation]) -> tuple[MatchPattern, int] | None:
        """Read a matcher whose opening ops are together one pattern of this family (the
        body matcher of a generic); return it and how many ops it took (None: no such form)."""
        return None

    def describe(self, pattern: MatchPattern) -> str:
        """Describe a pattern of this family for `spec show`."""
        dims = " ".join(
            f"{role}={list(sizes) if sizes is not None else 'any'}"
            for role, sizes in zip(self.match_op.roles, pattern.sizes, strict=True)
        )
        maps = "; ".join(pattern.indexing_maps) if pattern.indexing_maps else "any maps"
        *inputs, output = pattern.types[: self.match_op.type_attributes.index("output_type") + 1]
        types = " x ".join(inputs) + f" -> {output}"
        return f"{self.name} {types}, {dims}, maps {maps}"


def build_dims_match(spec: MatchOpSpec, pattern: MatchPattern, op_handle: ir.Value) -> None:
    """Emit `spec.name` with its type attributes and maps, and a `dims_equal` per size group:

    %b, %m, %n, %k = transform.iree.match.contraction %op, lhs_type = f16, rhs_type = f16,
        output_type = f32, indexing_maps = [...] : !transform.any_op -> !transform.param<i64>
    transform.iree.match.dims_equal %m, [256] : !transform.param<i64>
    """
    attributes: dict[str, ir.Attribute] = {
        name: ir.TypeAttr.get(ir.Type.parse(text))
        for name, text in zip(spec.type_attributes, pattern.types, strict=True)
    }
    attributes["indexing_maps"] = ir.ArrayAttr.get(
        [ir.AffineMapAttr.get(parse_affine_map(text)) for text in pattern.indexing_maps]
    )
    match = ir.Operation.create(
        spec.name,
        results=[ir.Type.parse("!transform.param<i64>")] * len(spec.roles),
        operands=[op_handle],
        attributes=attributes,
    )
    for result, sizes in zip(match.results, pattern.sizes, strict=True):
        if sizes is not None:
            preprocessing_transform.MatchDimsEqualOp(result, list(sizes))


def read_dims_match(
    spec: MatchOpSpec, match_op: ir.Operation, body: list[ir.Operation]
) -> MatchPattern:
    """Read a dims-style match op and the `dims_equal`s on its results into a pattern."""
    sizes: list[tuple[int, ...] | None] = [None] * len(spec.roles)
    for op in body:
        if op.name != "transform.iree.match.dims_equal":
            continue
        try:
            result = ir.OpResult(op.operands[0])
        except ValueError:
            continue
        if result.owner.operation == match_op:
            expected = ir.DenseI64ArrayAttr(op.attributes["expected_values"])
            sizes[result.result_number] = tuple(expected)
    maps: tuple[str, ...] = ()
    if "indexing_maps" in match_op.attributes:
        maps = tuple(
            str(ir.AffineMapAttr(a).value)
            for a in ir.ArrayAttr(match_op.attributes["indexing_maps"])
        )
    types = tuple(
        str(ir.TypeAttr(match_op.attributes[name]).value) for name in spec.type_attributes
    )
    return MatchPattern(spec.name, types, maps, tuple(sizes))


def parse_affine_map(text: str) -> ir.AffineMap:
    """Parse `(d0, d1) -> (d1)` in the current context."""
    return ir.AffineMapAttr(ir.Attribute.parse(f"affine_map<{text}>")).value


def map_dim_positions(map_text: str) -> list[int]:
    """Return the loop-dimension positions of an affine map's results ([-1] for non-dims)."""
    with ir.Context():
        return result_positions(parse_affine_map(map_text))


def result_positions(affine_map: ir.AffineMap) -> list[int]:
    """Return each result's loop dimension, or -1 for a result that is not a plain dimension."""
    return [
        expr.position if isinstance(expr, ir.AffineDimExpr) else -1 for expr in affine_map.results
    ]


def tensor_type_text(shape: tuple[int, ...], element: str) -> str:
    """Write a ranked tensor type, `tensor<64x96xf32>`, from its shape and element type."""
    return "tensor<" + "x".join(str(s) for s in (*shape, element)) + ">"


def element_type_name(shaped_type: ir.Type) -> str:
    return str(ir.ShapedType(shaped_type).element_type)


_BYTES = {"f64": 8, "f32": 4, "i32": 4, "f16": 2, "bf16": 2, "i16": 2, "i8": 1}


def element_bytes(type_name: str) -> int:
    """Return the size in bytes of an element type name such as `f16` (4 for one not listed)."""
    return _BYTES.get(type_name, 4)


def static_shape(value_type: ir.Type, what: str) -> tuple[int, ...]:
    """Return a tensor's static shape, or say that dynamic shapes are not supported."""
    shaped = ir.ShapedType(value_type)
    if not shaped.has_static_shape:
        raise IreetuneError(f"dynamic shapes are not supported yet ({what} is {value_type})")
    return tuple(shaped.shape)


def bind_loop_sizes(
    affine_maps: list[ir.AffineMap], shapes: list[tuple[int, ...]], what: str
) -> tuple[int, ...]:
    """Bind every loop to a size from the operands whose maps index it with a plain dimension."""
    loop_sizes = [0] * affine_maps[0].n_dims
    for affine_map, shape in zip(affine_maps, shapes, strict=True):
        for position, extent in zip(result_positions(affine_map), shape, strict=True):
            if position >= 0 and loop_sizes[position] == 0:
                loop_sizes[position] = extent
    if any(size == 0 for size in loop_sizes):
        raise IreetuneError(f"cannot bind every loop of {what} to a size")
    return tuple(loop_sizes)


# Attributes of a dispatch's root op that a reference program must not carry.
_CONFIG_ATTRIBUTES = ("lowering_config", "compilation_info", "root_op")


def drop_config_attributes(op: ir.Operation) -> None:
    """Remove the attributes of a dispatch's root op that a clone outside the dispatch must not
    carry (its configuration, and the mark that makes it the root)."""
    for name in _CONFIG_ATTRIBUTES:
        if name in op.attributes:
            del op.attributes[name]


def zero_of(element_type: ir.Type) -> ir.Attribute:
    """Return the zero of an integer or float element type (an accumulator's start)."""
    if isinstance(element_type, ir.IntegerType):
        return ir.IntegerAttr.get(element_type, 0)
    return ir.FloatAttr.get(element_type, 0.0)


def clone_as_main(
    root_op: ir.Operation,
    context: ir.Context,
    init_value: ir.Attribute | None,
    produced_inputs: frozenset[int] = frozenset(),
) -> ir.Module:
    """Clone a single-result root op into `@main(inputs...) -> result`.

    The result starts as a fill of `init_value` (zero when None): a contraction's accumulator,
    a reduction's neutral element. The inputs at `produced_inputs` first pass through an
    elementwise op (a ReLU, as in a network), which forms its own dispatch: an op that reads an
    argument directly can be rewritten into another form than the model's, whose inputs come
    from other dispatches (see `ReductionFamily.build_reference`).
    """
    with context, ir.Location.unknown():
        operand_types = [operand.type for operand in root_op.operands]
        *input_types, output_type = operand_types
        shaped_output = ir.RankedTensorType(output_type)
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            function = func.FuncOp("main", (input_types, [output_type]))
            with ir.InsertionPoint(function.add_entry_block()):
                element_type = shaped_output.element_type
                if init_value is None:
                    init_value = zero_of(element_type)
                fill_value = arith.ConstantOp(element_type, init_value)
                empty = tensor.EmptyOp(list(shaped_output.shape), element_type)
                init = linalg.fill(fill_value.result, outs=[empty.result])
                arguments = [
                    _rectified(argument) if index in produced_inputs else argument
                    for index, argument in enumerate(function.arguments)
                ]
                clone = clone_with_captured_constants(root_op)
                for index, argument in enumerate(arguments):
                    clone.operands[index] = argument
                clone.operands[len(input_types)] = init
                drop_config_attributes(clone)
                func.ReturnOp([clone.results[0]])
        assert module.operation.verify(), "reference module does not verify"
        return module


def captured_values(root_op: ir.Operation) -> list[ir.Value]:
    """Return the values the op's regions use but neither it nor they define, in the order the
    op's walk first meets them (the same on every parse: a body matcher and its read-back pattern
    list constants in that order, and `dag_source`'s text, part of stored keys, too)."""
    inside: set[ir.Operation] = set()
    walked: list[ir.Operation] = []
    captured: list[ir.Value] = []

    def collect(op: ir.Operation) -> ir.WalkResult:
        inside.add(op)
        walked.append(op)
        return ir.WalkResult.ADVANCE

    root_op.walk(collect)

    def is_inside(value: ir.Value) -> bool:
        owner = value.owner
        if isinstance(owner, ir.Block):
            return owner.owner.operation in inside
        return owner.operation in inside

    for op in walked:
        if op == root_op:
            continue
        for operand in op.operands:
            if not is_inside(operand) and operand not in captured:
                captured.append(operand)
    return captured


def clone_with_captured_constants(root_op: ir.Operation) -> ir.Operation:
    """Clone an op at the insertion point, with the constants its body captures (a max-pool's
    -inf, a mean's divisor) cloned before it, so the clone stands alone."""
    replacements: list[tuple[ir.Value, ir.Value]] = []
    for value in captured_values(root_op):
        owner = value.owner
        if isinstance(owner, ir.Block) or owner.operation.name != "arith.constant":
            raise IreetuneError(
                f"root op '{root_op.name}' uses a non-constant value from outside its body"
            )
        replacements.append((value, owner.operation.clone().results[0]))
    clone = root_op.clone()

    def rewire(op: ir.Operation) -> ir.WalkResult:
        for index, operand in enumerate(op.operands):
            for old, new in replacements:
                if operand == old:
                    op.operands[index] = new
        return ir.WalkResult.ADVANCE

    if replacements:
        clone.walk(rewire)
    return clone


def _rectified(value: ir.Value) -> ir.Value:
    """Return max(value, 0) elementwise, as a `linalg.generic` at the insertion point."""
    identity = ir.AffineMap.get_identity(ir.RankedTensorType(value.type).rank)
    return map_elements(value, identity, _max_with_zero)


def _max_with_zero(element: ir.Value) -> ir.Value:
    element_type = element.type
    if isinstance(element_type, ir.IntegerType):
        zero = arith.ConstantOp(element_type, ir.IntegerAttr.get(element_type, 0))
        return arith.MaxSIOp(element, zero.result).result
    zero = arith.ConstantOp(element_type, ir.FloatAttr.get(element_type, 0.0))
    return arith.MaximumFOp(element, zero.result).result


def map_elements(
    value: ir.Value, output_map: ir.AffineMap, body: Callable[[ir.Value], ir.Value]
) -> ir.Value:
    """Write `body` of each element of a tensor where `output_map` sends its position, as a
    `linalg.generic` of parallel loops at the insertion point; return the generic's result."""
    shaped = ir.RankedTensorType(value.type)
    element, rank = shaped.element_type, shaped.rank
    output_shape = [shaped.shape[position] for position in result_positions(output_map)]
    identity = ir.AffineMapAttr.get(ir.AffineMap.get_identity(rank))
    parallel = ir.Attribute.parse("#linalg.iterator_type<parallel>")
    empty = tensor.EmptyOp(output_shape, element)
    generic = linalg.GenericOp(
        [empty.result.type],
        [value],
        [empty.result],
        ir.ArrayAttr.get([identity, ir.AffineMapAttr.get(output_map)]),
        ir.ArrayAttr.get([parallel] * rank),
    )
    block = generic.regions[0].blocks.append(element, element)
    with ir.InsertionPoint(block):
        linalg.YieldOp([body(block.arguments[0])])
    return generic.results[0]
