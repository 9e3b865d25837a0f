"""The buffer-copy family: a copy-only `linalg.generic` on buffers, IREE's `..._slow_memcpy`
dispatch, which copies a padded tensor's input into its padded buffer.

IREE 3.13 bufferises a copy-only dispatch before it applies tuning specs, so the root a dispatch
shows holds memrefs, its destination a strided window of the padded buffer:

    linalg.generic {indexing_maps = [identity, identity], iterator_types = [parallel x 3]}
        ins(%in : memref<3x32x32xf32>)
        outs(%window : memref<3x32x32xf32, strided<[1444, 38, 1], offset: 117>>) {
      ^bb0(%a: f32, %b: f32):
        linalg.yield %a : f32
    }
    BufferOpsTileAndVectorize: distribution = [3, 32, 32], vector_common_parallel = [1, 1, 8]

(haswell: one workgroup for the whole copy). Neither a DAG matcher holding a copy of it nor a type
check (`cast_compatible_type` takes tensors only) reaches it, but a structured matcher does
(`tests/targets/llvm_cpu/test_cpu_spec_reach.py` pins all three): its matcher requires a body that
only passes its input through, the loop sizes, and the element's bit width. A transpose or copy
on tensors of the same loop sizes and element width in another dispatch would match too.

The reference program is the pad itself (`tensor.pad` of the input with zeros into the padded
shape, read back from the window's strides and offset): IREE compiles it to the same copy
dispatch, so the program carries a candidate's configuration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from iree.compiler import ir
from iree.compiler.dialects import transform

from ireetune.core.errors import IreetuneError
from ireetune.problem.elementwise import ElementwiseProblem
from ireetune.problem.family import (
    MatchOpSpec,
    MatchPattern,
    Problem,
    bind_loop_sizes,
    element_bytes,
    element_type_name,
    narrow,
    static_shape,
    tensor_type_text,
)
from ireetune.problem.generic import (
    STRUCTURED_MATCH,
    GenericOpFamily,
    build_loop_sizes_match,
    build_structured_operand,
    dag_source,
    iterator_names,
    structured_match,
)
from ireetune.problem.op_kind import name_root_op

BUFFER_COPY_MATCH = MatchOpSpec(STRUCTURED_MATCH, (), ("loops",))
PASSTHROUGH = "passthrough"


@dataclass(frozen=True)
class Padding:
    """Where a copy's window lies in its padded buffer: the padded shape and the low padding."""

    padded_shape: tuple[int, ...]
    low: tuple[int, ...]


@dataclass(frozen=True)
class BufferCopyProblem(ElementwiseProblem):
    """A copy on buffers: its loops, its source and its window's memref types (in `source`)."""

    KIND = "buffer_copy"

    @property
    def signature(self) -> str:
        """Name it by its loop sizes and element type."""
        sizes = "x".join(str(s) for s in self.loop_sizes)
        return f"buffer_copy_{sizes}_{self.output_type}"

    @property
    def bit_width(self) -> int:
        """Return the element's width in bits."""
        return 8 * element_bytes(self.output_type)


def _is_whole_buffer(memref: ir.MemRefType) -> bool:
    """Say whether a memref is a whole row-major buffer: no layout, or the row-major strides at
    any offset (a dispatch binding's, often dynamic)."""
    try:
        layout = ir.StridedLayoutAttr(memref.layout)
    except ValueError:
        identity = ir.AffineMap.get_identity(memref.rank, memref.context)
        return ir.AffineMapAttr(memref.layout).value == identity
    shape = list(memref.shape)
    return list(layout.strides) == [math.prod(shape[i + 1 :]) for i in range(len(shape))]


def window_padding(source: ir.Type, window: ir.Type) -> Padding | None:
    """Read the padded buffer a window of `window`'s strided layout lies in: the strides give
    the padded sizes (all but the outermost), the offset the low padding; a dynamic offset (a
    dispatch binding's) is read as even padding. None when the source is no whole buffer, or the
    window no window of a padded row-major buffer."""
    source_type, window_type = ir.MemRefType(source), ir.MemRefType(window)
    if not _is_whole_buffer(source_type):
        return None
    try:
        layout = ir.StridedLayoutAttr(window_type.layout)
    except ValueError:
        return None
    sizes, strides, offset = list(window_type.shape), list(layout.strides), layout.offset
    if not sizes or strides[-1] != 1 or any(stride <= 0 for stride in strides):
        return None
    # Each stride is the padded size of the dimension inside it times that one's stride.
    padded = [0] * len(sizes)
    for i in range(len(sizes) - 1, 0, -1):
        if strides[i - 1] % strides[i]:
            return None
        padded[i] = strides[i - 1] // strides[i]
    if offset == ir.ShapedType.get_dynamic_stride_or_offset():
        low = [0] + [(pad - size) // 2 for pad, size in zip(padded[1:], sizes[1:], strict=True)]
    elif offset >= 0:
        low = [offset // strides[0]] + [
            (offset // strides[i]) % padded[i] for i in range(1, len(sizes))
        ]
        if sum(lo * stride for lo, stride in zip(low, strides, strict=True)) != offset:
            return None
    else:
        return None
    padded[0] = low[0] + sizes[0]
    if any(lo < 0 or lo + size > pad for lo, size, pad in zip(low, sizes, padded, strict=True)):
        return None
    return Padding(tuple(padded), tuple(low))


def _is_copy_on_buffers(root_op: ir.Operation) -> bool:
    """Say whether the op is a generic on buffers, of parallel loops, that only yields its one
    input."""
    if root_op.name != "linalg.generic" or root_op.results or len(root_op.operands) != 2:
        return False
    if "reduction" in iterator_names(root_op):
        return False
    block = root_op.regions[0].blocks[0]
    operations = [op.operation for op in block.operations]
    return (
        len(operations) == 1
        and operations[0].name == "linalg.yield"
        and list(operations[0].operands) == [block.arguments[0]]
    )


def parse_buffer_copy(root_op: ir.Operation) -> BufferCopyProblem:
    """Parse a copy on buffers into a padded buffer's window."""
    source, window = (operand.type for operand in root_op.operands)
    if window_padding(source, window) is None:
        raise IreetuneError(
            f"{name_root_op(root_op)} on buffers is not tuned: it copies {source} into {window}, "
            "not a whole buffer into a window of a padded one (the only copy on buffers whose "
            "reference program, the pad, ireetune can write)"
        )
    maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(root_op.attributes["indexing_maps"])]
    if any(m != ir.AffineMap.get_identity(m.n_dims, root_op.context) for m in maps):
        raise IreetuneError(
            f"{name_root_op(root_op)} on buffers is not tuned: it moves elements (a transpose), "
            "which no pad's copy does"
        )
    shapes = [static_shape(t, f"operand {i}") for i, t in enumerate((source, window))]
    return BufferCopyProblem(
        kind=BufferCopyProblem.KIND,
        op_name=root_op.name,
        loop_sizes=bind_loop_sizes(maps, shapes, "a copy on buffers"),
        input_types=(element_type_name(source),),
        input_shapes=(shapes[0],),
        output_type=element_type_name(window),
        output_shape=shapes[1],
        indexing_maps=tuple(str(m) for m in maps),
        body=("linalg.yield",),
        source=dag_source(root_op),
    )


def _memref_types(problem: BufferCopyProblem, context: ir.Context) -> tuple[ir.Type, ir.Type]:
    """Return the copy's source and window types, read from its source (`func @reduction`)."""
    module = ir.Module.parse(problem.source, context)
    function = module.body.operations[0]
    source, window = function.regions[0].blocks[0].arguments
    return source.type, window.type


class BufferCopyFamily(GenericOpFamily):
    """Copies on buffers into a padded buffer, matched by a structured matcher."""

    name = "buffer_copy"
    record = BufferCopyProblem
    match_op = BUFFER_COPY_MATCH

    def recognises(self, root_op: ir.Operation) -> bool:
        return _is_copy_on_buffers(root_op)

    def parse(self, root_op: ir.Operation) -> Problem:
        return parse_buffer_copy(root_op)

    def expected_pattern(self, problem: Problem) -> MatchPattern:
        copy = narrow(problem, BufferCopyProblem)
        return MatchPattern(
            STRUCTURED_MATCH, (f"{copy.bit_width}-bit",), (), (copy.loop_sizes,), (PASSTHROUGH,)
        )

    def build_reference(
        self, root_op: ir.Operation, problem: Problem, context: ir.Context
    ) -> ir.Module:
        """Return `@main(input) -> padded`: the pad whose copy the dispatch is."""
        copy = narrow(problem, BufferCopyProblem)
        with context:
            source, window = _memref_types(copy, context)
            padding = window_padding(source, window)
        assert padding is not None, "parse_buffer_copy checked the window"
        element = copy.output_type
        zero = "0.0" if element.startswith(("f", "bf")) else "0"
        (source_shape,) = copy.input_shapes
        source_type = tensor_type_text(source_shape, element)
        padded_type = tensor_type_text(padding.padded_shape, element)
        high = [
            pad - low - size
            for pad, low, size in zip(padding.padded_shape, padding.low, source_shape, strict=True)
        ]
        indices = ", ".join(f"%i{i}: index" for i in range(len(source_shape)))
        text = f"""
func.func @main(%input: {source_type}) -> {padded_type} {{
  %zero = arith.constant {zero} : {element}
  %padded = tensor.pad %input low{list(padding.low)} high{high} {{
  ^bb0({indices}):
    tensor.yield %zero : {element}
  }} : {source_type} to {padded_type}
  return %padded : {padded_type}
}}
"""
        return ir.Module.parse(text, context)

    def build_matcher(self, problem: Problem, op_handle: ir.Value) -> None:
        """Emit a structured matcher: a body that passes its input through, the loop sizes
        (`dims_equal`) and the element's bit width."""
        copy = narrow(problem, BufferCopyProblem)
        param = ir.Type.parse("!transform.param<i64>")
        i64 = ir.IntegerType.get_signless(64)
        with structured_match(op_handle) as handle:
            ir.Operation.create(
                "transform.match.structured.body",
                operands=[handle],
                attributes={PASSTHROUGH: ir.UnitAttr.get()},
            )
            build_loop_sizes_match(handle, copy.loop_sizes)
            init = build_structured_operand(handle, "init", 0)
            width = ir.Operation.create(
                "transform.match.structured.elemental_bitwidth", results=[param], operands=[init]
            ).result
            expected = transform.ParamConstantOp(param, ir.IntegerAttr.get(i64, copy.bit_width))
            ir.Operation.create(
                "transform.match.param.cmpi",
                operands=[width, expected.result],
                attributes={"predicate": ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 0)},
            )

    def claims(self, pattern: MatchPattern) -> bool:
        return pattern.body == (PASSTHROUGH,)

    def read_pattern(self, match_op: ir.Operation, body: list[ir.Operation]) -> MatchPattern | None:
        """Read a structured matcher of exactly this form (passthrough body, all dims equal to
        sizes, the init's bit width equal to a constant); None for any other."""
        inner = [op.operation for op in match_op.regions[0].blocks[0].operations]
        names = [op.name for op in inner]
        if names != [
            "transform.match.structured.body",
            "transform.match.structured.dim",
            "transform.iree.match.dims_equal",
            "transform.match.structured.init",
            "transform.match.structured.elemental_bitwidth",
            "transform.param.constant",
            "transform.match.param.cmpi",
            "transform.match.structured.yield",
        ]:
            return None
        body_op, dim_op, dims_equal, _, _, constant, cmpi, _ = inner
        if PASSTHROUGH not in body_op.attributes or "is_all" not in dim_op.attributes:
            return None
        if ir.IntegerAttr(cmpi.attributes["predicate"]).value != 0:
            return None
        sizes = tuple(ir.DenseI64ArrayAttr(dims_equal.attributes["expected_values"]))
        width = ir.IntegerAttr(constant.attributes["value"]).value
        if not sizes or math.prod(sizes) <= 0:
            return None
        return MatchPattern(STRUCTURED_MATCH, (f"{width}-bit",), (), (sizes,), (PASSTHROUGH,))

    def describe(self, pattern: MatchPattern) -> str:
        (width,) = pattern.types
        return f"copy on buffers, loops={list(pattern.sizes[0] or ())}, {width} elements"
