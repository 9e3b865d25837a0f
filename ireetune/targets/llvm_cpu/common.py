"""What the llvm-cpu family spaces share: the machine's facts (what the space needs to know about
the CPU that will run the code) and the CPU config attribute."""

from __future__ import annotations

import abc
import dataclasses
import itertools
import json
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

import z3
from iree.compiler import ir
from iree.compiler.dialects import iree_codegen

from ireetune.core.candidate import Knobs, make_knobs, sort_by_score
from ireetune.core.errors import IreetuneError
from ireetune.core.features import FactValue
from ireetune.core.target import FamilySpace, OpConfiguration, SpaceRequest
from ireetune.database.space_cache import SpaceCache, compute_cache_key, stored_first
from ireetune.database.store import problem_key
from ireetune.problem.family import Problem, narrow
from ireetune.targets.z3_enumerate import distance_to

_DEFAULT_L1_BYTES = 32 * 1024
_DEFAULT_L2_BYTES = 1024 * 1024


@dataclass(frozen=True)
class CpuFacts:
    """Vector width, register file and caches of the CPU a dispatch is compiled for, and the
    microkernels its executable target enables."""

    cpu: str
    native_vector_bytes: int
    vector_registers: int
    l1_bytes: int
    l2_bytes: int
    threads: int
    max_vector_bytes: int = 32768
    # The target's `ukernels` field as written ("" without one: the compiler's default, which
    # in IREE 3.13 calls the mmt4d microkernel on x86-64).
    ukernels: str = ""
    # The whole executable target as IR text ("" when not read from one), which a spec that
    # changes one of its fields for one dispatch repeats (mmt4d_space.codegen_target_of).
    executable_target: str = ""


def thread_imbalance(tiles: int, threads: int) -> float:
    """How much of the last round of tiles is idle, as a share of a round: `tiles` tasks on
    `threads` threads take ceil(tiles / threads) rounds (0 when every thread is busy to the end)."""
    return math.ceil(tiles / threads) * threads / tiles - 1.0


def _read_cache_bytes(level: int) -> int | None:
    """Read the host's data-cache size of `level` from sysfs (Linux), or None."""
    cache_root = Path("/sys/devices/system/cpu/cpu0/cache")
    if not cache_root.is_dir():
        return None
    for index in sorted(cache_root.glob("index*")):
        try:
            if int((index / "level").read_text()) != level:
                continue
            if (index / "type").read_text().strip() not in ("Data", "Unified"):
                continue
            size_text = (index / "size").read_text().strip().upper()
        except (OSError, ValueError):
            continue
        match = re.fullmatch(r"(\d+)([KM]?)", size_text)
        if match:
            scale = {"": 1, "K": 1024, "M": 1024 * 1024}[match.group(2)]
            return int(match.group(1)) * scale
    return None


def read_cpu_facts(variant_target: ir.Attribute | None, threads: int) -> CpuFacts:
    """Derive CpuFacts from a `#hal.executable.target<"llvm-cpu", ...>` attribute.

    The vector width and register file come from the target's own `native_vector_size` and
    `cpu_features`; cache sizes come from the host when it is the target, else typical values.
    """
    text = str(variant_target) if variant_target is not None else ""
    vector_match = re.search(r"native_vector_size = (\d+)", text)
    native_vector_bytes = int(vector_match.group(1)) if vector_match else 16
    cpu_match = re.search(r'cpu = "([^"]*)"', text)
    features_match = re.search(r'cpu_features = "([^"]*)"', text)
    features = set(features_match.group(1).split(",")) if features_match else set()
    stack_match = re.search(r"max_stack_allocation_size = (\d+)", text)
    ukernels_match = re.search(r'ukernels = "([^"]*)"', text)
    is_aarch64 = "aarch64" in text or "arm64" in text
    vector_registers = 32 if ("+avx512f" in features or is_aarch64) else 16
    return CpuFacts(
        cpu=cpu_match.group(1) if cpu_match else "generic",
        native_vector_bytes=native_vector_bytes,
        vector_registers=vector_registers,
        l1_bytes=_read_cache_bytes(1) or _DEFAULT_L1_BYTES,
        l2_bytes=_read_cache_bytes(2) or _DEFAULT_L2_BYTES,
        threads=max(1, threads),
        max_vector_bytes=int(stack_match.group(1)) if stack_match else 32768,
        ukernels=ukernels_match.group(1) if ukernels_match else "",
        executable_target=text,
    )


# The CPU facts that are text (the others are counts of bytes, registers or threads).
_TEXT_FACTS = ("cpu", "ukernels", "executable_target")


def cpu_facts_from_record(facts: Mapping[str, FactValue]) -> CpuFacts:
    """Read recorded machine facts (`dataclasses.asdict` of CpuFacts) back; raise an
    IreetuneError for facts that are not a CPU's."""
    names = {field.name: field.type for field in dataclasses.fields(CpuFacts)}
    if set(facts) - set(names) or not {"cpu", "native_vector_bytes"} <= set(facts):
        raise IreetuneError(f"not the facts of a CPU: {sorted(facts)}")
    values: dict[str, int | str] = {}
    for name, value in facts.items():
        wanted = str if name in _TEXT_FACTS else int
        if not isinstance(value, wanted) or isinstance(value, bool):
            raise IreetuneError(f"CPU fact {name} must be {wanted.__name__}, got {value!r:.40}")
        values[name] = value
    return CpuFacts(**values)  # type: ignore[arg-type]


# Names the hand-written spaces (space.py, conv_space.py) in the key of stored solutions: change
# it whenever their constraints change, so that no stored configuration of the old space is used.
SPACE_VERSION = "llvm-cpu-space/v2"

LEVELS = ("distribution", "vector_common_parallel", "vector_reduction")
# A family space's problem sizes, as its constraints read them.
Sizes = TypeVar("Sizes")
# A family space's problem record.
RecordT = TypeVar("RecordT")
# Weight of closeness to IREE's own choice (log2 steps) in the contraction and convolution
# orderings. On real ResNet-50 convolutions (72 candidates) most configurations far from the
# default ran 2-22x slower and the few winners were near it: one log2 step from the default costs
# as much as the heuristic's whole range of channel-tile preference, or its preference between
# two register blocks of a contraction.
NEARNESS_WEIGHT = 1.5


def nearness_penalty(knobs: Knobs, default: Knobs | None) -> float:
    """What a heuristic score loses for a configuration's distance to the compiler's default
    (nothing when the default is not known)."""
    return NEARNESS_WEIGHT * distance_to(knobs, default) if default is not None else 0.0


def score_near_default(
    score: Callable[[Sizes, CpuFacts, Knobs], float],
) -> Callable[[Sizes, CpuFacts, Knobs, Knobs | None], float]:
    """Return a heuristic's score less a configuration's distance to the compiler's default
    (when known), as the contraction and convolution orderings score."""

    def scored(sizes: Sizes, facts: CpuFacts, knobs: Knobs, default: Knobs | None) -> float:
        return score(sizes, facts, knobs) - nearness_penalty(knobs, default)

    return scored


def order_pool(
    score: Callable[[Sizes, CpuFacts, Knobs, Knobs | None], float],
    sizes: Sizes,
    facts: CpuFacts,
    pool: list[Knobs],
    seed: int,
    default: Knobs | None = None,
) -> list[tuple[Knobs, float]]:
    """Sort a pool by descending score (given the compiler's default, when known); ties are
    broken by a seeded hash of each configuration, never by the pool's order."""
    return sort_by_score(pool, lambda knobs: score(sizes, facts, knobs, default), seed)


def tile_levels(
    distribution: list[int], parallel: list[int], reduction: list[int]
) -> dict[str, list[int]]:
    """Name a configuration's three tile lists as the CPU lowering config does (LEVELS)."""
    return dict(zip(LEVELS, (distribution, parallel, reduction), strict=True))


def tile_multiples(extent: int, steps: Sequence[int], limit: int) -> list[int]:
    """Return the distribution tiles of a loop whose vector tile is one of `steps`, up to
    `limit`: the multiples of a step that divide `extent`, or cover it in one tile."""
    values: set[int] = set()
    for step in steps:
        values.update(v for v in range(step, min(extent, limit) + 1, step) if extent % v == 0)
        whole = -(-extent // step) * step
        if whole <= limit:
            values.add(whole)
    return sorted(values)


def enough_tiles(
    context: z3.Context, extents: Sequence[tuple[int, z3.ArithRef]], threads: int
) -> z3.BoolRef:
    """State that the distribution tiles, one loop's extent and tile variable each, are at least
    as many as the threads (every thread gets work)."""
    tiles = z3.IntVal(1, context)
    for size, tile in extents:
        tiles = tiles * (size / tile)
    return tiles >= threads


def positive_knobs(values: Mapping[str, int]) -> Knobs | None:
    """Return the values as knobs, or None when one is not positive (a default read from the
    compiler that the space has no form for)."""
    if any(value <= 0 for value in values.values()):
        return None
    return make_knobs(values)


def render_cpu_compilation_info(
    tiles: Mapping[str, list[int]], pipeline_name: str, context: ir.Context
) -> str:
    """Render CPU tiling levels and a pipeline as `#iree_codegen.compilation_info` text."""
    fields = ", ".join(f"{level} = {values}" for level, values in tiles.items())
    with context:
        # iree_cpu has no Python binding in IREE 3.13, so its attribute is parsed from text;
        # the compilation_info around it is built through the bindings.
        lowering_config = ir.Attribute.parse(f"#iree_cpu.lowering_config<{fields}>")
        pipeline = ir.Attribute.parse(f"#iree_cpu.pipeline<{pipeline_name}>")
        translation_info = iree_codegen.TranslationInfoAttr.get(pipeline)
        return str(iree_codegen.CompilationInfoAttr.get(lowering_config, translation_info))


def read_cpu_levels(
    root_op: ir.Operation, loop_count: int, names: Sequence[str] = LEVELS
) -> dict[str, list[int]] | None:
    """Read the tiling levels `names` (by default the three of LEVELS) of a root op's
    `#iree_cpu.lowering_config`, if it has them, each with one entry per loop."""
    if "lowering_config" not in root_op.attributes:
        return None
    text = str(root_op.attributes["lowering_config"])
    levels = {}
    for level in names:
        match = re.search(rf"{level} = \[([0-9, ]*)\]", text)
        if match is None:
            return None
        levels[level] = [int(v) for v in match.group(1).split(",") if v.strip()]
    if any(len(values) != loop_count for values in levels.values()):
        return None
    return levels


def request_cpu_facts(request: SpaceRequest, threads: int) -> CpuFacts:
    """Return the CPU facts of a request: those it recorded, else its executable target's."""
    if request.facts is not None:
        return cpu_facts_from_record(request.facts)
    return read_cpu_facts(request.variant_target, threads)


@dataclass(frozen=True)
class SolutionStore:
    """Where a CPU space keeps the solutions it draws (`database/space_cache.py`): the folder of
    every problem's entry, and the target's name in their keys."""

    root: Path
    target_name: str


class CpuSpace(FamilySpace):
    """What the CPU spaces share: the machine's facts, read from the request (the dispatch's
    target, or recorded facts), and the solutions stored by earlier runs, yielded first."""

    def __init__(self, threads: int, store: SolutionStore | None = None) -> None:
        self.threads = threads
        self.store = store

    def facts(self, request: SpaceRequest) -> CpuFacts:
        return request_cpu_facts(request, self.threads)

    def generate(self, request: SpaceRequest) -> Iterator[Knobs]:
        """Yield the solutions earlier runs stored (seeded order), then fresh ones, storing those
        as they come."""
        problem = request.problem
        names = self.stored_knob_names(problem)
        if names is None or self.store is None:
            return self.enumerate(request, ())
        facts = json.dumps(dataclasses.asdict(self.facts(request)))
        key = compute_cache_key(
            [problem_key(problem), self.store.target_name, facts, SPACE_VERSION]
        )
        cache = SpaceCache(self.store.root / key)
        stored = [
            knobs
            for knobs in cache.read_solutions()
            if {name for name, _ in knobs} == names and knobs != request.default_knobs
        ]
        live = self.enumerate(request, stored)
        return _stored_then_live(stored, live, cache, request.seed)

    @abc.abstractmethod
    def enumerate(self, request: SpaceRequest, known: Sequence[Knobs]) -> Iterator[Knobs]:
        """Yield valid configurations lazily, in a seeded order; never any of `known` (solutions
        an earlier run stored, which `generate` yields itself)."""

    def stored_knob_names(self, problem: Problem) -> frozenset[str] | None:
        """Name the knobs of a problem whose solutions the space cache keeps (None: not kept,
        the space is small enough to recompute)."""
        return None


def _stored_then_live(
    stored: list[Knobs], live: Iterator[Knobs], cache: SpaceCache, seed: int
) -> Iterator[Knobs]:
    """Yield stored solutions (seeded order), then fresh ones, storing those as they come."""
    yield from stored_first(stored, seed)
    for knobs in live:
        cache.add_solution(knobs)
        yield knobs


@dataclass(frozen=True)
class SizedFamily(Generic[RecordT, Sizes]):
    """A family's part of a sized CPU space: its record and its space module's free functions."""

    record: type[RecordT]
    # The pipeline its configurations name.
    pipeline: str
    # The sizes the constraints read; raises an IreetuneError for a problem the space cannot search.
    compute_sizes: Callable[[RecordT], Sizes]
    # Valid configurations of the sizes, lazily and reproducibly for a seed (facts, seed, the
    # default, the known solutions).
    enumerate_space: Callable[
        [Sizes, CpuFacts, int, Knobs | None, Sequence[Knobs]], Iterator[Knobs]
    ]
    # The compiler's default tiling levels read into knobs (None if they have no form).
    parse_levels: Callable[[RecordT, dict[str, list[int]]], Knobs | None]
    # A configuration's score (facts, knobs, the default); higher is more promising.
    score: Callable[[Sizes, CpuFacts, Knobs, Knobs | None], float]
    # The knobs spread over the op's loops as tiling levels.
    tile_lists: Callable[[RecordT, Knobs], dict[str, list[int]]]


def _one_step(before: int | str | None, after: int | str) -> bool:
    """Say whether a knob's value moved by at most a factor of two (from or to 0: by one; a
    named choice, as a pipeline, never moves one step)."""
    if not isinstance(before, int) or not isinstance(after, int):
        return False
    low, high = sorted((before, after))
    return high <= 1 if low <= 0 else high <= 2 * low


# How many configurations `SizedCpuSpace.near` draws around a centre before keeping its
# neighbours (a family's neighbourhood proposes at most 24).
NEAR_LIMIT = 32


class SizedCpuSpace(CpuSpace, Generic[RecordT, Sizes]):
    """A CPU space whose constraints read only the problem's sizes (which also say when the space
    cannot search a problem) and whose order centres on the compiler's own configuration: a
    family declares it with its `SizedFamily`."""

    family: SizedFamily[RecordT, Sizes]
    # The tiling levels of the pipeline's lowering_config that the default is read from.
    levels: tuple[str, ...] = LEVELS

    def compute_sizes(self, problem: Problem) -> Sizes:
        return self.family.compute_sizes(narrow(problem, self.family.record))

    def order(self, request: SpaceRequest, pool: list[Knobs]) -> list[tuple[Knobs, float]]:
        sizes = self.compute_sizes(request.problem)
        facts = self.facts(request)
        return order_pool(
            self.family.score, sizes, facts, pool, request.seed, request.default_knobs
        )

    def refusal(self, problem: Problem) -> str | None:
        try:
            self.compute_sizes(problem)
        except IreetuneError as error:
            return str(error)
        return None

    def enumerate(self, request: SpaceRequest, known: Sequence[Knobs]) -> Iterator[Knobs]:
        sizes = self.compute_sizes(request.problem)
        facts = self.facts(request)
        return self.family.enumerate_space(sizes, facts, request.seed, request.default_knobs, known)

    def near(self, request: SpaceRequest, centre: Knobs) -> list[Knobs]:
        """The configurations the space would search first were `centre` the default, valid
        under the same constraints, that change one or two of its knobs by at most a factor
        of two (its neighbours; what the seeded walk beyond them draws is left out)."""
        drawn = self.enumerate(dataclasses.replace(request, default_knobs=centre), ())
        values = dict(centre)

        def steps_away(knobs: Knobs) -> list[bool]:
            return [
                _one_step(values.get(name), value)
                for name, value in knobs
                if values.get(name) != value
            ]

        return [
            knobs
            for knobs in itertools.islice(drawn, NEAR_LIMIT)
            if 0 < len(steps := steps_away(knobs)) <= 2 and all(steps)
        ]

    def parse_default_knobs(self, problem: Problem, root_op: ir.Operation) -> Knobs | None:
        levels = read_cpu_levels(root_op, len(problem.loop_sizes), self.levels)
        if levels is None:
            return None
        return self.family.parse_levels(narrow(problem, self.family.record), levels)

    def configuration(self, problem: Problem, knobs: Knobs, context: ir.Context) -> OpConfiguration:
        tiles = self.family.tile_lists(narrow(problem, self.family.record), knobs)
        return OpConfiguration(render_cpu_compilation_info(tiles, self.family.pipeline, context))
