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
name.
"""

from __future__ import annotations

from dataclasses import dataclass

from iree.compiler import ir

from ireetune.core.errors import IreetuneError
from ireetune.problem.elementwise import ElementwiseProblem
from ireetune.problem.family import (
    MatchPattern,
    Problem,
    element_type_name,
    static_shape,
)
from ireetune.problem.generic import GenericOpFamily, dag_source

PACK_OP = "linalg.pack"


@dataclass(frozen=True)
class PackProblem(ElementwiseProblem):
    """A pack's loops (the destination's outer dimensions), its source and its destination."""

    KIND = "pack"

    @property
    def family(self) -> str:
        return "pack"

    @property
    def signature(self) -> str:
        """Name it by its source and destination shapes and element type."""
        (source,) = self.input_shapes
        source_text = "x".join(str(s) for s in source)
        dest_text = "x".join(str(s) for s in self.output_shape)
        return f"pack_{source_text}_to_{dest_text}_{self.output_type}"


def parse_pack(root_op: ir.Operation) -> PackProblem:
    """Parse a `linalg.pack` of static shapes without a padding value."""
    operands = list(root_op.operands)
    if len(operands) != 2:
        raise IreetuneError(
            f"a pack with {len(operands)} operands (a padding value?) is not supported yet"
        )
    source_shape = static_shape(operands[0].type, "the pack's source")
    dest_shape = static_shape(operands[1].type, "the pack's destination")
    return PackProblem(
        kind=PackProblem.KIND,
        op_name=root_op.name,
        loop_sizes=dest_shape[: len(source_shape)],
        input_types=(element_type_name(operands[0].type),),
        input_shapes=(source_shape,),
        output_type=element_type_name(operands[1].type),
        output_shape=dest_shape,
        indexing_maps=(),
        body=(PACK_OP,),
        source=dag_source(root_op),
    )


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

    def describe(self, pattern: MatchPattern) -> str:
        source, dest = pattern.types
        return f"pack {source} -> {dest}, loops={list(pattern.sizes[0] or ())}"
