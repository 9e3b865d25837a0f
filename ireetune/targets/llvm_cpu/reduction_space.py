"""The llvm-cpu search space for generic reductions (DoubleTilingExpert), as z3 constraints.

IREE configures a reduction dispatch by its root op; the other ops of the dispatch (a softmax's
maximum and normalisation) are tiled to fit it. The knobs:

- `dist_<i>`: the distribution tile of parallel loop i (outermost first), one task's share;
- `vec_p`: the vector tile of the innermost parallel loop, rows reduced side by side (the
  other parallel loops get vector tile 1);
- `vec_r`: the vector tile of the innermost reduction loop (the others get 1);
- `vec_<i>` (strided contractions only): the vector tile of outer parallel loop i.

IREE's own choice for a 32x1024 f32 row sum on AVX-512 is `dist_0 = 4, vec_p = 4, vec_r = 16`:
four rows at a time, one 16-lane vector each. Real networks have bigger ones: a ResNet-50 with
real weights has strided 1x1 convolutions that are neither contractions nor convolutions to
`linalg` (`(d3, d1 * 2, d2 * 2)` image map), reduced over 256-1024 input channels, which took a
third of its CPU time (docs/benchmarks.md). IREE's default for them is scalar code: its
vectoriser does not take the strided read. A candidate for such a strided contraction runs
`iree-global-opt-convert-strided-contraction-to-contraction` on its dispatch once configured
(a strided slice and a plain contraction, the form IREE gives the op when its image is a
model input), and blocks it like a matmul: vector tiles on the output channels and rows as well
(measured 3-7x over the default on the three ResNet-50 shapes, docs/benchmarks.md). Candidates
near a matmul-like anchor (the default with 8 output channels per vector tile) come first; for
other reductions, the default's neighbours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import z3
from iree.compiler import ir

from ireetune.core.candidate import Knobs, make_knobs
from ireetune.core.errors import IreetuneError
from ireetune.core.target import OpConfiguration
from ireetune.problem.family import Problem, element_bytes, narrow
from ireetune.problem.reduction import ReductionProblem
from ireetune.targets.llvm_cpu.common import (
    CpuFacts,
    SizedCpuSpace,
    SizedFamily,
    enough_tiles,
    nearness_penalty,
    positive_knobs,
    render_cpu_compilation_info,
    thread_imbalance,
    tile_levels,
)
from ireetune.targets.z3_enumerate import (
    NearDefaultSpace,
    Neighbourhood,
    divisors,
    domain_constraints,
)

REDUCTION_PIPELINE = "DoubleTilingExpert"
_VEC_P_CHOICES = (1, 2, 4, 8, 16)
_VEC_R_CHOICES = (1, 2, 4, 8, 16, 32, 64, 128)
_MAX_NEIGHBOURS = 16
STRIDED_CONTRACTION_PASS = "iree-global-opt-convert-strided-contraction-to-contraction"
# Output channels per vector tile at a strided contraction's anchor, and the most accumulator
# elements (the product of the parallel vector tiles) a candidate may hold.
_ANCHOR_CHANNELS = 8
_MAX_ACCUMULATORS = 128
_MAX_OUTER_VECTOR = 16


@dataclass(frozen=True)
class CpuReductionSizes:
    """The extents a CPU reduction config tiles: every parallel loop, the innermost reduction."""

    parallel: tuple[int, ...]
    reduction: int
    element_bytes: int
    # A strided contraction's outer parallel loops get vector tiles too; the loops at
    # `output_channels` (positions among the parallel loops) are blocked like a matmul's N.
    strided_contraction: bool = False
    output_channels: tuple[int, ...] = ()

    @property
    def outer_vector_knobs(self) -> tuple[str, ...]:
        """Name the vector knobs of outer parallel loops (strided contractions only)."""
        if not self.strided_contraction:
            return ()
        return tuple(f"vec_{i}" for i in range(len(self.parallel) - 1))

    @property
    def knob_names(self) -> tuple[str, ...]:
        """Name the knobs: `dist_<i>` per parallel loop (outermost first), the outer vector
        knobs, `vec_p`, `vec_r`."""
        return (
            *(f"dist_{i}" for i in range(len(self.parallel))),
            *self.outer_vector_knobs,
            "vec_p",
            "vec_r",
        )


def compute_reduction_sizes(problem: ReductionProblem) -> CpuReductionSizes:
    """Reduce a reduction to its parallel loops and innermost reduction loop."""
    if not problem.parallel_dims:
        raise IreetuneError(
            f"{problem.signature}: a reduction to a single value has no parallel loop to tile "
            "on the CPU"
        )
    strided = problem.strided_contraction
    return CpuReductionSizes(
        parallel=problem.parallel_sizes,
        reduction=problem.loop_sizes[problem.reduction_dims[-1]],
        element_bytes=max(element_bytes(t) for t in (*problem.input_types, problem.output_type)),
        strided_contraction=strided,
        output_channels=problem.output_channel_loops if strided else (),
    )


def reduction_domains(sizes: CpuReductionSizes) -> dict[str, list[int]]:
    """Return each knob's candidate values."""
    inner = sizes.parallel[-1]
    domains = {f"dist_{i}": divisors(size, 512) for i, size in enumerate(sizes.parallel)}
    # A vector tile divides its loop or covers it whole, masked (IREE's own choice for a 7-wide
    # output row of a ResNet-50 is 8).
    domains["vec_p"] = [x for x in _VEC_P_CHOICES if inner % x == 0 or x // 2 < inner < x]
    domains["vec_r"] = [x for x in _VEC_R_CHOICES if sizes.reduction % x == 0]
    for index, name in enumerate(sizes.outer_vector_knobs):
        domains[name] = divisors(sizes.parallel[index], _MAX_OUTER_VECTOR)
    return domains


def build_reduction_constraints(
    sizes: CpuReductionSizes,
    facts: CpuFacts,
    require_parallelism: bool,
    context: z3.Context,
    default: Knobs | None = None,
) -> tuple[dict[str, z3.ArithRef], list[z3.BoolRef]]:
    """State the space: tiles divide the loops and nest, the vector tile fits the register file
    and the stack-allocation limit, and (when required) every thread gets a tile."""
    lanes = max(1, facts.native_vector_bytes // sizes.element_bytes)
    v = {name: z3.Int(name, context) for name in sizes.knob_names}
    inner = f"dist_{len(sizes.parallel) - 1}"
    constraints = domain_constraints(v, reduction_domains(sizes), default)
    constraints.append(
        z3.Or(
            v[inner] % v["vec_p"] == 0,
            z3.And(v["vec_p"] > v[inner], v["vec_p"] < 2 * v[inner]),
        )
    )
    if sizes.strided_contraction:
        # Blocked like a matmul: each outer vector tile divides its task's tile, and the
        # accumulators (one element per parallel vector position) stay in a bounded block.
        accumulators = v["vec_p"]
        for index, name in enumerate(sizes.outer_vector_knobs):
            constraints.append(v[f"dist_{index}"] % v[name] == 0)
            accumulators = accumulators * v[name]
        constraints += [
            accumulators <= _MAX_ACCUMULATORS,
            accumulators * v["vec_r"] * sizes.element_bytes < facts.max_vector_bytes,
        ]
    else:
        constraints += [
            # Accumulators: one register per row and started vector, plus the loaded operand.
            v["vec_p"] * ((v["vec_r"] + lanes - 1) / lanes) * 2 + 1 <= facts.vector_registers,
            v["vec_p"] * v["vec_r"] * sizes.element_bytes < facts.max_vector_bytes,
        ]
    if require_parallelism:
        extents = [(size, v[f"dist_{index}"]) for index, size in enumerate(sizes.parallel)]
        constraints.append(enough_tiles(context, extents, facts.threads))
    return v, constraints


# Valid reduction configurations, lazily: the anchor (`compute_anchor`) and its neighbours
# first, then a seeded walk.
REDUCTION_SPACE = NearDefaultSpace(
    build_reduction_constraints,
    lambda sizes, facts: Neighbourhood(
        reduction_domains(sizes), _MAX_NEIGHBOURS, centre=partial(compute_anchor, sizes)
    ),
)
enumerate_reduction_space = REDUCTION_SPACE.enumerate


def compute_anchor(sizes: CpuReductionSizes, default: Knobs) -> Knobs:
    """Return the configuration the search centres on: the default itself, or for a strided
    contraction the default with its output channels blocked by 8, as a matmul is (IREE's
    default for those is scalar code, so its own neighbourhood holds nothing worth timing)."""
    if not sizes.strided_contraction:
        return default
    values = {name: int(value) for name, value in default}
    domains = reduction_domains(sizes)
    for index in sizes.output_channels:
        if index >= len(sizes.parallel) - 1:
            continue
        name = f"vec_{index}"
        fitting = [
            x for x in domains[name] if x <= _ANCHOR_CHANNELS and values[f"dist_{index}"] % x == 0
        ]
        if fitting:
            values[name] = max(fitting)
    return make_knobs(values)


def score_reduction_candidate(
    sizes: CpuReductionSizes, facts: CpuFacts, knobs: Knobs, default: Knobs | None
) -> float:
    """Score a configuration; higher is more promising.

    A reduction is bound by memory: whole native vectors along the reduction (`vec_r` a multiple
    of the lanes) and a few rows at a time keep the loads streaming; tasks that leave threads
    idle waste it. Configurations near the anchor (IREE's own choice, or for a strided
    contraction its matmul-like blocking) come first.
    """
    values = {name: int(value) for name, value in knobs}
    vec_p, vec_r = values["vec_p"], values["vec_r"]
    lanes = max(1, facts.native_vector_bytes // sizes.element_bytes)
    whole_vectors = 1.0 if vec_r % lanes == 0 else 0.0
    tiles = math.prod(size // values[f"dist_{i}"] for i, size in enumerate(sizes.parallel))
    imbalance = thread_imbalance(tiles, facts.threads)
    anchor = compute_anchor(sizes, default) if default is not None else None
    if sizes.strided_contraction:
        # Its accumulators are a block of outputs, not one vector per row (measured: blocks of
        # 8-16 channels by 1-8 rows or columns, reduced 16 at a time, did best).
        return 1.0 * whole_vectors - 1.0 * imbalance - nearness_penalty(knobs, anchor)
    registers = vec_p * math.ceil(vec_r / lanes)
    register_fit = -abs(math.log2(max(registers, 1) / 4.0))
    score = 1.0 * whole_vectors + 0.5 * register_fit - 1.0 * imbalance
    return score - nearness_penalty(knobs, anchor)


def reduction_tile_lists(problem: ReductionProblem, knobs: Knobs) -> dict[str, list[int]]:
    """Spread the knobs over the op's loops as the three CPU tiling levels."""
    values = {name: int(value) for name, value in knobs}
    count = len(problem.loop_sizes)
    distribution, parallel, reduction = [0] * count, [0] * count, [0] * count
    for index, dim in enumerate(problem.parallel_dims):
        distribution[dim] = values[f"dist_{index}"]
        parallel[dim] = values.get(f"vec_{index}", 1)
    parallel[problem.parallel_dims[-1]] = values["vec_p"]
    for dim in problem.reduction_dims[:-1]:
        reduction[dim] = 1
    reduction[problem.reduction_dims[-1]] = values["vec_r"]
    return tile_levels(distribution, parallel, reduction)


def reduction_sibling_configs(
    problem: ReductionProblem, tiles: dict[str, list[int]]
) -> tuple[tuple[str, str], ...]:
    """Give the dispatch's other ops the root's vector tiles, as IREE's own configuration does.

    Set on the root alone, a softmax's normalisation is vectorised over whole rows: with 8
    rows of 1024 f32 that is 32768 bytes, IREE's stack-allocation limit ("large vector sizes"),
    5 of 24 candidates. IREE's default gives the row maximum `vector_common_parallel` and
    `vector_reduction`, and the normalisation `vector_inner_parallel` along the row.
    """
    parallel = tiles["vector_common_parallel"]
    reduction = tiles["vector_reduction"]
    return (
        (
            "reduction",
            f"#iree_cpu.lowering_config<vector_common_parallel = {parallel}, "
            f"vector_reduction = {reduction}>",
        ),
        (
            "parallel",
            f"#iree_cpu.lowering_config<vector_common_parallel = {parallel}, "
            f"vector_inner_parallel = {reduction}>",
        ),
    )


def parse_default_reduction_knobs(
    problem: ReductionProblem, levels: dict[str, list[int]]
) -> Knobs | None:
    """Read the compiler's default into knobs (None when it is not of this space's form)."""
    values = {
        f"dist_{index}": levels["distribution"][dim]
        for index, dim in enumerate(problem.parallel_dims)
    }
    values["vec_p"] = levels["vector_common_parallel"][problem.parallel_dims[-1]]
    values["vec_r"] = levels["vector_reduction"][problem.reduction_dims[-1]]
    outer_vectors = [levels["vector_common_parallel"][d] for d in problem.parallel_dims[:-1]]
    if problem.strided_contraction:
        values.update({f"vec_{i}": max(1, v) for i, v in enumerate(outer_vectors)})
    elif any(v not in (0, 1) for v in outer_vectors):
        return None
    return positive_knobs(values)


class CpuReductionSpace(SizedCpuSpace[ReductionProblem, CpuReductionSizes]):
    """The reduction family's space on the CPU."""

    family = SizedFamily(
        ReductionProblem,
        REDUCTION_PIPELINE,
        compute_reduction_sizes,
        enumerate_reduction_space,
        parse_default_reduction_knobs,
        score_reduction_candidate,
        reduction_tile_lists,
    )

    def configuration(self, problem: Problem, knobs: Knobs, context: ir.Context) -> OpConfiguration:
        reduction = narrow(problem, ReductionProblem)
        tiles = reduction_tile_lists(reduction, knobs)
        compilation_info = render_cpu_compilation_info(tiles, REDUCTION_PIPELINE, context)
        if reduction.strided_contraction:
            # The op is alone in its dispatch (with the fill of its result), and the pass keeps
            # its configuration while it turns the strided read into a strided slice.
            return OpConfiguration(compilation_info, function_passes=(STRIDED_CONTRACTION_PASS,))
        return OpConfiguration(
            compilation_info, sibling_configs=reduction_sibling_configs(reduction, tiles)
        )
