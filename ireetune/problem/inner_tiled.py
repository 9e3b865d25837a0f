"""The inner-tiled family: `iree_codegen.inner_tiled`, the data-tiled matmul that IREE 3.13's
CPU codegen writes instead of `linalg.mmt4d` under `--iree-llvmcpu-enable-inner-tiled`.

Its maps cover the outer tiles only (M1 N1 K1); each operand's trailing dimensions are the
target's inner tile, laid out as its intrinsic's layout (`kind`) says. For a 256x512x384 f32
matmul on haswell:

    %acc = iree_codegen.inner_tiled ins(%lhs, %rhs) outs(%fill) <indexing_maps = [
        (d0, d1, d2) -> (d0, d2), (d0, d1, d2) -> (d1, d2), (d0, d1, d2) -> (d0, d1)], ...,
        kind = #iree_cpu.data_tiled_mma_layout<intrinsic = MMA_X86_AVX2_FMA_1x8x1_F32_F32,
        intrinsics_m = 13>, ...> {lowering_config = #iree_cpu.lowering_config<
        distribution = [1, 1, 0], vector_common_parallel = [1, 1, 0], vector_reduction = [0, 0, 1]>}
        : tensor<20x384x13x1x1xf32>, tensor<64x384x8x1xf32> into tensor<20x64x13x1x8xf32>

A spec reaches it in a model where the encodings are materialised before tuning specs apply (the
llvm-cpu target adds that step to every late data-tiled flag set: `with_materialize_first`);
`tests/targets/llvm_cpu/test_inner_tiled.py` pins it. Whatever the intrinsic's layout, the
products of the inner dimensions are M0*K0 (left), N0*K0 (right) and M0*N0 (result), which
gives the inner tile.

Its matcher names the op and checks its three operands' types (`typed_match.py`). Alone, IREE
3.13 does not compile the op through its default pipeline (the dispatch it forms stores the
result through a copy that is not distributed), so the reference program puts the op and its
zero accumulator in a `flow.dispatch.region` of their own, as the model's dispatch holds them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from iree.compiler import ir
from iree.compiler.dialects import arith, func, linalg, tensor

from ireetune.core.errors import IreetuneError
from ireetune.problem.family import (
    MatchPattern,
    Problem,
    ReferenceInputs,
    drop_config_attributes,
    element_type_name,
    narrow,
    static_shape,
    zero_of,
)
from ireetune.problem.generic import GenericOpProblem, dag_source
from ireetune.problem.typed_match import TypedOperandsFamily

INNER_TILED_OP = "iree_codegen.inner_tiled"
# The outer loops' maps IREE 3.13 writes for a data-tiled matmul: M1 N1 K1.
_MATMUL_MAPS = (
    "(d0, d1, d2) -> (d0, d2)",
    "(d0, d1, d2) -> (d1, d2)",
    "(d0, d1, d2) -> (d0, d1)",
)


@dataclass(frozen=True)
class InnerTiledProblem(GenericOpProblem):
    """An inner-tiled matmul's outer loops (M1 N1 K1), its operands and its source."""

    KIND = "inner_tiled"

    @property
    def iterator_types(self) -> tuple[str, ...]:
        return ("parallel", "parallel", "reduction")

    @property
    def inner_tile(self) -> tuple[int, int, int]:
        """Return the inner tile (M0, N0, K0) its operands' trailing dimensions hold."""
        return inner_tile_of(self.input_shapes[0], self.input_shapes[1], self.output_shape)

    @property
    def signature(self) -> str:
        """Name it by its outer and inner tiles and element types."""
        outer = "x".join(str(s) for s in self.loop_sizes)
        inner = "x".join(str(s) for s in self.inner_tile)
        types = "_".join((*self.input_types, self.output_type))
        return f"inner_tiled_{outer}_{inner}_{types}"

    @property
    def flops(self) -> int:
        return 2 * math.prod(self.loop_sizes) * math.prod(self.inner_tile)


def inner_tile_of(
    lhs: tuple[int, ...], rhs: tuple[int, ...], acc: tuple[int, ...]
) -> tuple[int, int, int]:
    """Read (M0, N0, K0) from the operands' trailing (inner) dimensions."""
    lhs_inner, rhs_inner, acc_inner = (math.prod(shape[2:]) for shape in (lhs, rhs, acc))
    k0 = math.isqrt(lhs_inner * rhs_inner // acc_inner) if acc_inner else 0
    if not k0 or k0 * k0 * acc_inner != lhs_inner * rhs_inner:
        raise IreetuneError(
            f"an {INNER_TILED_OP} whose inner dimensions ({lhs_inner}, {rhs_inner}, {acc_inner} "
            "elements) are no matmul tile is not supported yet"
        )
    return lhs_inner // k0, rhs_inner // k0, k0


def parse_inner_tiled(root_op: ir.Operation) -> InnerTiledProblem:
    """Parse an inner-tiled matmul of static shapes whose outer loops are M1 N1 K1."""
    operands = list(root_op.operands)
    if len(operands) != 3 or len(root_op.results) != 1:
        raise IreetuneError(
            f"an {INNER_TILED_OP} with {len(operands)} operands and {len(root_op.results)} "
            "results is not supported yet (a matmul's two inputs and one result are)"
        )
    maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(root_op.attributes["indexing_maps"])]
    texts = tuple(str(m) for m in maps)
    if tuple(text.removeprefix("affine_map<").removesuffix(">") for text in texts) != _MATMUL_MAPS:
        raise IreetuneError(
            f"an {INNER_TILED_OP} of maps {'; '.join(texts)} is not supported yet (a matmul's "
            "M1 N1 K1 outer loops are)"
        )
    lhs, rhs, acc = (
        static_shape(operand.type, f"the {INNER_TILED_OP}'s {name}")
        for operand, name in zip(operands, ("left operand", "right operand", "result"), strict=True)
    )
    if min(len(lhs), len(rhs), len(acc)) < 2 or (lhs[0], rhs[0], lhs[1]) != (*acc[:2], rhs[1]):
        raise IreetuneError(f"an {INNER_TILED_OP} whose outer tiles do not agree is not supported")
    inner_tile_of(lhs, rhs, acc)
    return InnerTiledProblem(
        kind=InnerTiledProblem.KIND,
        op_name=root_op.name,
        loop_sizes=(lhs[0], rhs[0], lhs[1]),
        input_types=tuple(element_type_name(operand.type) for operand in operands[:2]),
        input_shapes=(lhs, rhs),
        output_type=element_type_name(operands[2].type),
        output_shape=acc,
        indexing_maps=texts,
        body=(INNER_TILED_OP,),
        source=dag_source(root_op),
    )


class InnerTiledFamily(TypedOperandsFamily):
    """`iree_codegen.inner_tiled` matmuls, matched by their name and their operands' types."""

    name = "inner_tiled"
    record = InnerTiledProblem
    root_name = INNER_TILED_OP
    operand_count = 3

    def recognises(self, root_op: ir.Operation) -> bool:
        return root_op.name == INNER_TILED_OP

    def parse(self, root_op: ir.Operation) -> Problem:
        return parse_inner_tiled(root_op)

    def loops_of(self, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
        """M1 and K1 from the left operand, N1 from the right one."""
        lhs, rhs, _ = shapes
        return (lhs[0], rhs[0], lhs[1])

    def reference_inputs(self, problem: Problem) -> ReferenceInputs:
        """The reference program takes both operands; each result sums K1*K0 products."""
        record = narrow(problem, InnerTiledProblem)
        return ReferenceInputs(
            record.input_shapes,
            record.input_types,
            record.output_type,
            record.loop_sizes[2] * record.inner_tile[2],
        )

    def build_reference(
        self, root_op: ir.Operation, problem: Problem, context: ir.Context
    ) -> ir.Module:
        """Return `@main(lhs, rhs) -> result`, the op on a zero accumulator inside a
        `flow.dispatch.region` (see the module's docstring)."""
        with context, ir.Location.unknown():
            lhs_type, rhs_type, acc_type = (operand.type for operand in root_op.operands)
            shaped = ir.RankedTensorType(acc_type)
            module = ir.Module.create()
            with ir.InsertionPoint(module.body):
                function = func.FuncOp("main", ([lhs_type, rhs_type], [acc_type]))
                with ir.InsertionPoint(function.add_entry_block()):
                    region_op = ir.Operation.create(
                        "flow.dispatch.region",
                        results=[acc_type],
                        attributes={
                            "operandSegmentSizes": ir.DenseI32ArrayAttr.get([0, 0]),
                        },
                        regions=2,  # The body, and the workgroup count (left empty).
                    )
                    block = region_op.regions[0].blocks.append()
                    with ir.InsertionPoint(block):
                        element = shaped.element_type
                        value = arith.ConstantOp(element, zero_of(element))
                        empty = tensor.EmptyOp(list(shaped.shape), element)
                        init = linalg.fill(value.result, outs=[empty.result])
                        clone = root_op.clone()
                        clone.operands[0] = function.arguments[0]
                        clone.operands[1] = function.arguments[1]
                        clone.operands[2] = init
                        drop_config_attributes(clone)
                        ir.Operation.create("flow.return", operands=[clone.results[0]])
                    func.ReturnOp([region_op.results[0]])
            assert module.operation.verify(), "inner-tiled reference does not verify"
            return module

    def describe(self, pattern: MatchPattern) -> str:
        lhs, rhs, acc = pattern.types
        return f"inner_tiled {lhs} x {rhs} -> {acc}"
