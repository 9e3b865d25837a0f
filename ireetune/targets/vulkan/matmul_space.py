"""The SPIR-V spaces of contractions (matmuls and batch matmuls), written as z3 constraints.

IREE emits no constraints for SPIR-V (`--iree-codegen-emit-pipeline-constraints` writes nothing),
so this file states them. The innermost M, N and K loops are tiled; every batch and outer M or N
loop gets tile 1 and every outer K loop 1 in the reduction level. One space per pipeline:

- BaseVectorize: workgroup tile `wg_m` x `wg_n`, each thread's tile `th_m` x `th_n`, K tile
  `tile_k`; the workgroup is `wg_x` = `wg_n / th_n` by `wg_y` = `wg_m / th_m` threads.
- MatmulPromoteVectorize: the workgroup tile and `tile_k` staged in shared memory, `wg_x` by
  `wg_y` threads, software pipelining `depth` and `store_stage`.
- CooperativeMatrixVectorize (targets with cooperative matrices only): subgroup tiles
  `sg_m` x `sg_n` of whole `mma_m` x `mma_n` x `mma_k` matrices; the workgroup is
  `subgroup_size * wg_n / sg_n` by `wg_m / sg_m`.

Every space states the target's limits: each workgroup dimension and the thread count, whole
subgroups (of the chosen `subgroup_size`, 0 = the driver's, counted as the smallest choice), and
the shared memory of the promoting pipelines. Tiles divide their loops and workgroup dimensions
are powers of two, as IREE's own verifiers ask (they never run on SPIR-V: matmuls are generic
ops by then).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import z3

from ireetune.core.candidate import Knobs
from ireetune.problem.contraction import ContractionProblem
from ireetune.problem.family import element_bytes
from ireetune.targets.vulkan.config import SpirvConfig, SpirvPipeline
from ireetune.targets.vulkan.facts import VulkanFacts
from ireetune.targets.z3_enumerate import divisors, one_of

Variables = dict[str, z3.ArithRef]
Space = tuple[Variables, list[z3.BoolRef]]

_THREAD_TILES = (1, 2, 4, 8)
_K_TILES = (1, 2, 4, 8, 16, 32, 64)
_PROMOTE_K_TILES = (4, 8, 16, 32, 64)
POWERS_OF_TWO = tuple(1 << shift for shift in range(11))
# Accumulators one thread keeps (BaseVectorize) and matrices one subgroup keeps (cooperative).
MAX_THREAD_BLOCK = 32
_MAX_SUBGROUP_MATRICES = 8
_DEPTHS = (1, 2, 3)
# The largest workgroup tile per dimension: beyond it a tile only starves the device.
MAX_WORKGROUP_TILE = 256


@dataclass(frozen=True)
class MatmulSizes:
    """What the contraction spaces read of a problem: the innermost M, N and K, element types,
    and whether the problem has the single M, N and K loops the promoting pipelines need."""

    m: int
    n: int
    k: int
    input_type: str
    accumulator_type: str
    single_loops: bool

    @property
    def input_bits(self) -> int:
        return 8 * element_bytes(self.input_type)


def compute_matmul_sizes(problem: ContractionProblem) -> MatmulSizes:
    """Reduce a contraction to the sizes its spaces tile."""
    loops = problem.loop_sizes
    return MatmulSizes(
        m=loops[problem.m_dims[-1]],
        n=loops[problem.n_dims[-1]],
        k=loops[problem.k_dims[-1]],
        input_type=problem.lhs_type,
        accumulator_type=problem.output_type,
        single_loops=len(problem.m_dims) == 1
        and len(problem.n_dims) == 1
        and len(problem.k_dims) == 1
        and problem.lhs_type == problem.rhs_type,
    )


def dividing(extent: int, choices: Sequence[int]) -> list[int]:
    """Return the `choices` that divide `extent`."""
    return [value for value in choices if extent % value == 0]


def subgroup_choices(facts: VulkanFacts, optional: bool) -> list[int]:
    """The values of the `subgroup_size` knob: the target's sizes, and 0 (left to the driver)
    where the pipeline does not need one."""
    return ([0] if optional else []) + list(facts.subgroup_sizes)


def workgroup_limits(
    variables: Variables, facts: VulkanFacts, whole_subgroups: bool
) -> list[z3.BoolRef]:
    """State the target's workgroup limits on `wg_x` and `wg_y` (and whole subgroups)."""
    wg_x, wg_y, subgroup = variables["wg_x"], variables["wg_y"], variables["subgroup_size"]
    threads = wg_x * wg_y
    smallest = min(facts.subgroup_sizes)
    constraints = [
        one_of(wg_x, [v for v in POWERS_OF_TWO if v <= facts.max_workgroup_sizes[0]]),
        one_of(wg_y, [v for v in POWERS_OF_TWO if v <= facts.max_workgroup_sizes[1]]),
        threads <= facts.max_threads,
    ]
    if whole_subgroups:
        effective = z3.If(subgroup == 0, smallest, subgroup)
        constraints.append(threads % effective == 0)
    return constraints


def shared_memory_bytes(sizes: MatmulSizes, variables: Variables, early_store: bool) -> z3.ArithRef:
    """Count the shared memory of the promoted LHS and RHS tiles as IREE's heuristic does: rows
    padded by one 128-bit vector, one buffer per pipeline stage plus one, less one where the
    pipeline stores early (`store_stage` 1; seen for MatmulPromoteVectorize only:
    CooperativeMatrixVectorize at depth 2, store stage 1 used three buffers)."""
    pad = 128 // sizes.input_bits
    buffers = variables["depth"] + 1
    if early_store:
        buffers = buffers - variables["store_stage"]
    tile = (variables["wg_m"] + variables["wg_n"]) * (variables["tile_k"] + pad)
    return tile * (sizes.input_bits // 8) * buffers


def promoted_tile_domains(
    variables: Variables, sizes: MatmulSizes, facts: VulkanFacts, optional_subgroup: bool
) -> list[z3.BoolRef]:
    """State the domains of the knobs both promoting pipelines share: workgroup tiles, the K
    tile, the pipeline depth, the store stage and the subgroup size."""
    return [
        one_of(variables["wg_m"], divisors(sizes.m, MAX_WORKGROUP_TILE)),
        one_of(variables["wg_n"], divisors(sizes.n, MAX_WORKGROUP_TILE)),
        one_of(variables["tile_k"], dividing(sizes.k, _PROMOTE_K_TILES)),
        one_of(variables["depth"], _DEPTHS),
        one_of(variables["store_stage"], (0, 1)),
        one_of(variables["subgroup_size"], subgroup_choices(facts, optional=optional_subgroup)),
    ]


def promoted_tile_loads(
    variables: Variables, sizes: MatmulSizes, facts: VulkanFacts, early_store: bool
) -> list[z3.BoolRef]:
    """State what both promoting pipelines need of their promoted tiles: every thread loads
    whole 128-bit vectors of both, both fit shared memory, and there are at least `depth` K
    tiles to pipeline."""
    v = variables
    vector = 128 // sizes.input_bits
    threads = v["wg_x"] * v["wg_y"]
    return [
        (v["wg_m"] * v["tile_k"]) % (threads * vector) == 0,
        (v["wg_n"] * v["tile_k"]) % (threads * vector) == 0,
        shared_memory_bytes(sizes, v, early_store) <= facts.max_workgroup_memory_bytes,
        v["tile_k"] * v["depth"] <= sizes.k,
    ]


def build_base_space(
    sizes: MatmulSizes, facts: VulkanFacts, whole_subgroups: bool, context: z3.Context
) -> Space:
    """Build the BaseVectorize space (see the module docstring)."""
    names = ("wg_m", "wg_n", "th_m", "th_n", "tile_k", "wg_x", "wg_y", "subgroup_size")
    v = {name: z3.Int(name, context) for name in names}
    constraints = [
        one_of(v["wg_m"], divisors(sizes.m, MAX_WORKGROUP_TILE)),
        one_of(v["wg_n"], divisors(sizes.n, MAX_WORKGROUP_TILE)),
        one_of(v["th_m"], dividing(sizes.m, _THREAD_TILES)),
        one_of(v["th_n"], dividing(sizes.n, _THREAD_TILES)),
        one_of(v["tile_k"], dividing(sizes.k, _K_TILES)),
        one_of(v["subgroup_size"], subgroup_choices(facts, optional=True)),
        v["wg_n"] == v["wg_x"] * v["th_n"],
        v["wg_m"] == v["wg_y"] * v["th_m"],
        v["th_m"] * v["th_n"] <= MAX_THREAD_BLOCK,
        *workgroup_limits(v, facts, whole_subgroups),
    ]
    return v, constraints


def build_promote_space(
    sizes: MatmulSizes, facts: VulkanFacts, whole_subgroups: bool, context: z3.Context
) -> Space:
    """Build the MatmulPromoteVectorize space (see the module docstring).

    Beyond the common limits: more threads than one subgroup (IREE promotes only then), each
    thread's tile of 1-8 by at most one 128-bit vector, both promoted tiles loaded by all threads
    in 128-bit vectors with no more vectors along a row than x threads, the shared memory, and at
    least `depth` K tiles to pipeline.
    """
    names = (
        "wg_m", "wg_n", "tile_k", "wg_x", "wg_y", "depth", "store_stage", "subgroup_size",
    )  # fmt: skip
    v = {name: z3.Int(name, context) for name in names}
    t_m, t_n = z3.Int("t_m", context), z3.Int("t_n", context)
    vector = 128 // sizes.input_bits
    threads = v["wg_x"] * v["wg_y"]
    effective = z3.If(v["subgroup_size"] == 0, min(facts.subgroup_sizes), v["subgroup_size"])
    constraints = [
        *promoted_tile_domains(v, sizes, facts, optional_subgroup=True),
        one_of(t_m, _THREAD_TILES),
        one_of(t_n, _THREAD_TILES),
        v["wg_m"] == v["wg_y"] * t_m,
        v["wg_n"] == v["wg_x"] * t_n,
        threads > effective,
        *promoted_tile_loads(v, sizes, facts, early_store=True),
        # The copies to shared memory map their 128-bit vectors along K (LHS) and N (RHS) to
        # the x threads; more vectors than x threads fail to compile ("overprovisioning is not
        # yet supported"; seen with wg_x = 1, tile_k = 64).
        v["tile_k"] <= v["wg_x"] * vector,
        t_n * sizes.input_bits <= 128,
        *workgroup_limits(v, facts, whole_subgroups),
    ]
    return v, constraints


def build_cooperative_space(
    sizes: MatmulSizes, facts: VulkanFacts, whole_subgroups: bool, context: z3.Context
) -> Space:
    """Build the CooperativeMatrixVectorize space (see the module docstring).

    The matrix shape is one of the target's for the problem's types; the subgroup size is set
    (the pipeline needs it); the workgroup holds at least two subgroups; tiles are whole
    matrices; both promoted tiles are loaded in 128-bit vectors and fit shared memory.
    `whole_subgroups` is unused: the workgroup is whole subgroups by construction.
    """
    names = (
        "wg_m", "wg_n", "sg_m", "sg_n", "tile_k", "mma_m", "mma_n", "mma_k", "wg_x", "wg_y",
        "depth", "store_stage", "subgroup_size",
    )  # fmt: skip
    v = {name: z3.Int(name, context) for name in names}
    r_m, r_n, r_k, c_n = (z3.Int(name, context) for name in ("r_m", "r_n", "r_k", "c_n"))
    shapes = facts.shapes_for(sizes.input_type, sizes.accumulator_type)
    threads = v["wg_x"] * v["wg_y"]
    constraints = [
        z3.Or(
            [z3.And(v["mma_m"] == s.m, v["mma_n"] == s.n, v["mma_k"] == s.k) for s in shapes]
            or [z3.BoolVal(False, context)]
        ),
        *promoted_tile_domains(v, sizes, facts, optional_subgroup=False),
        one_of(r_m, (1, 2, 4)),
        one_of(r_n, (1, 2, 4)),
        one_of(r_k, (1, 2, 4)),
        one_of(c_n, (1, 2, 4)),
        v["sg_m"] == v["mma_m"] * r_m,
        v["sg_n"] == v["mma_n"] * r_n,
        v["tile_k"] == v["mma_k"] * r_k,
        r_m * r_n <= _MAX_SUBGROUP_MATRICES,
        v["wg_n"] == v["sg_n"] * c_n,
        v["wg_x"] == v["subgroup_size"] * c_n,
        v["wg_m"] == v["sg_m"] * v["wg_y"],
        threads >= 2 * v["subgroup_size"],
        *promoted_tile_loads(v, sizes, facts, early_store=False),
        *workgroup_limits(v, facts, whole_subgroups=False),
    ]
    return v, constraints


def contraction_config(
    problem: ContractionProblem, pipeline: SpirvPipeline, knobs: Knobs
) -> SpirvConfig:
    """Spread a contraction candidate's knobs over the op's loops as its pipeline's levels."""
    values = {name: int(value) for name, value in knobs if name != "pipeline"}
    loops = len(problem.loop_sizes)
    m_dim, n_dim, k_dim = problem.m_dims[-1], problem.n_dims[-1], problem.k_dims[-1]
    outer = {*problem.batch_dims, *problem.m_dims[:-1], *problem.n_dims[:-1]}

    def parallel_level(m_tile: int, n_tile: int) -> tuple[int, ...]:
        level = [1 if d in outer else 0 for d in range(loops)]
        level[m_dim], level[n_dim] = m_tile, n_tile
        return tuple(level)

    def reduction_level(k_tile: int) -> tuple[int, ...]:
        level = [1 if d in problem.k_dims else 0 for d in range(loops)]
        level[k_dim] = k_tile
        return tuple(level)

    # Workgroup x runs along the later of the innermost M and N loops, as IREE distributes.
    def workgroup(m_threads: int, n_threads: int) -> tuple[int, int, int]:
        return (n_threads, m_threads, 1) if n_dim > m_dim else (m_threads, n_threads, 1)

    subgroup = values["subgroup_size"]
    if pipeline is SpirvPipeline.BASE:
        return SpirvConfig(
            pipeline,
            (
                parallel_level(values["wg_m"], values["wg_n"]),
                parallel_level(values["th_m"], values["th_n"]),
                reduction_level(values["tile_k"]),
            ),
            workgroup(values["wg_m"] // values["th_m"], values["wg_n"] // values["th_n"]),
            subgroup,
        )
    size = workgroup(values["wg_y"], values["wg_x"])
    depth, store = values["depth"], values["store_stage"]
    if pipeline is SpirvPipeline.PROMOTE:
        level = list(parallel_level(values["wg_m"], values["wg_n"]))
        for dim in problem.k_dims:
            level[dim] = values["tile_k"] if dim == k_dim else 1
        return SpirvConfig(pipeline, (tuple(level),), size, subgroup, depth, store)
    matrix = [1 if d in outer else 0 for d in range(loops)]
    matrix[m_dim], matrix[n_dim], matrix[k_dim] = values["mma_m"], values["mma_n"], values["mma_k"]
    return SpirvConfig(
        pipeline,
        (
            parallel_level(values["wg_m"], values["wg_n"]),
            parallel_level(values["sg_m"], values["sg_n"]),
            reduction_level(values["tile_k"]),
            tuple(matrix),
        ),
        size,
        subgroup,
        depth,
        store,
    )


def contraction_knobs(problem: ContractionProblem, config: SpirvConfig) -> dict[str, int] | None:
    """Read a contraction's configuration back into its pipeline's knobs (None if it has no
    such form: another tiling of the outer loops, say)."""
    m_dim, n_dim, k_dim = problem.m_dims[-1], problem.n_dims[-1], problem.k_dims[-1]
    levels = [
        list(level) + [0] * (len(problem.loop_sizes) - len(level)) for level in config.tile_sizes
    ]
    x, y, _ = config.workgroup_size
    n_threads, m_threads = (x, y) if n_dim > m_dim else (y, x)
    values = {"subgroup_size": config.subgroup_size, "wg_x": n_threads, "wg_y": m_threads}
    try:
        if config.pipeline is SpirvPipeline.BASE:
            wg, thread, reduction = levels[:3]
            return {
                **values, "wg_m": wg[m_dim], "wg_n": wg[n_dim], "th_m": thread[m_dim],
                "th_n": thread[n_dim], "tile_k": reduction[k_dim],
            }  # fmt: skip
        stages = {"depth": config.pipeline_depth or 0, "store_stage": config.store_stage or 0}
        if config.pipeline is SpirvPipeline.PROMOTE:
            (wg,) = levels
            return {**values, **stages, "wg_m": wg[m_dim], "wg_n": wg[n_dim], "tile_k": wg[k_dim]}
        wg, subgroup, reduction, matrix = levels
    except ValueError:
        return None
    return {
        **values, **stages, "wg_m": wg[m_dim], "wg_n": wg[n_dim], "sg_m": subgroup[m_dim],
        "sg_n": subgroup[n_dim], "tile_k": reduction[k_dim], "mma_m": matrix[m_dim],
        "mma_n": matrix[n_dim], "mma_k": matrix[k_dim],
    }  # fmt: skip
