"""The pack family: `linalg.pack`, the data-tiling layout change of a matmul's operand into the
mmt4d tile layout, in a dispatch of its own.

A spec reaches it in a model only when the encoding is materialised before tuning specs apply
(`--iree-global-opt-data-tiling`, early materialisation), not under `--iree-opt-data-tiling`
(`tests/targets/llvm_cpu/test_cpu_spec_reach.py` pins both). Its loops are the destination's
outer dimensions, one per source dimension; IREE 3.13 configures it with the DataTiling pipeline
and two levels over them. For a 64x96 f32 left-hand side on haswell:

    %pack = linalg.pack %lhs outer_dims_perm = [0, 1] inner_dims_pos = [0, 1] inner_tiles = [8, 1]
        into %dest : tensor<64x96xf32> -> tensor<8x96x8x1xf32>
    distribution = [1, 48], vector_common_parallel = [1, 1]

No match op describes a pack by its sizes: the matcher is a DAG matcher holding a copy of the op,
as for the generics (`generic.py`), and the record is the element-wise one, its body the op's
name. A pack whose rows are no multiple of its inner tile pads them with a constant of its
dispatch (`padding_value(%cst : f32)`); its matcher holds the padding value as an argument, which
matches it in a model, and its reference program keeps the constant.

The unpack family: `linalg.unpack`, the layout change back from the mmt4d tile layout (a
data-tiled matmul's result), in a dispatch of its own. A spec reaches it in a model under the
same flag as a pack, but a DAG matcher holding a copy of it does not (pinned in
`test_cpu_spec_reach.py`): its matcher names the op and checks its source's and destination's
types (`transform.match.operation_name` and `transform.iree.match.cast_compatible_type` on its
two operands). Its loops are the destination's dimensions; for the 64x128 f32 result of that
left-hand side's matmul IREE 3.13 configures on haswell

    %unpack = linalg.unpack %src outer_dims_perm = [0, 1] inner_dims_pos = [0, 1]
        inner_tiles = [8, 8] into %dest : tensor<8x16x8x8xf32> -> tensor<64x128xf32>
    distribution = [8, 64], vector_common_parallel = [8, 8]

Two unpacks of the same types with other tile positions would share a matcher; their loops are
the destination's either way, so a configuration fits both.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TypeVar

from iree.compiler import ir
from iree.compiler.dialects import func, tensor

from ireetune.core.errors import IreetuneError
from ireetune.problem.elementwise import ElementwiseProblem
from ireetune.problem.family import (
    MatchPattern,
    Problem,
    clone_as_main,
    drop_config_attributes,
    element_type_name,
    static_shape,
)
from ireetune.problem.generic import GenericOpFamily, dag_source, source_op
from ireetune.problem.typed_match import TypedOperandsFamily

PACK_OP = "linalg.pack"
UNPACK_OP = "linalg.unpack"
LayoutChange = TypeVar("LayoutChange", bound="LayoutChangeProblem")


@dataclass(frozen=True)
class LayoutChangeProblem(ElementwiseProblem):
    """A pack's or an unpack's loops, its source and its destination (its family is its kind)."""

    @property
    def signature(self) -> str:
        """Name it by its kind, its source and destination shapes and element type."""
        (source,) = self.input_shapes
        source_text = "x".join(str(s) for s in source)
        dest_text = "x".join(str(s) for s in self.output_shape)
        return f"{self.KIND}_{source_text}_to_{dest_text}_{self.output_type}"


def _layout_change(
    root_op: ir.Operation, record: type[LayoutChange], op: str, outer_loops_only: bool
) -> LayoutChange:
    """Read a pack or unpack of static shapes (source and destination, its first two operands)
    into its record: its loops are the destination's dimensions, or for a pack only those the
    source has (its outer ones)."""
    source, dest = list(root_op.operands)[:2]
    what = op.removeprefix("linalg.")
    source_shape = static_shape(source.type, f"the {what}'s source")
    dest_shape = static_shape(dest.type, f"the {what}'s destination")
    return record(
        kind=record.KIND,
        op_name=root_op.name,
        loop_sizes=dest_shape[: len(source_shape)] if outer_loops_only else dest_shape,
        input_types=(element_type_name(source.type),),
        input_shapes=(source_shape,),
        output_type=element_type_name(dest.type),
        output_shape=dest_shape,
        indexing_maps=(),
        body=(op,),
        source=dag_source(root_op),
    )


@dataclass(frozen=True)
class PackProblem(LayoutChangeProblem):
    """A pack's loops (the destination's outer dimensions), its source and its destination."""

    KIND = "pack"


def parse_pack(root_op: ir.Operation) -> PackProblem:
    """Parse a `linalg.pack` of static shapes, with no padding value or a constant one."""
    operands = list(root_op.operands)
    if len(operands) not in (2, 3):
        raise IreetuneError(f"a pack with {len(operands)} operands is not supported yet")
    # In a dispatch the padding value is a constant; in a matcher's copy, an argument.
    if len(operands) == 3 and not (
        _constant_op(operands[2]) is not None or isinstance(operands[2].owner, ir.Block)
    ):
        raise IreetuneError(
            "a pack whose padding value is no constant of its dispatch is not supported yet"
        )
    return _layout_change(root_op, PackProblem, PACK_OP, outer_loops_only=True)


def _constant_op(value: ir.Value) -> ir.Operation | None:
    """Return the `arith.constant` that defines a value (None for any other definition)."""
    owner = value.owner
    if isinstance(owner, ir.Block) or owner.operation.name != "arith.constant":
        return None
    return owner.operation


class PackFamily(GenericOpFamily):
    """`linalg.pack` ops, matched by a DAG matcher holding a copy of the op."""

    name = "pack"
    record = PackProblem
    root_name = PACK_OP

    def recognises(self, root_op: ir.Operation) -> bool:
        return root_op.name == PACK_OP and len(root_op.results) == 1

    def parse(self, root_op: ir.Operation) -> Problem:
        return parse_pack(root_op)

    def claims(self, pattern: MatchPattern) -> bool:
        return PACK_OP in pattern.body

    def build_reference(
        self, root_op: ir.Operation, problem: Problem, context: ir.Context
    ) -> ir.Module:
        """Return `@main(source) -> packed`; a padded pack keeps its dispatch's padding
        constant (a matmul whose rows are no multiple of the inner tile has one)."""
        operands = list(root_op.operands)
        if len(operands) == 2:
            return clone_as_main(root_op, context, init_value=None)
        source, dest, padding = operands
        constant = _constant_op(padding)
        if constant is None:
            raise IreetuneError("a padded pack's reference needs its dispatch's padding constant")
        with context, ir.Location.unknown():
            module = ir.Module.create()
            with ir.InsertionPoint(module.body):
                function = func.FuncOp("main", ([source.type], [dest.type]))
                with ir.InsertionPoint(function.add_entry_block()):
                    value = constant.clone().results[0]
                    dest_type = ir.RankedTensorType(dest.type)
                    empty = tensor.EmptyOp(list(dest_type.shape), dest_type.element_type)
                    clone = root_op.clone()
                    clone.operands[0] = function.arguments[0]
                    clone.operands[1] = empty.result
                    clone.operands[2] = value
                    drop_config_attributes(clone)
                    func.ReturnOp([clone.results[0]])
            assert module.operation.verify(), "padded pack reference does not verify"
            return module

    def describe(self, pattern: MatchPattern) -> str:
        source, dest = pattern.types
        return f"pack {source} -> {dest}, loops={list(pattern.sizes[0] or ())}"


@dataclass(frozen=True)
class UnpackProblem(LayoutChangeProblem):
    """An unpack's loops (the destination's dimensions), its source and its destination."""

    KIND = "unpack"

    @property
    def inner_tiles(self) -> tuple[int, ...]:
        """Return, per destination dimension, the inner tile the unpack reads it in (1 for a
        dimension no inner tile covers), read from the op its record holds (its `source`; the
        record has no field for them, so that stored keys stay as they were)."""
        return _read_inner_tiles(self.source, len(self.output_shape))


@functools.lru_cache(maxsize=256)
def _read_inner_tiles(source: str, rank: int) -> tuple[int, ...]:
    """Read an unpack's `inner_dims_pos` and `inner_tiles` (static) into one tile per
    destination dimension."""
    tiles = [1] * rank
    with ir.Context():
        unpack = source_op(ir.Module.parse(source), UNPACK_OP)
        positions = ir.DenseI64ArrayAttr(unpack.attributes["inner_dims_pos"])
        sizes = ir.DenseI64ArrayAttr(unpack.attributes["static_inner_tiles"])
        for dim, tile in zip(positions, sizes, strict=True):
            if tile > 0:  # A dynamic inner tile (a negative sentinel) constrains nothing.
                tiles[dim] = tile
    return tuple(tiles)


def parse_unpack(root_op: ir.Operation) -> UnpackProblem:
    """Parse a `linalg.unpack` of static shapes."""
    operands = list(root_op.operands)
    if len(operands) != 2:
        raise IreetuneError(f"an unpack with {len(operands)} operands is not supported yet")
    return _layout_change(root_op, UnpackProblem, UNPACK_OP, outer_loops_only=False)


class UnpackFamily(TypedOperandsFamily):
    """`linalg.unpack` ops, matched by their name and their two operands' types."""

    name = "unpack"
    record = UnpackProblem
    root_name = UNPACK_OP
    operand_count = 2

    def recognises(self, root_op: ir.Operation) -> bool:
        return root_op.name == UNPACK_OP and len(root_op.results) == 1

    def parse(self, root_op: ir.Operation) -> Problem:
        return parse_unpack(root_op)

    def loops_of(self, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
        """An unpack's loops are its destination's dimensions."""
        return shapes[1]

    def describe(self, pattern: MatchPattern) -> str:
        source, dest = pattern.types
        return f"unpack {source} -> {dest}"
