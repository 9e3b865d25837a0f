"""A hand-written VectorDistribute space for attention, where IREE 3.13 emits none (CUDA).

IREE 3.13 emits attention constraints on ROCm only. Their template is the model for this one
(`iree_codegen.smt.constraints` for a gfx942 attention, docs/gpu.md): the attention op's
`lowering_config` tiles the batch loops by 1, M by `m_tile`, N by `n_tile` and K2 (the key rows)
by `red_k2`; its `decomposition_config` gives each of the two matmuls inside (Q.K^T and P.V) an
intrinsic and the subgroup layout:

    decomposition_config = {
      qk_attrs = {lowering_config = #iree_gpu.lowering_config<{mma_kind = <qk_mma>,
          promote_operands = [0, 1], subgroup_basis = [[1, sg_m_cnt, 1, 1, sg_n_cnt], [0, 1, 2, 3]], ...}>},
      pv_attrs = {lowering_config = #iree_gpu.lowering_config<{mma_kind = <pv_mma>,
          promote_operands = [1], subgroup_basis = [[1, sg_m_cnt, 1, 1, sg_n_cnt], [0, 1, 3, 4]], ...}>}}

The constraints restate the compiler's for ROCm with the target's own intrinsics: tiles divide
their loops and are whole multiples of the intrinsic (M by `sg_m_cnt` x mma M, N by
`sg_n_cnt` x mma N, K2 by the P.V intrinsic's K and the Q.K^T intrinsic's N), K1 is a multiple of
the Q.K^T intrinsic's K, one intrinsic for both matmuls (their accumulator layouts must agree),
one subgroup along N (as the ROCm emitter requires), whole subgroups within the thread limit, and
the query, key, value and probability tiles in shared memory. `NV_WMMA` intrinsics are left out: every WMMA
candidate crashed codegen in the matmul experiments (REFERENCE.md).
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

import z3
from iree.compiler import ir
from iree.compiler.dialects import iree_gpu

from ireetune.core.errors import IreetuneError
from ireetune.problem.attention import AttentionProblem
from ireetune.problem.family import Problem, narrow
from ireetune.targets.gpu.constraints import CompilerSpace, ConstraintSpace, make_space
from ireetune.targets.gpu.ordering import occupancy_loss
from ireetune.targets.gpu.template import (
    IntKnob,
    LoweringConfigNode,
    OneOfKnob,
    OpaqueAttr,
    ResolvedDict,
    TemplateDict,
    TemplateValue,
)
from ireetune.targets.z3_enumerate import divisors, one_of

if TYPE_CHECKING:
    from ireetune.targets.gpu.facts import GpuFacts

ATTENTION_PIPELINE = "VectorDistribute"
DERIVED = OpaqueAttr("#iree_gpu.derived_thread_config")
_MAX_TILE = 256
_SUBGROUP_COUNTS = (1, 2, 4, 8)
_BYTES = {"f16": 2, "bf16": 2, "f32": 4}


def _intrinsics(facts: GpuFacts, input_type: str) -> list[tuple[str, tuple[int, int, int]]]:
    """Return the target's MMA intrinsics for this input type with an f32 accumulator, and
    their M x N x K shapes."""
    wanted = {"f16": "F16", "bf16": "BF16"}.get(input_type)
    if wanted is None:
        return []
    found = []
    with ir.Context():
        for name in facts.intrinsics:
            shape = re.search(r"_([A-Z0-9]+)_\d+x\d+x\d+_([A-Z0-9]+)$", name)
            if name.startswith("NV_WMMA") or shape is None:
                continue
            if shape.groups() != ("F32", wanted):
                continue
            text = f"#iree_gpu.mma_layout<{name}>"
            attribute = iree_gpu.MMAAttr(ir.Attribute.parse(text))
            m, n, k = attribute.mnk_shape
            found.append((text, (int(m), int(n), int(k))))
    return found


def attention_spaces(
    problem: Problem, facts: GpuFacts, compiler: CompilerSpace
) -> tuple[ConstraintSpace, ...]:
    """Write the VectorDistribute attention space (one space, index 0), or none when the
    target has no suitable intrinsic."""
    attention = narrow(problem, AttentionProblem)
    if any(
        len(dims) != 1
        for dims in (attention.m_dims, attention.k1_dims, attention.k2_dims, attention.n_dims)
    ):
        raise IreetuneError(
            f"{attention.signature}: attention with several M, K1, K2 or N loops has no "
            "hand-written space yet"
        )  # fmt: skip
    intrinsics = _intrinsics(facts, attention.query_type)
    if not intrinsics:
        return ()
    (m_dim,), (k1_dim,), (k2_dim,), (n_dim,) = (
        attention.m_dims, attention.k1_dims, attention.k2_dims, attention.n_dims,
    )  # fmt: skip
    m, k1, k2, n = (attention.loop_sizes[d] for d in (m_dim, k1_dim, k2_dim, n_dim))
    subgroup = facts.subgroup_sizes[0]
    context = z3.Context()
    names = ("m_tile", "n_tile", "red_k2", "sg_m_cnt", "sg_n_cnt", "qk_mma_idx", "pv_mma_idx",
             "sg_size", "wg_size_x")  # fmt: skip
    v = {name: z3.Int(name, context) for name in names}
    element_bytes = _BYTES.get(attention.query_type, 2)
    constraints = [
        one_of(v["m_tile"], divisors(m, _MAX_TILE)),
        one_of(v["n_tile"], divisors(n, _MAX_TILE)),
        one_of(v["red_k2"], divisors(k2, _MAX_TILE)),
        one_of(v["sg_m_cnt"], list(_SUBGROUP_COUNTS)),
        v["sg_n_cnt"] == 1,
        v["qk_mma_idx"] >= 0,
        v["qk_mma_idx"] < len(intrinsics),
        v["pv_mma_idx"] == v["qk_mma_idx"],
        v["sg_size"] == subgroup,
        v["wg_size_x"] == v["sg_m_cnt"] * v["sg_n_cnt"] * v["sg_size"],
        v["wg_size_x"] <= facts.max_threads,
        # Q, K and V tiles, and the probabilities P (M x K2) the second matmul reads.
        (
            v["m_tile"] * k1
            + v["red_k2"] * k1
            + v["red_k2"] * v["n_tile"]
            + v["m_tile"] * v["red_k2"]
        )
        * element_bytes
        <= facts.max_workgroup_memory_bytes,
    ]
    for index, (_, (mma_m, mma_n, mma_k)) in enumerate(intrinsics):
        chosen = v["qk_mma_idx"] == index
        constraints += [
            z3.Implies(chosen, v["m_tile"] % (v["sg_m_cnt"] * mma_m) == 0),
            z3.Implies(chosen, v["n_tile"] % (v["sg_n_cnt"] * mma_n) == 0),
            z3.Implies(chosen, v["red_k2"] % mma_k == 0),
            z3.Implies(chosen, v["red_k2"] % mma_n == 0),
            z3.Implies(chosen, z3.BoolVal(k1 % mma_k == 0, context)),
        ]
    loops = len(attention.loop_sizes)

    def per_loop(values: dict[int, TemplateValue], batch: int, other: int) -> list[TemplateValue]:
        return [values.get(d, batch if d in attention.batch_dims else other) for d in range(loops)]

    basis = per_loop({m_dim: IntKnob("sg_m_cnt"), n_dim: IntKnob("sg_n_cnt")}, 1, 1)
    options = tuple(text for text, _ in intrinsics)

    def matmul_config(knob: str, promoted: list[int], mapping: list[int]) -> TemplateValue:
        return {
            "lowering_config": LoweringConfigNode(
                {
                    "mma_kind": OneOfKnob(knob, options),
                    "promote_operands": promoted,  # type: ignore[dict-item]
                    "promotion_types": [DERIVED] * len(promoted),
                    "subgroup_basis": [basis, mapping],  # type: ignore[list-item]
                }
            )
        }

    template: TemplateDict = {
        "decomposition_config": {
            "qk_attrs": matmul_config(
                "qk_mma_idx", [0, 1], [d for d in range(loops) if d != n_dim]
            ),
            "pv_attrs": matmul_config("pv_mma_idx", [1], [d for d in range(loops) if d != k1_dim]),
        },
        "promote_operands": [0, 1, 2],
        "promotion_types": [DERIVED, DERIVED, DERIVED],
        "reduction": per_loop({k2_dim: IntKnob("red_k2")}, 0, 0),
        "subgroup_size": IntKnob("sg_size"),
        "workgroup": per_loop({m_dim: IntKnob("m_tile"), n_dim: IntKnob("n_tile")}, 1, 0),
        "workgroup_size": [IntKnob("wg_size_x"), 1, 1],
    }
    shapes = dict(intrinsics)
    return (make_space(0, ATTENTION_PIPELINE, template, constraints, context, shapes),)


def score_attention(
    problem: Problem, space: ConstraintSpace, config: ResolvedDict, facts: GpuFacts
) -> float:
    """Score an attention configuration: enough workgroups for the GPU, M tiles of 64-128 rows
    (each K/V tile loaded is reused by more query rows), a K2 tile of 64, and 128-256 threads."""
    attention = narrow(problem, AttentionProblem)
    workgroup = config.get("workgroup")
    reduction = config.get("reduction")
    sizes_wanted = isinstance(workgroup, list) and isinstance(reduction, list)
    assert sizes_wanted, f"attention config without tiles: {config}"
    m_dim, n_dim, k2_dim = attention.m_dims[0], attention.n_dims[0], attention.k2_dims[0]
    m_tile = int(workgroup[m_dim])  # type: ignore[index, arg-type]
    n_tile = int(workgroup[n_dim])  # type: ignore[index, arg-type]
    red_k2 = int(reduction[k2_dim])  # type: ignore[index, arg-type]
    size = attention.loop_sizes
    batch = math.prod(size[d] for d in attention.batch_dims)
    workgroups = batch * (size[m_dim] // m_tile) * (size[n_dim] // n_tile)
    threads = config.get("workgroup_size")
    thread_count = 1
    for count in threads if isinstance(threads, list) else []:
        thread_count *= int(count) if isinstance(count, int) else 1
    m_fit = -abs(math.log2(m_tile / 64.0)) / 2.0
    k2_fit = -abs(math.log2(red_k2 / 64.0)) / 2.0
    n_whole = 0.5 if n_tile == size[n_dim] else 0.0
    threads_off = 0.0 if 128 <= thread_count <= 256 else 0.5
    idle = occupancy_loss(workgroups, facts.compute_units)
    return m_fit + k2_fit + n_whole - 1.5 * idle - threads_off
