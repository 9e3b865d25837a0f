"""The llvm-cpu search space for contractions, written as z3 constraints.

IREE emits no constraints for its CPU pipelines, so this file states them by hand. A
configuration tiles the innermost M, N and K loops at two levels:

- `dist_m`, `dist_n`: the distribution (workgroup) tile, one tile per task of the thread pool;
- `vec_m`, `vec_n`: the vector tile of the parallel loops, the register-resident micro-kernel;
- `vec_k`: the vector tile of the reduction loop;
- `dist_o`, only for a contraction with more than one M loop (a channels-last 1x1 convolution's
  two spatial loops): the distribution tile of the M loop before the innermost.

Batch loops get tile 1; the other outer M and N loops stay whole in a workgroup, as the
compiler's default keeps them; the reduction loops but the innermost get vector tile 1. Data-tiled
matmuls (`linalg.mmt4d`, `linalg.batch_mmt4d`) have a space of their own (`mmt4d_space.py`).

The order (`score_candidate`) puts the likely-fast candidates first. Its score follows the
features that seeds/002 found predictive on GPUs, translated to a CPU:

- the micro-kernel's arithmetic intensity, relative to the best the register file allows (the
  GPU's "intrinsic area to volume ratio");
- a power-of-two K tile of at least 8 (K tiles of 1 or 2 starve the FMA units);
- the padding waste of distribution tiles that do not divide the problem ("quantization
  inefficiency");
- how evenly the tiles spread over the threads, and whether there are enough of them;
- a distribution tile large enough to reuse what it brings into L2.

The weights were set by hand from the first measurements on this project's 2-core znver4 machine
(see docs/ordering.md); they are a starting point for a learned model, not a final word.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TypeVar

import z3

from ireetune.core.candidate import Knobs
from ireetune.problem.contraction import ContractionProblem
from ireetune.problem.family import Problem, element_bytes, narrow
from ireetune.targets.llvm_cpu.common import (
    CpuFacts,
    SizedCpuSpace,
    SizedFamily,
    positive_knobs,
    score_near_default,
    thread_imbalance,
    tile_levels,
    tile_multiples,
)
from ireetune.targets.z3_enumerate import (
    NearDefaultSpace,
    Neighbourhood,
    domain_constraints,
)

# K is streamed through the cache in panels; this bounds the panel a distribution tile holds.
K_PANEL = 256
# A tile size: a number, or a z3 term in a space's constraints.
Tile = TypeVar("Tile", int, z3.ArithRef)
KNOB_NAMES = ("dist_m", "dist_n", "vec_m", "vec_n", "vec_k")
PIPELINE = "DoubleTilingExpert"
_VEC_M_CHOICES = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16)
_VEC_K_CHOICES = (1, 2, 4, 8, 16, 32, 64)
# The default's neighbours tried first: every single-knob step and the nearest pairs.
_MAX_NEIGHBOURS = 16


@dataclass(frozen=True)
class CpuProblemSizes:
    """The sizes the CPU space tiles: innermost M, N, K and the product of batch and outer loops;
    of those, the extent of the M loop `dist_o` tiles (0: none) and the product of the loops a
    workgroup holds whole (the rest are batch loops, one workgroup per index)."""

    m: int
    n: int
    k: int
    outer_parallel: int
    input_bytes: int
    accumulator_bytes: int
    outer_m: int = 0
    whole_outer: int = 1


def compute_problem_sizes(problem: ContractionProblem) -> CpuProblemSizes:
    """Reduce a contraction to the sizes the CPU space reasons about."""
    outer_m = problem.m_sizes[-2] if len(problem.m_sizes) > 1 else 0
    return CpuProblemSizes(
        m=problem.m_sizes[-1],
        n=problem.n_sizes[-1],
        k=problem.k_sizes[-1],
        outer_parallel=math.prod(
            (*problem.batch_sizes, *problem.m_sizes[:-1], *problem.n_sizes[:-1])
        ),
        input_bytes=max(element_bytes(problem.lhs_type), element_bytes(problem.rhs_type)),
        accumulator_bytes=element_bytes(problem.output_type),
        outer_m=outer_m,
        whole_outer=math.prod((*problem.m_sizes[:-2], *problem.n_sizes[:-1])),
    )


def distribution_bytes(
    sizes: CpuProblemSizes, dist_m: Tile, dist_n: Tile, dist_o: Tile | int = 1
) -> Tile:
    """Count what a distribution tile keeps in L2: its operand panels and its accumulators
    (`dist_o` rows of `dist_m` where the outer M loop is tiled)."""
    panel = min(sizes.k, K_PANEL)
    rows = dist_m * dist_o
    return (rows + dist_n) * panel * sizes.input_bytes + (rows * dist_n * sizes.accumulator_bytes)


def count_tiles(sizes: CpuProblemSizes, dist_m: int, dist_n: int, dist_o: int = 0) -> int:
    """Count a contraction's distribution tiles, over its outer loops too: one per batch index,
    and per `dist_o` rows of the outer M loop (all of it without `dist_o`); the loops a
    workgroup holds whole add none."""
    outer_tiles = math.ceil(sizes.outer_m / dist_o) if sizes.outer_m and dist_o else 1
    return math.ceil(sizes.m / dist_m) * math.ceil(sizes.n / dist_n) * _batch(sizes) * outer_tiles


def _batch(sizes: CpuProblemSizes) -> int:
    """Count the indices of a contraction's batch loops (a workgroup each)."""
    return max(1, sizes.outer_parallel // (sizes.whole_outer * (sizes.outer_m or 1)))


@functools.cache
def best_intensity(facts: CpuFacts) -> float:
    """Return the highest micro-kernel intensity m*r/(m+r) the register file can hold (kept per
    machine: every candidate's score and features divide by it)."""
    best = 0.0
    for rows in range(1, 17):
        for registers_n in range(1, 5):
            if rows * registers_n + registers_n + 1 <= facts.vector_registers:
                best = max(best, rows * registers_n / (rows + registers_n))
    return best


def score_candidate(sizes: CpuProblemSizes, facts: CpuFacts, knobs: Knobs) -> float:
    """Score one configuration; higher is more promising."""
    values = {name: int(value) for name, value in knobs}
    lanes = max(1, facts.native_vector_bytes // sizes.accumulator_bytes)
    vec_m, vec_n, vec_k = values["vec_m"], values["vec_n"], values["vec_k"]
    dist_m, dist_n = values["dist_m"], values["dist_n"]
    dist_o = values.get("dist_o", sizes.outer_m)

    registers_n = -(-vec_n // lanes)
    intensity = (vec_m * registers_n) / (vec_m + registers_n) / best_intensity(facts)
    good_k = 1.0 if vec_k & (vec_k - 1) == 0 and 8 <= vec_k <= 32 else 0.0
    tiny_k = 1.0 if vec_k < 4 else 0.0

    padded = math.ceil(sizes.m / dist_m) * dist_m * math.ceil(sizes.n / dist_n) * dist_n
    outer_padding = math.ceil(sizes.outer_m / dist_o) * dist_o / sizes.outer_m if dist_o else 1.0
    padding_waste = padded * outer_padding / (sizes.m * sizes.n) - 1.0
    tiles = count_tiles(sizes, dist_m, dist_n, dist_o)
    imbalance = thread_imbalance(tiles, facts.threads)
    too_few_tiles = 1.0 if tiles < facts.threads else 0.0
    l2_use = distribution_bytes(sizes, dist_m, dist_n, max(1, dist_o)) / facts.l2_bytes
    small_tile = max(0.0, 0.125 - l2_use) / 0.125

    return (
        2.0 * intensity
        + 1.0 * good_k
        - 2.0 * tiny_k
        - 2.0 * padding_waste
        - 1.0 * imbalance
        - 1.0 * too_few_tiles
        - 1.0 * small_tile
    )


def _tiles_of_loop(extent: int, steps: list[int], limit: int) -> list[int]:
    """Distribution tiles for a loop whose vector tile is one of `steps`.

    A loop longer than `limit` that no multiple of any step divides (N = 55 * 55 = 3025 with
    16-lane vectors, from an im2col convolution of GoogLeNet) gets the steps times the powers of
    two up to `limit`, its last tile partial: its domain is never empty.
    """
    values = set(tile_multiples(extent, steps, limit))
    if not values:
        shifts = range(limit.bit_length())
        values = {s << shift for s in steps for shift in shifts if s << shift <= limit}
    return sorted(values)


def contraction_domains(sizes: CpuProblemSizes, facts: CpuFacts) -> dict[str, list[int]]:
    """Return each knob's candidate values (before the constraints that tie knobs together)."""
    lanes = max(1, facts.native_vector_bytes // sizes.accumulator_bytes)
    vec_m_values = [v for v in _VEC_M_CHOICES if v <= sizes.m]
    vec_n_values = sorted({lanes * r for r in (1, 2, 3, 4) if lanes * r <= max(sizes.n, lanes)})
    if sizes.n < lanes:
        vec_n_values = [sizes.n]
    domains = {
        "vec_m": vec_m_values,
        "vec_n": vec_n_values,
        "vec_k": [v for v in _VEC_K_CHOICES if v <= sizes.k and sizes.k % v == 0],
        "dist_m": _tiles_of_loop(sizes.m, vec_m_values, 1024),
        "dist_n": _tiles_of_loop(sizes.n, vec_n_values, 2048),
    }
    if sizes.outer_m:
        domains["dist_o"] = [d for d in range(1, sizes.outer_m + 1) if sizes.outer_m % d == 0]
    return domains


def knob_names(sizes: CpuProblemSizes) -> tuple[str, ...]:
    """Name the knobs of a contraction of these sizes."""
    return (*KNOB_NAMES, "dist_o") if sizes.outer_m else KNOB_NAMES


def build_constraints(
    sizes: CpuProblemSizes,
    facts: CpuFacts,
    require_parallelism: bool,
    context: z3.Context | None = None,
    default: Knobs | None = None,
) -> tuple[dict[str, z3.ArithRef], list[z3.BoolRef]]:
    """Build the z3 variables and constraints of the space.

    The constraints say: vector tiles fit the register file (accumulators plus one row of the
    right-hand side plus a broadcast register); the M x N x K vector stays below the target's
    stack allocation limit; the inner N tile is whole native vectors; the
    micro-kernel's working set fits L1 and a distribution tile's fits L2; distribution tiles are
    multiples of the vector tiles and divide the problem or cover it in one tile; and, when
    `require_parallelism` holds, there are at least as many tiles as threads.
    """
    lanes = max(1, facts.native_vector_bytes // sizes.accumulator_bytes)
    variables = {name: z3.Int(name, context) for name in knob_names(sizes)}
    dist_m, dist_n = variables["dist_m"], variables["dist_n"]
    vec_m, vec_n, vec_k = variables["vec_m"], variables["vec_n"], variables["vec_k"]
    domains = contraction_domains(sizes, facts)
    # An empty domain would be `Or()`, which z3 5 refuses to add to a solver (a default has a
    # value for every knob, which joins its domain).
    assert default is not None or all(domains.values()), sizes
    constraints = domain_constraints(variables, domains, default)
    constraints += [dist_m % vec_m == 0, dist_n % vec_n == 0]
    vector_regs_n = (vec_n + lanes - 1) / lanes
    constraints.append(vec_m * vector_regs_n + vector_regs_n + 1 <= facts.vector_registers)
    l1_bytes = (vec_m * vec_k + vec_k * vec_n) * sizes.input_bytes + (
        vec_m * vec_n * sizes.accumulator_bytes
    )
    constraints.append(l1_bytes <= facts.l1_bytes)
    # The compiler rejects a vector.contract whose unrolled M x N x K vector reaches the stack
    # allocation limit ("large vector sizes" error), so the product must stay below it.
    constraints.append(vec_m * vec_n * vec_k * sizes.accumulator_bytes < facts.max_vector_bytes)
    dist_o = variables.get("dist_o")
    constraints.append(
        distribution_bytes(sizes, dist_m, dist_n, 1 if dist_o is None else dist_o) <= facts.l2_bytes
    )
    if require_parallelism:
        tiles_m = (sizes.m + dist_m - 1) / dist_m
        tiles_n = (sizes.n + dist_n - 1) / dist_n
        outer = _batch(sizes) * (1 if dist_o is None else (sizes.outer_m + dist_o - 1) / dist_o)
        constraints.append(tiles_m * tiles_n * outer >= facts.threads)
    return variables, constraints


# Distinct valid configurations, lazily, one z3 query each, reproducibly for a seed: the
# default's neighbours first (when it is known), then a seeded walk. On a transposed-B
# 512x768x1024 f32 matmul never seen before, all 8 candidates of a walk ordered by the heuristic
# alone ran 3.6-7x slower than IREE's default; its neighbours are where the winners are
# (docs/ordering.md). The walk falls back to the space without the parallelism requirement when
# the problem is too small to meet it.
CONTRACTION_SPACE = NearDefaultSpace(
    build_constraints,
    lambda sizes, facts: Neighbourhood(contraction_domains(sizes, facts), _MAX_NEIGHBOURS),
)
enumerate_space = CONTRACTION_SPACE.enumerate


def tile_lists(problem: ContractionProblem, knobs: Knobs) -> dict[str, list[int]]:
    """Spread the knobs over the op's loops as the three CPU tiling levels."""
    values = dict(knobs)
    loop_count = len(problem.loop_sizes)
    distribution = [0] * loop_count
    vector_parallel = [0] * loop_count
    vector_reduction = [0] * loop_count
    for dim in problem.batch_dims:
        distribution[dim] = 1
        vector_parallel[dim] = 1
    # The outer M and N loops of a contraction with several (a 1x1 NCHW convolution's two
    # spatial loops) stay whole in a workgroup, as the compiler's default keeps them: a
    # workgroup of one row of them made every candidate 2-10x slower than the default. The M
    # loop before the innermost takes `dist_o` where the knobs have it, so that the search starts
    # at the default's tile: the default tiles a channels-last 1x1 convolution's rows
    # (densenet121's 28x28x128x480: 4 of 28, 14 workgroups; 2026-12-05).
    for dim in (*problem.m_dims[:-1], *problem.n_dims[:-1]):
        distribution[dim] = problem.loop_sizes[dim]
        vector_parallel[dim] = 1
    if "dist_o" in values and len(problem.m_dims) > 1:
        distribution[problem.m_dims[-2]] = int(values["dist_o"])
    distribution[problem.m_dims[-1]] = int(values["dist_m"])
    distribution[problem.n_dims[-1]] = int(values["dist_n"])
    vector_parallel[problem.m_dims[-1]] = int(values["vec_m"])
    vector_parallel[problem.n_dims[-1]] = int(values["vec_n"])
    for dim in problem.k_dims[:-1]:
        vector_reduction[dim] = 1
    vector_reduction[problem.k_dims[-1]] = int(values["vec_k"])
    return tile_levels(distribution, vector_parallel, vector_reduction)


def parse_default_contraction_knobs(
    problem: ContractionProblem, levels: dict[str, list[int]]
) -> Knobs | None:
    """Read the compiler's tiles of the innermost M, N and K loops, and of the M loop before
    the innermost where there is one, into knobs: a distribution tile of 0 (the loop untiled,
    as the default leaves a matrix-vector product's one row) is the whole loop; None when a
    vector tile is 0 (no form of this space)."""
    m, n, k = problem.m_dims[-1], problem.n_dims[-1], problem.k_dims[-1]
    distribution, sizes = levels["distribution"], problem.loop_sizes
    knobs = {
        "dist_m": distribution[m] or sizes[m],
        "dist_n": distribution[n] or sizes[n],
        "vec_m": levels["vector_common_parallel"][m],
        "vec_n": levels["vector_common_parallel"][n],
        "vec_k": levels["vector_reduction"][k],
    }
    if len(problem.m_dims) > 1:
        outer = problem.m_dims[-2]
        knobs["dist_o"] = distribution[outer] or sizes[outer]
    return positive_knobs(knobs)


class CpuContractionSpace(SizedCpuSpace[ContractionProblem, CpuProblemSizes]):
    """DoubleTilingExpert tiles of the innermost M, N and K loops (data-tiled matmuls have a
    space of their own, `mmt4d_space.py`)."""

    family = SizedFamily(
        ContractionProblem,
        PIPELINE,
        compute_problem_sizes,
        enumerate_space,
        parse_default_contraction_knobs,
        score_near_default(score_candidate),
        tile_lists,
    )

    def stored_knob_names(self, problem: Problem) -> frozenset[str] | None:
        return frozenset(knob_names(compute_problem_sizes(narrow(problem, ContractionProblem))))
