"""A SIMT TileAndFuse space for contractions without a matrix instruction (f32 on CUDA).

sm_80 has no f32 MMA, and IREE 3.13 emits no constraints for such a contraction; its own choice
for a 256x512x384 f32 matmul is TileAndFuse without `mma_kind`, every thread computing a small
block of the output from global memory (no promotion):

    {workgroup = [32, 128, 1], thread = [1, 16, 0], reduction = [0, 0, 32]},
    workgroup_size = [32, 8, 1], subgroup_size = 32

The knobs: the workgroup tile of the innermost M and N loops (`wg_m`, `wg_n`), each thread's
block of it (`th_m`, `th_n`), the K tile (`red_k`) and the workgroup shape (`wg_size_x`,
`wg_size_y`). The constraints: tiles divide the loops and nest, the threads are whole subgroups
within the target's limit, and the thread block (`th_m` x `th_n` accumulators) fits in registers.
Every other parallel loop gets tile 1. Checked by compiling: every sampled candidate of the test
problems compiled (docs/benchmarks.md).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import z3

from ireetune.problem.contraction import ContractionProblem
from ireetune.problem.family import Problem, narrow
from ireetune.targets.gpu.constraints import CompilerSpace, ConstraintSpace, make_space
from ireetune.targets.gpu.ordering import occupancy_loss
from ireetune.targets.gpu.template import IntKnob, ResolvedDict, TemplateDict, TemplateValue
from ireetune.targets.z3_enumerate import divisors, one_of

if TYPE_CHECKING:
    from ireetune.targets.gpu.facts import GpuFacts

SIMT_PIPELINE = "TileAndFuse"
_THREAD_TILES = (1, 2, 4, 8, 16)
# Accumulators of one thread's block; the default's 1 x 16 is well inside.
_MAX_THREAD_BLOCK = 64
_WORKGROUP_SHAPES = (32, 64, 128, 256, 512, 1024)


def simt_contraction_spaces(
    problem: Problem, facts: GpuFacts, compiler: CompilerSpace
) -> tuple[ConstraintSpace, ...]:
    """Write the SIMT space of a contraction (one space, index 0)."""
    contraction = narrow(problem, ContractionProblem)
    m_dim, n_dim, k_dim = contraction.m_dims[-1], contraction.n_dims[-1], contraction.k_dims[-1]
    m, n, k = (contraction.loop_sizes[d] for d in (m_dim, n_dim, k_dim))
    subgroup = facts.subgroup_sizes[0]
    context = z3.Context()
    v = {
        name: z3.Int(name, context)
        for name in ("wg_m", "wg_n", "th_m", "th_n", "red_k", "wg_size_x", "wg_size_y")
    }
    threads = (v["wg_m"] / v["th_m"]) * (v["wg_n"] / v["th_n"])
    constraints = [
        one_of(v["wg_m"], divisors(m, 256)),
        one_of(v["wg_n"], divisors(n, 256)),
        one_of(v["th_m"], [t for t in _THREAD_TILES if m % t == 0]),
        one_of(v["th_n"], [t for t in _THREAD_TILES if n % t == 0]),
        one_of(v["red_k"], divisors(k, 128)),
        v["wg_m"] % v["th_m"] == 0,
        v["wg_n"] % v["th_n"] == 0,
        v["th_m"] * v["th_n"] <= _MAX_THREAD_BLOCK,
        threads % subgroup == 0,
        threads <= facts.max_threads,
        one_of(v["wg_size_x"], [x for x in _WORKGROUP_SHAPES if x <= facts.max_threads]),
        v["wg_size_y"] >= 1,
        v["wg_size_x"] * v["wg_size_y"] == threads,
    ]
    loops = len(contraction.loop_sizes)

    def per_loop(
        m_value: TemplateValue, n_value: TemplateValue, k_value: TemplateValue, other: int
    ) -> list[TemplateValue]:
        """Place the M, N and K entries; other K loops get 0, other loops `other`."""
        values: list[TemplateValue] = [other] * loops
        for dim in contraction.k_dims:
            values[dim] = 0
        values[m_dim], values[n_dim], values[k_dim] = m_value, n_value, k_value
        return values

    template: TemplateDict = {
        "workgroup": per_loop(IntKnob("wg_m"), IntKnob("wg_n"), 1, 1),
        "thread": per_loop(IntKnob("th_m"), IntKnob("th_n"), 0, 1),
        "reduction": [
            IntKnob("red_k") if d == k_dim else (1 if d in contraction.k_dims else 0)
            for d in range(loops)
        ],
        "workgroup_size": [IntKnob("wg_size_x"), IntKnob("wg_size_y"), 1],
        "subgroup_size": subgroup,
        "gpu_pipeline_options": {"no_reduce_shared_memory_bank_conflicts": True},
    }
    return (make_space(0, SIMT_PIPELINE, template, constraints, context),)


def score_simt(
    problem: Problem, space: ConstraintSpace, config: ResolvedDict, facts: GpuFacts
) -> float:
    """Score a SIMT configuration: enough workgroups, 128-256 threads, a register block of
    8-32 accumulators per thread, a K tile of 16-32, and a square-ish workgroup tile."""
    contraction = narrow(problem, ContractionProblem)
    m_dim, n_dim = contraction.m_dims[-1], contraction.n_dims[-1]
    workgroup = config["workgroup"]
    thread = config["thread"]
    reduction = config["reduction"]
    assert isinstance(workgroup, list) and isinstance(thread, list) and isinstance(reduction, list)
    wg_m, wg_n = int(workgroup[m_dim]), int(workgroup[n_dim])  # type: ignore[arg-type]
    th_m, th_n = int(thread[m_dim]), int(thread[n_dim])  # type: ignore[arg-type]
    red_k = int(reduction[contraction.k_dims[-1]])  # type: ignore[arg-type]
    threads = (wg_m // th_m) * (wg_n // th_n)
    outer = math.prod(
        contraction.loop_sizes[d]
        for d in (*contraction.batch_dims, *contraction.m_dims[:-1], *contraction.n_dims[:-1])
    )
    workgroups = (
        outer * (contraction.loop_sizes[m_dim] // wg_m) * (contraction.loop_sizes[n_dim] // wg_n)
    )
    block_fit = -abs(math.log2(th_m * th_n / 16.0)) / 2.0
    threads_off = 0.0 if 128 <= threads <= 256 else 0.5
    k_fit = 1.0 if 16 <= red_k <= 32 else 0.0
    reuse = (wg_m * wg_n) / (wg_m + wg_n) / 32.0
    idle = occupancy_loss(workgroups, facts.compute_units)
    return block_fit + k_fit + min(reuse, 1.5) - 1.5 * idle - threads_off
