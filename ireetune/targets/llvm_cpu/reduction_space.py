"""The llvm-cpu search space for generic reductions (DoubleTilingExpert), as z3 constraints.

IREE configures a reduction dispatch by its root op; the other ops of the dispatch (a softmax's
maximum and normalisation) are tiled to fit it. The knobs tile the innermost parallel loop and
the innermost reduction loop (every other parallel loop gets tile 1, every other reduction loop
vector tile 1):

- `dist_p`: the distribution tile of the parallel loop, rows per task of the thread pool;
- `vec_p`: its vector tile, rows reduced side by side;
- `vec_r`: the vector tile of the reduction loop.

IREE's own choice for a 32x1024 f32 row sum on AVX-512 is `dist_p = 4, vec_p = 4, vec_r = 16`:
four rows at a time, one 16-lane vector each.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import z3
from iree.compiler import ir

from ireetune.errors import IreetuneError
from ireetune.problem.family import Problem
from ireetune.problem.reduction import ReductionProblem, as_reduction
from ireetune.search.candidate import Knobs, make_knobs
from ireetune.search.z3_enumerate import enumerate_space as enumerate_z3_space
from ireetune.targets.base import OpConfiguration
from ireetune.targets.llvm_cpu.common import CpuSpace, read_cpu_levels, render_cpu_compilation_info
from ireetune.targets.llvm_cpu.facts import CpuFacts
from ireetune.targets.llvm_cpu.space import element_bytes

REDUCTION_KNOB_NAMES = ("dist_p", "vec_p", "vec_r")
REDUCTION_PIPELINE = "DoubleTilingExpert"
_VEC_P_CHOICES = (1, 2, 4, 8, 16)
_VEC_R_CHOICES = (1, 2, 4, 8, 16, 32, 64, 128)


@dataclass(frozen=True)
class CpuReductionSizes:
    """The extents a CPU reduction config tiles."""

    parallel: int
    outer_parallel: int
    reduction: int
    element_bytes: int


def compute_reduction_sizes(problem: ReductionProblem) -> CpuReductionSizes:
    """Reduce a reduction to its innermost parallel and reduction loops."""
    if not problem.parallel_dims:
        raise IreetuneError(
            f"{problem.signature}: a reduction to a single value has no parallel loop to tile "
            "on the CPU"
        )
    inner_parallel = problem.parallel_dims[-1]
    return CpuReductionSizes(
        parallel=problem.loop_sizes[inner_parallel],
        outer_parallel=math.prod(problem.loop_sizes[d] for d in problem.parallel_dims[:-1]),
        reduction=problem.loop_sizes[problem.reduction_dims[-1]],
        element_bytes=max(element_bytes(t) for t in (*problem.input_types, problem.output_type)),
    )


def _divisors(extent: int, limit: int) -> list[int]:
    return [v for v in range(1, min(extent, limit) + 1) if extent % v == 0]


def build_reduction_constraints(
    sizes: CpuReductionSizes, facts: CpuFacts, require_parallelism: bool, context: z3.Context
) -> tuple[dict[str, z3.ArithRef], list[z3.BoolRef]]:
    """State the space: tiles divide the loops and nest, the vector tile fits the register file
    and the stack-allocation limit, and (when required) every thread gets a tile."""
    lanes = max(1, facts.native_vector_bytes // sizes.element_bytes)
    v = {name: z3.Int(name, context) for name in REDUCTION_KNOB_NAMES}
    vec_p_values = [x for x in _VEC_P_CHOICES if sizes.parallel % x == 0]
    vec_r_values = [x for x in _VEC_R_CHOICES if sizes.reduction % x == 0]
    constraints: list[z3.BoolRef] = [
        z3.Or([v["vec_p"] == x for x in vec_p_values]),
        z3.Or([v["vec_r"] == x for x in vec_r_values]),
        z3.Or([v["dist_p"] == x for x in _divisors(sizes.parallel, 1024)]),
        v["dist_p"] % v["vec_p"] == 0,
        # Accumulators: one register per row and started vector, plus the loaded operand.
        v["vec_p"] * ((v["vec_r"] + lanes - 1) / lanes) * 2 + 1 <= facts.vector_registers,
        v["vec_p"] * v["vec_r"] * sizes.element_bytes < facts.max_vector_bytes,
    ]
    if require_parallelism:
        tiles = (sizes.parallel / v["dist_p"]) * sizes.outer_parallel
        constraints.append(tiles >= facts.threads)
    return v, constraints


def enumerate_reduction_space(
    sizes: CpuReductionSizes, facts: CpuFacts, seed: int, excluded: Knobs | None = None
) -> Iterator[Knobs]:
    """Yield valid reduction configurations lazily and reproducibly for a seed."""
    return enumerate_z3_space(
        [
            lambda context: build_reduction_constraints(sizes, facts, True, context),
            lambda context: build_reduction_constraints(sizes, facts, False, context),
        ],
        seed,
        excluded,
    )


def score_reduction_candidate(
    sizes: CpuReductionSizes, facts: CpuFacts, knobs: Knobs, default: Knobs | None
) -> float:
    """Score a configuration; higher is more promising.

    A reduction is bound by memory: whole native vectors along the reduction (`vec_r` a multiple
    of the lanes) and a few rows at a time keep the loads streaming; tiny vector tiles and tasks
    that leave threads idle waste it. Configurations near IREE's own choice come first.
    """
    values = dict(knobs)
    vec_p, vec_r, dist_p = int(values["vec_p"]), int(values["vec_r"]), int(values["dist_p"])
    lanes = max(1, facts.native_vector_bytes // sizes.element_bytes)
    whole_vectors = 1.0 if vec_r % lanes == 0 else 0.0
    registers = vec_p * math.ceil(vec_r / lanes)
    register_fit = -abs(math.log2(max(registers, 1) / 4.0))
    tiles = sizes.parallel // dist_p * sizes.outer_parallel
    imbalance = math.ceil(tiles / facts.threads) * facts.threads / tiles - 1.0
    nearness = 0.0
    if default is not None:
        reference = {name: int(value) for name, value in default}
        nearness = -sum(
            abs(math.log2(int(values[name]) / max(reference[name], 1)))
            for name in REDUCTION_KNOB_NAMES
        )
    return 1.0 * whole_vectors + 0.5 * register_fit - 1.0 * imbalance + 0.5 * nearness


def reduction_tile_lists(problem: ReductionProblem, knobs: Knobs) -> dict[str, list[int]]:
    """Spread the knobs over the op's loops as the three CPU tiling levels."""
    values = {name: int(value) for name, value in knobs}
    count = len(problem.loop_sizes)
    distribution, parallel, reduction = [0] * count, [0] * count, [0] * count
    for dim in problem.parallel_dims[:-1]:
        distribution[dim], parallel[dim] = 1, 1
    inner = problem.parallel_dims[-1]
    distribution[inner], parallel[inner] = values["dist_p"], values["vec_p"]
    for dim in problem.reduction_dims[:-1]:
        reduction[dim] = 1
    reduction[problem.reduction_dims[-1]] = values["vec_r"]
    return {
        "distribution": distribution,
        "vector_common_parallel": parallel,
        "vector_reduction": reduction,
    }


def parse_default_reduction_knobs(
    problem: ReductionProblem, levels: dict[str, list[int]]
) -> Knobs | None:
    """Read the compiler's default into knobs (None when it tiles other loops than these)."""
    inner, reduced = problem.parallel_dims[-1], problem.reduction_dims[-1]
    values = {
        "dist_p": levels["distribution"][inner],
        "vec_p": levels["vector_common_parallel"][inner],
        "vec_r": levels["vector_reduction"][reduced],
    }
    if any(value <= 0 for value in values.values()):
        return None
    return make_knobs(values)


class CpuReductionSpace(CpuSpace):
    """The reduction family's space on the CPU."""

    def __init__(self, threads: int) -> None:
        super().__init__(threads)
        self._default: Knobs | None = None

    def prepare(
        self, problem: Problem, benchmark_path: Path, scratch_dir: Path, context: ir.Context
    ) -> None:
        compute_reduction_sizes(as_reduction(problem))

    def generate(
        self,
        problem: Problem,
        variant_target: ir.Attribute,
        default_knobs: Knobs | None,
        seed: int,
    ) -> Iterator[Knobs]:
        self._default = default_knobs
        sizes = compute_reduction_sizes(as_reduction(problem))
        return enumerate_reduction_space(sizes, self.facts(variant_target), seed, default_knobs)

    def order(self, problem: Problem, pool: list[Knobs], seed: int) -> list[tuple[Knobs, float]]:
        sizes = compute_reduction_sizes(as_reduction(problem))
        scored = [
            (
                knobs,
                score_reduction_candidate(sizes, self.known_facts, knobs, self._default),
                random.Random(f"{seed}:{knobs}").random(),
            )
            for knobs in pool
        ]
        scored.sort(key=lambda item: (-item[1], item[2]))
        return [(knobs, score) for knobs, score, _ in scored]

    def configuration(self, problem: Problem, knobs: Knobs, context: ir.Context) -> OpConfiguration:
        tiles = reduction_tile_lists(as_reduction(problem), knobs)
        return OpConfiguration(render_cpu_compilation_info(tiles, REDUCTION_PIPELINE, context))

    def parse_default_knobs(self, problem: Problem, root_op: ir.Operation) -> Knobs | None:
        reduction = as_reduction(problem)
        levels = read_cpu_levels(root_op, len(reduction.loop_sizes))
        return None if levels is None else parse_default_reduction_knobs(reduction, levels)
