"""The attention family: `iree_linalg_ext.online_attention`, as attention reaches codegen.

IREE turns `iree_linalg_ext.attention` into `online_attention` (a running maximum and sum beside
the accumulator) when it forms dispatches, so that is the op a dispatch's root is and the op a
tuning spec sees:

    %acc:3 = iree_linalg_ext.online_attention <indexing_maps = [#q, #k, #v, #scale, #out, #max,
        #sum]> ins(%q, %k, %v, %scale : tensor<4x128x64xf16>, ..., f16)
        outs(%acc, %max, %sum : tensor<4x128x64xf32>, tensor<4x128xf32>, tensor<4x128xf32>)

Loops by role (`iree_codegen.get_attention_op_detail`): batch, M (query rows), K1 (head size,
reduced in Q.K^T), K2 (key rows, reduced in P.V) and N (value columns). Its matcher is
`transform.iree.match.online_attention` with the seven types, the maps and the five groups'
sizes; its configuration is a `compilation_info` plus the `decomposition_config` that configures
the two matmuls inside. The reference program is the plain `iree_linalg_ext.attention` on the same
query, key and value, which IREE decomposes into the same `online_attention`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from iree.compiler import ir
from iree.compiler.dialects import iree_codegen

from ireetune.core.errors import IreetuneError
from ireetune.problem.family import (
    MatchOpSpec,
    MatchPattern,
    OpFamily,
    Problem,
    ReferenceInputs,
    bind_loop_sizes,
    element_type_name,
    narrow,
    static_shape,
    tensor_type_text,
)

ONLINE_ATTENTION = "iree_linalg_ext.online_attention"
ATTENTION_MATCH = MatchOpSpec(
    "transform.iree.match.online_attention",
    (
        "query_type",
        "key_type",
        "value_type",
        "scale_type",
        "output_type",
        "max_type",
        "sum_type",
    ),
    ("batch", "m", "n", "k1", "k2"),
)


@dataclass(frozen=True)
class AttentionProblem:
    """An online attention's loops by role, operand shapes and element types."""

    KIND: ClassVar[str] = "attention"
    # The reference program is `iree_linalg_ext.attention`, which becomes the same online
    # attention in its dispatch, so the spec's config lands there too.
    reference_carries_config: ClassVar[bool] = True

    kind: str
    op_name: str
    loop_sizes: tuple[int, ...]
    batch_dims: tuple[int, ...]
    m_dims: tuple[int, ...]
    k1_dims: tuple[int, ...]
    k2_dims: tuple[int, ...]
    n_dims: tuple[int, ...]
    query_type: str
    key_type: str
    value_type: str
    scale_type: str
    output_type: str
    max_type: str
    sum_type: str
    indexing_maps: tuple[str, ...]
    query_shape: tuple[int, ...]
    key_shape: tuple[int, ...]
    value_shape: tuple[int, ...]
    output_shape: tuple[int, ...]

    @property
    def family(self) -> str:
        return "attention"

    def sizes(self, dims: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(self.loop_sizes[d] for d in dims)

    @property
    def flops(self) -> int:
        """Count both matmuls (Q.K^T and P.V), multiply and add as two operations each."""
        batch = math.prod(self.sizes(self.batch_dims))
        m, k1 = math.prod(self.sizes(self.m_dims)), math.prod(self.sizes(self.k1_dims))
        k2, n = math.prod(self.sizes(self.k2_dims)), math.prod(self.sizes(self.n_dims))
        return 2 * batch * m * k2 * (k1 + n)

    @property
    def signature(self) -> str:
        """Name it by batch x M x K1 x K2 x N and the query, key, value and result types."""
        groups = (self.batch_dims, self.m_dims, self.k1_dims, self.k2_dims, self.n_dims)
        sizes = "x".join(str(s) for dims in groups for s in self.sizes(dims))
        types = f"{self.query_type}_{self.key_type}_{self.value_type}_{self.output_type}"
        return f"attention_{sizes}_{types}"


def parse_attention(root_op: ir.Operation) -> AttentionProblem:
    """Parse an `online_attention` with query, key, value, scale and no mask, all static."""
    if root_op.name != ONLINE_ATTENTION:
        raise IreetuneError(
            f"attention root op '{root_op.name}' is not supported; dispatches hold "
            f"'{ONLINE_ATTENTION}', which is"
        )
    operands = list(root_op.operands)
    maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(root_op.attributes["indexing_maps"])]
    if len(operands) != 7 or len(maps) != 7:
        raise IreetuneError(
            f"attention with {len(operands)} operands (a mask?) is not supported yet: query, "
            "key, value, scale and the three results are"
        )
    query, key, value, scale, output, maximum, total = operands
    detail = iree_codegen.get_attention_op_detail(maps[0], maps[1], maps[2], maps[4])
    shapes = [
        static_shape(operand.type, name)
        for operand, name in zip(
            (query, key, value, output), ("query", "key", "value", "output"), strict=True
        )
    ]
    loop_sizes = bind_loop_sizes(
        [maps[0], maps[1], maps[2], maps[4]], shapes, f"attention '{root_op.name}'"
    )
    return AttentionProblem(
        kind=AttentionProblem.KIND,
        op_name=root_op.name,
        loop_sizes=loop_sizes,
        batch_dims=tuple(detail.batch_dims),
        m_dims=tuple(detail.m_dims),
        k1_dims=tuple(detail.k1_dims),
        k2_dims=tuple(detail.k2_dims),
        n_dims=tuple(detail.n_dims),
        query_type=element_type_name(query.type),
        key_type=element_type_name(key.type),
        value_type=element_type_name(value.type),
        scale_type=str(scale.type),
        output_type=element_type_name(output.type),
        max_type=element_type_name(maximum.type),
        sum_type=element_type_name(total.type),
        indexing_maps=tuple(str(m) for m in maps),
        query_shape=shapes[0],
        key_shape=shapes[1],
        value_shape=shapes[2],
        output_shape=shapes[3],
    )


class AttentionFamily(OpFamily):
    """Attention, as `online_attention` in a dispatch."""

    name = "attention"
    match_op = ATTENTION_MATCH

    def recognises(self, root_op: ir.Operation) -> bool:
        return bool(iree_codegen.isa_attention_op(root_op)) or root_op.name == ONLINE_ATTENTION

    def parse(self, root_op: ir.Operation) -> Problem:
        return parse_attention(root_op)

    def expected_pattern(self, problem: Problem) -> MatchPattern:
        attention = narrow(problem, AttentionProblem)
        return MatchPattern(
            ATTENTION_MATCH.name,
            (
                attention.query_type, attention.key_type, attention.value_type,
                attention.scale_type, attention.output_type, attention.max_type,
                attention.sum_type,
            ),
            attention.indexing_maps,
            tuple(
                attention.sizes(dims)
                for dims in (
                    attention.batch_dims, attention.m_dims, attention.n_dims,
                    attention.k1_dims, attention.k2_dims,
                )
            ),
        )  # fmt: skip

    def reference_inputs(self, problem: Problem) -> ReferenceInputs:
        attention = narrow(problem, AttentionProblem)
        return ReferenceInputs(
            (attention.query_shape, attention.key_shape, attention.value_shape),
            (attention.query_type, attention.key_type, attention.value_type),
            attention.value_type,
            math.prod(attention.sizes(attention.k2_dims)),
        )

    def build_reference(
        self, root_op: ir.Operation, problem: Problem, context: ir.Context
    ) -> ir.Module:
        """Write the plain attention on the root op's query, key, value and scale:

        func.func @main(%q: tensor<4x128x64xf16>, %k: ..., %v: ...) -> tensor<4x128x64xf16> {
          %scale = arith.constant 0.125 : f16
          %r = iree_linalg_ext.attention <{indexing_maps = [#q, #k, #v, #s, #o]}>
              ins(%q, %k, %v, %scale : ...) outs(%empty : ...) { ... } -> tensor<4x128x64xf16>
        """
        attention = narrow(problem, AttentionProblem)
        scale = _scale_constant(root_op, math.prod(attention.sizes(attention.k1_dims)))
        q_map, k_map, v_map, s_map, o_map = attention.indexing_maps[:5]
        q_t = tensor_type_text(attention.query_shape, attention.query_type)
        k_t = tensor_type_text(attention.key_shape, attention.key_type)
        v_t = tensor_type_text(attention.value_shape, attention.value_type)
        o_t = tensor_type_text(attention.output_shape, attention.value_type)
        text = f"""
func.func @main(%q: {q_t}, %k: {k_t}, %v: {v_t}) -> {o_t} {{
  %scale = arith.constant {scale} : {attention.scale_type}
  %empty = tensor.empty() : {o_t}
  %r = iree_linalg_ext.attention <{{indexing_maps = [affine_map<{q_map}>, affine_map<{k_map}>,
      affine_map<{v_map}>, affine_map<{s_map}>, affine_map<{o_map}>]}}>
      ins(%q, %k, %v, %scale : {q_t}, {k_t}, {v_t}, {attention.scale_type})
      outs(%empty : {o_t}) {{
    ^bb0(%score: f32):
      iree_linalg_ext.yield %score : f32
  }} -> {o_t}
  return %r : {o_t}
}}
"""
        with context:
            module = ir.Module.parse(text)
        assert module.operation.verify(), "attention reference module does not verify"
        return module


def _scale_constant(root_op: ir.Operation, head_size: int) -> str:
    """Return the attention's scale as constant text: the dispatch's own when it is a constant,
    else the usual 1/sqrt(K1)."""
    owner = root_op.operands[3].owner
    if not isinstance(owner, ir.Block) and owner.operation.name == "arith.constant":
        return str(ir.FloatAttr(owner.operation.attributes["value"]).value)
    return repr(1.0 / math.sqrt(head_size))
