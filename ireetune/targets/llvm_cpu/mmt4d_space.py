"""The llvm-cpu search space for `linalg.mmt4d`, the data-tiled matmul, as z3 constraints.

With data tiling, a matmul becomes pack, mmt4d and unpack dispatches. The mmt4d's loops are
M1 N1 K1 (outer tiles) and M0 N0 K0 (the inner tile the encoding chose for the target's
registers). IREE's Mmt4dTilingExpert pipeline takes a configuration of this shape (seen in IREE
3.13's own dumps, 1024^3 f32 on znver4):

    distribution           = [dist_m1, dist_n1, 0, 0, 0, 0]
    vector_common_parallel = [1, 1, 0, M0, N0, 0]
    vector_reduction       = [0, 0, 1, 0, 0, K0]

The inner tile is fixed by the data layout (a different one would not match the packed
operands), and the vector levels walk one inner tile at a time (the microkernel's unit, or the
vector contract's without ukernels). What is left to search is the distribution tile: how many
M1 and N1 tiles one workgroup (one task of the thread pool) computes, which sets the
parallelism and the cache footprint; the default was [1, 2] for the 1024^3 matmul.

Where the executable target calls the mmt4d microkernel (`--iree-llvmcpu-enable-ukernels=mmt4d`
or `all`, and IREE 3.13's default on x86-64), the `ukernel` knob (1) keeps it or (0) compiles the
op with codegen instead: the spec sets the op's own `hal.executable.target`, whose `ukernels =
"none"` the microkernel lowering reads before the variant's (CODEGEN_TARGET). The other way is
closed in IREE 3.13: on an op of an executable compiled without the microkernel, a target that
names it lowers the op to a call that fails to link, since the variant's target decides whether
the microkernel's bitcode is linked (`tests/targets/llvm_cpu/test_mmt4d_codegen.py` pins both).
A batch_mmt4d's own target changes nothing: codegen splits it into mmt4d ops before the
microkernel lowering, and they do not keep it (pinned there too). They find their function's,
though: a batch_mmt4d's codegen candidate sets on its function the executable's whole target
with `ukernels = "none"` (`codegen_target_of`; a target of that field alone there would take
the CPU's features and vector sizes from the other passes, which read the nearest target too),
so it is rendered for its dispatch only (`configuration_for`).

A data-tiled batch matmul (`linalg.batch_mmt4d`, most of an encoder's time) has a batch loop
before these six, distributed and vectorized one at a time as the compiler's default does
(`distribution = [1, 4, 16, 0, 0, 0, 0]` for 4x128x64 by 4x64x128 f32 on a generic x86-64 CPU);
its distribution tiles are searched from the default's neighbours first (`enumerate_mmt4d_space`
with the default known), and ordered with their distance to it, as the contraction space is.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass

import z3
from iree.compiler import ir

from ireetune.core.candidate import Knobs, make_knobs
from ireetune.core.errors import IreetuneError
from ireetune.core.target import OpConfiguration, SpaceRequest
from ireetune.problem.contraction import ContractionProblem
from ireetune.problem.family import Problem, element_bytes
from ireetune.problem.inner_tiled import InnerTiledProblem
from ireetune.targets.llvm_cpu.common import (
    CpuFacts,
    SizedCpuSpace,
    SizedFamily,
    nearness_penalty,
    thread_imbalance,
    tile_levels,
)
from ireetune.targets.z3_enumerate import (
    NearDefaultSpace,
    Neighbourhood,
    domain_constraints,
)

MMT4D_PIPELINE = "Mmt4dTilingExpert"
# Whether the op keeps the executable's microkernel (1) or is compiled with codegen (0).
UKERNEL = "ukernel"
KNOB_NAMES = ("dist_m1", "dist_n1", UKERNEL)
TARGET_ATTRIBUTE = "hal.executable.target"
# The attribute a codegen candidate sets on its op; only its `ukernels` field is read there.
CODEGEN_TARGET = '#hal.executable.target<"llvm-cpu", "embedded-elf", {ukernels = "none"}>'
UKERNELS_FIELD = r'ukernels = "[^"]*"'
# Distribution tiles larger than this many outer tiles leave too little to share among threads.
_MAX_OUTER_TILES = 64
# A batch_mmt4d's neighbours of the default tried first: every single step and the nearest pairs.
_MAX_NEIGHBOURS = 8


@dataclass(frozen=True)
class Mmt4dSizes:
    """The outer tile counts, the inner tile and the element sizes of an mmt4d."""

    m1: int
    n1: int
    k1: int
    m0: int
    n0: int
    k0: int
    input_bytes: int
    accumulator_bytes: int
    # A batch_mmt4d's batch loop sizes (none for an mmt4d).
    batch: tuple[int, ...] = ()
    # Whether a configuration may compile the op with codegen instead of the microkernel (an
    # inner-tiled matmul's lowering is codegen's already).
    ukernel_choice: bool = True


def is_data_tiled(problem: ContractionProblem) -> bool:
    """Say whether a contraction is an mmt4d or a batch_mmt4d (this module's space)."""
    return problem.is_mmt4d or problem.is_batch_mmt4d


def compute_mmt4d_sizes(problem: ContractionProblem) -> Mmt4dSizes:
    """Read an mmt4d's outer and inner tile sizes (the problem must be one, see
    `is_data_tiled`)."""
    assert is_data_tiled(problem), f"{problem.signature} is not an mmt4d"
    (m1, m0), (n1, n0), (k1, k0) = problem.m_sizes, problem.n_sizes, problem.k_sizes
    return Mmt4dSizes(
        m1, n1, k1, m0, n0, k0,
        max(element_bytes(problem.lhs_type), element_bytes(problem.rhs_type)),
        element_bytes(problem.output_type), tuple(problem.batch_sizes),
    )  # fmt: skip


def _tile_counts(extent: int) -> list[int]:
    """Distribution tiles of an outer loop: divisors of its extent, and the whole extent."""
    values = {d for d in range(1, min(extent, _MAX_OUTER_TILES) + 1) if extent % d == 0}
    values.add(min(extent, _MAX_OUTER_TILES))
    return sorted(values)


def calls_microkernel(facts: CpuFacts) -> bool:
    """Say whether an executable of these facts lowers an mmt4d to the microkernel: its target
    names `mmt4d` or `all`, or leaves the choice to the compiler (an architecture whose default
    is codegen only makes the codegen candidates equal to the default)."""
    enabled = {name.strip() for name in facts.ukernels.split(",")}
    return bool({"", "default", "mmt4d", "all"} & enabled)


def codegen_target_of(executable_target: str) -> str | None:
    """Return an executable target's IR text with `ukernels = "none"`, the field replaced or
    added (None: no target, or one without a configuration to add it to)."""
    if re.search(UKERNELS_FIELD, executable_target):
        return re.sub(UKERNELS_FIELD, 'ukernels = "none"', executable_target, count=1)
    if not executable_target.endswith("}>"):
        return None
    fields = executable_target[: -len("}>")]
    return f'{fields}{"" if fields.endswith("{") else ", "}ukernels = "none"}}>'


def mmt4d_domains(sizes: Mmt4dSizes, facts: CpuFacts) -> dict[str, list[int]]:
    """Return each knob's candidate values."""
    # A batch_mmt4d's codegen needs the executable's target, to be repeated on its function.
    codegen = (
        sizes.ukernel_choice
        and calls_microkernel(facts)
        and (not sizes.batch or codegen_target_of(facts.executable_target) is not None)
    )
    return {
        "dist_m1": _tile_counts(sizes.m1),
        "dist_n1": _tile_counts(sizes.n1),
        UKERNEL: [0, 1] if codegen else [1],
    }


def build_mmt4d_constraints(
    sizes: Mmt4dSizes,
    facts: CpuFacts,
    require_parallelism: bool,
    context: z3.Context | None = None,
    default: Knobs | None = None,
) -> tuple[dict[str, z3.ArithRef], list[z3.BoolRef]]:
    """Build the z3 variables and constraints of the mmt4d space (a known `default`'s values
    join their domains).

    A workgroup's operand panels (its M1 and N1 tiles over the whole reduction) and its
    accumulator tile fit in L2; with `require_parallelism`, there are at least as many
    workgroups (over the batch too) as threads.
    """
    variables = {name: z3.Int(name, context) for name in KNOB_NAMES}
    dist_m1, dist_n1 = variables["dist_m1"], variables["dist_n1"]
    reduction = sizes.k1 * sizes.k0
    constraints = domain_constraints(variables, mmt4d_domains(sizes, facts), default)
    panel_bytes = (dist_m1 * sizes.m0 + dist_n1 * sizes.n0) * reduction * sizes.input_bytes
    accumulator_bytes = dist_m1 * sizes.m0 * dist_n1 * sizes.n0 * sizes.accumulator_bytes
    # A tile of one M1 and one N1 panel always fits, however long the reduction.
    constraints.append(
        z3.Or(panel_bytes + accumulator_bytes <= facts.l2_bytes, dist_m1 * dist_n1 == 1)
    )
    if require_parallelism:
        tiles_m = (sizes.m1 + dist_m1 - 1) / dist_m1
        tiles_n = (sizes.n1 + dist_n1 - 1) / dist_n1
        tiles = tiles_m * tiles_n * math.prod(sizes.batch) if sizes.batch else tiles_m * tiles_n
        constraints.append(tiles >= facts.threads)
    return variables, constraints


def _mmt4d_neighbourhood(sizes: Mmt4dSizes, facts: CpuFacts) -> Neighbourhood:
    """A batch_mmt4d's first candidates are the default's neighbours; an mmt4d's walk starts at
    once, after the default's tiles compiled with codegen when the microkernel is the default's."""
    domains = mmt4d_domains(sizes, facts)
    if sizes.batch:
        return Neighbourhood(domains, _MAX_NEIGHBOURS)
    return Neighbourhood({UKERNEL: domains[UKERNEL]}, 1)


# Distinct valid distribution tiles, lazily and reproducibly for a seed.
MMT4D_SPACE = NearDefaultSpace(build_mmt4d_constraints, _mmt4d_neighbourhood)
enumerate_mmt4d_space = MMT4D_SPACE.enumerate


def score_mmt4d_candidate(
    sizes: Mmt4dSizes, facts: CpuFacts, knobs: Knobs, default: Knobs | None
) -> float:
    """Score a distribution tile; higher is more promising.

    Balanced work across threads first (a last wave of few tiles idles the others), then the
    reuse a larger tile gets from what it brings into L2, against tiles that do not divide; a
    batch_mmt4d's less its distance to the `default`.
    """
    values = {name: int(value) for name, value in knobs}
    dist_m1, dist_n1 = values["dist_m1"], values["dist_n1"]
    tiles = math.ceil(sizes.m1 / dist_m1) * math.ceil(sizes.n1 / dist_n1) * math.prod(sizes.batch)
    imbalance = thread_imbalance(tiles, facts.threads)
    padded = math.ceil(sizes.m1 / dist_m1) * dist_m1 * math.ceil(sizes.n1 / dist_n1) * dist_n1
    waste = padded / (sizes.m1 * sizes.n1) - 1.0
    # Arithmetic intensity of the tile: output elements per operand element brought in.
    rows, columns = dist_m1 * sizes.m0, dist_n1 * sizes.n0
    intensity = rows * columns / (rows + columns)
    best = max(sizes.m0, sizes.n0) * _MAX_OUTER_TILES / 2
    score = 2.0 * min(1.0, intensity / best) - 2.0 * imbalance - 2.0 * waste
    return score - nearness_penalty(knobs, default if sizes.batch else None)


def mmt4d_tile_lists(problem: ContractionProblem, knobs: Knobs) -> dict[str, list[int]]:
    """Spread the knobs over the mmt4d's six loops as the three CPU tiling levels."""
    sizes = compute_mmt4d_sizes(problem)
    values = dict(knobs)
    (m1, m0), (n1, n0), (k1, k0) = problem.m_dims, problem.n_dims, problem.k_dims
    distribution = [0] * len(problem.loop_sizes)
    vector_parallel = [0] * len(problem.loop_sizes)
    vector_reduction = [0] * len(problem.loop_sizes)
    for dim in problem.batch_dims:
        distribution[dim], vector_parallel[dim] = 1, 1
    distribution[m1], distribution[n1] = int(values["dist_m1"]), int(values["dist_n1"])
    vector_parallel[m1], vector_parallel[n1] = 1, 1
    vector_parallel[m0], vector_parallel[n0] = sizes.m0, sizes.n0
    vector_reduction[k1], vector_reduction[k0] = 1, sizes.k0
    return tile_levels(distribution, vector_parallel, vector_reduction)


def parse_default_mmt4d_knobs(
    problem: ContractionProblem, levels: dict[str, list[int]]
) -> Knobs | None:
    """Read the compiler's distribution tile from its configuration, when it has our shape."""
    m1, n1 = problem.m_dims[0], problem.n_dims[0]
    dist_m1, dist_n1 = levels["distribution"][m1], levels["distribution"][n1]
    batch_tiles = [levels["distribution"][dim] for dim in problem.batch_dims]
    if dist_m1 < 1 or dist_n1 < 1 or any(tile != 1 for tile in batch_tiles):
        return None
    # The default compiles the op as its executable target says.
    return make_knobs({"dist_m1": dist_m1, "dist_n1": dist_n1, UKERNEL: 1})


class CpuMmt4dSpace(SizedCpuSpace[ContractionProblem, Mmt4dSizes]):
    """Mmt4dTilingExpert tiles of a data-tiled matmul's outer loops (`linalg.mmt4d`,
    `linalg.batch_mmt4d`)."""

    family = SizedFamily(
        ContractionProblem,
        MMT4D_PIPELINE,
        compute_mmt4d_sizes,
        enumerate_mmt4d_space,
        parse_default_mmt4d_knobs,
        score_mmt4d_candidate,
        mmt4d_tile_lists,
    )

    def configuration(self, problem: Problem, knobs: Knobs, context: ir.Context) -> OpConfiguration:
        """The tiles' compilation_info, and for an mmt4d's codegen candidate the op's own target
        (a batch_mmt4d's sets its dispatch's: `configuration_for`)."""
        tiled = super().configuration(problem, knobs, context)
        if not self.sets_more_than_compilation_info(knobs):
            return tiled
        if self.compute_sizes(problem).batch:
            raise IreetuneError(
                f"a codegen configuration of {problem.signature} sets its dispatch's executable "
                "target on its function: it is rendered with the dispatch"
            )
        return dataclasses.replace(tiled, op_attributes=((TARGET_ATTRIBUTE, CODEGEN_TARGET),))

    def configuration_for(
        self, request: SpaceRequest, knobs: Knobs, context: ir.Context
    ) -> OpConfiguration:
        """As `configuration`, and for a batch_mmt4d's codegen candidate its function's target:
        the request's executable target with `ukernels = "none"`."""
        problem = request.problem
        if not self.sets_more_than_compilation_info(knobs) or not self.compute_sizes(problem).batch:
            return self.configuration(problem, knobs, context)
        target = codegen_target_of(self.facts(request).executable_target)
        if target is None:
            raise IreetuneError(
                f"a codegen configuration of {problem.signature} needs its dispatch's executable "
                "target, and the request has none"
            )
        tiled = super().configuration(problem, knobs, context)
        return dataclasses.replace(tiled, function_attributes=((TARGET_ATTRIBUTE, target),))

    def sets_more_than_compilation_info(self, knobs: Knobs) -> bool:
        return not int(dict(knobs).get(UKERNEL, 1))


def compute_inner_tiled_sizes(problem: InnerTiledProblem) -> Mmt4dSizes:
    """Read an inner-tiled matmul's outer tile counts and inner tile: an mmt4d's sizes, with no
    microkernel to choose."""
    m1, n1, k1 = problem.loop_sizes
    m0, n0, k0 = problem.inner_tile
    inputs = max(element_bytes(t) for t in problem.input_types)
    return Mmt4dSizes(
        m1, n1, k1, m0, n0, k0, inputs, element_bytes(problem.output_type), ukernel_choice=False
    )


def inner_tiled_tile_lists(problem: InnerTiledProblem, knobs: Knobs) -> dict[str, list[int]]:
    """The distribution tile over M1 and N1; the vector levels walk one outer tile at a time,
    as IREE 3.13's default does (the op's inner tile is its intrinsic's unit)."""
    values = dict(knobs)
    return tile_levels([int(values["dist_m1"]), int(values["dist_n1"]), 0], [1, 1, 0], [0, 0, 1])


def parse_default_inner_tiled_knobs(
    problem: InnerTiledProblem, levels: dict[str, list[int]]
) -> Knobs | None:
    """Read the compiler's distribution tile, when its vector levels are one outer tile."""
    dist_m1, dist_n1, dist_k1 = levels["distribution"]
    if dist_m1 < 1 or dist_n1 < 1 or dist_k1 != 0:
        return None
    if levels.get("vector_common_parallel", [1, 1, 0]) != [1, 1, 0]:
        return None
    return make_knobs({"dist_m1": dist_m1, "dist_n1": dist_n1, UKERNEL: 1})


class CpuInnerTiledSpace(SizedCpuSpace[InnerTiledProblem, Mmt4dSizes]):
    """Mmt4dTilingExpert distribution tiles of an inner-tiled matmul's outer loops
    (`iree_codegen.inner_tiled`), searched as an mmt4d's are."""

    family = SizedFamily(
        InnerTiledProblem,
        MMT4D_PIPELINE,
        compute_inner_tiled_sizes,
        enumerate_mmt4d_space,
        parse_default_inner_tiled_knobs,
        score_mmt4d_candidate,
        inner_tiled_tile_lists,
    )
