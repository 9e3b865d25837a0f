"""The interface every target implements, and the per-family search space it registers.

A target knows how to compile, apply a spec and run; what it can tune it says family by family:
`family_spaces()` maps an op family's name to a factory of the `FamilySpace` that searches it, and
`unsupported_families()` says, for the families it cannot tune, why not. Generic code never asks
which record a problem is: `space_for` picks the space by `problem.family`. A target keeps no
state between problems: `prepare_space` returns the space it prepared, which the caller keeps,
and the machine's facts travel in each `SpaceRequest`. The learned cost model's features come
from the target's `FeatureExtractor` (core/features.py).
"""

from __future__ import annotations

import abc
import copy
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from iree.compiler import ir

from ireetune.core.candidate import Knobs
from ireetune.core.errors import IreetuneError
from ireetune.core.features import FactValue, FeatureExtractor
from ireetune.core.flag_space import FlagSpace
from ireetune.core.tools import SPEC_SAFETY_FLAGS

if TYPE_CHECKING:
    from ireetune.problem.family import Problem

# The option that applies a tuning spec on most backends (llvm-cpu, ROCm).
TUNING_SPEC_FLAG = "--iree-codegen-tuning-spec-path"


@dataclass(frozen=True)
class OpConfiguration:
    """What a candidate sets: its compilation_info on the root op and, for some families, other
    attributes beside it (attention's `decomposition_config`) and the `lowering_config` of the
    dispatch's other ops by kind (`reduction` or `parallel`: a GPU softmax's maximum and
    normalisation), all as IR text."""

    compilation_info: str
    op_attributes: tuple[tuple[str, str], ...] = ()
    sibling_configs: tuple[tuple[str, str], ...] = ()
    # Attributes set on the op's function (a CPU batch_mmt4d compiled with codegen: its own
    # `hal.executable.target`, which the ops it is split into find there).
    function_attributes: tuple[tuple[str, str], ...] = ()
    # Registered passes run on the configured op's function once its attributes are set (the
    # CPU's strided contractions become contractions there, keeping their configuration).
    function_passes: tuple[str, ...] = ()


@dataclass(frozen=True)
class SpaceRequest:
    """What a space generates (or orders) candidates for: the problem, the dispatch's executable
    target, the compiler's own configuration (None when unknown; never yielded, it is the
    baseline), the seed of the order of exploration and the machine's facts when they were
    recorded (offline, no executable target to read them from; None: read them from it)."""

    problem: Problem
    variant_target: ir.Attribute | None
    default_knobs: Knobs | None
    seed: int
    facts: Mapping[str, FactValue] | None = None


class FamilySpace(abc.ABC):
    """One target's search space for one op family: candidates, their order and their config."""

    def refusal(self, problem: Problem) -> str | None:
        """Say why this space cannot search a problem of its family (a depthwise convolution on
        the CPU, say), from the problem alone; None when it can. `prepare` raises the same."""
        return None

    def space_notes(self) -> tuple[str, ...]:
        """Say what a user should know about the space `prepare` set up (a pipeline left out
        because it has no solution, a hand-written space used where the compiler has none)."""
        return ()

    def prepare(
        self, problem: Problem, benchmark_path: Path, scratch_dir: Path, context: ir.Context
    ) -> None:
        """Learn what the space needs from the dispatch (default: nothing); raise an
        IreetuneError for a problem of the family the space cannot search."""

    @abc.abstractmethod
    def generate(self, request: SpaceRequest) -> Iterator[Knobs]:
        """Yield valid configurations lazily, in a seeded, reproducible order of exploration."""

    def near(self, request: SpaceRequest, centre: Knobs) -> list[Knobs]:
        """Return valid configurations next to `centre` (one of the request's candidates), the
        closest first, for a run to climb towards from its fastest candidate so far (none by
        default: the space is searched as `generate` yields it)."""
        return []

    @abc.abstractmethod
    def order(self, request: SpaceRequest, pool: list[Knobs]) -> list[tuple[Knobs, float]]:
        """Order a pool of the request's candidates, most promising first, each with its
        heuristic score."""

    @abc.abstractmethod
    def configuration(self, problem: Problem, knobs: Knobs, context: ir.Context) -> OpConfiguration:
        """Render a configuration as the attributes the spec sets on the root op; raise an
        IreetuneError for one that needs the dispatch's executable target (`configuration_for`)."""

    def configuration_for(
        self, request: SpaceRequest, knobs: Knobs, context: ir.Context
    ) -> OpConfiguration:
        """Render a configuration for the request's dispatch, which may read its executable
        target (a CPU batch_mmt4d compiled with codegen; default: as `configuration`)."""
        return self.configuration(request.problem, knobs, context)

    def sets_more_than_compilation_info(self, knobs: Knobs) -> bool:
        """Say whether these knobs' configuration sets more than the root op's compilation_info
        in a family that otherwise does not (a CPU mmt4d compiled with codegen; default: no)."""
        return False

    @abc.abstractmethod
    def parse_default_knobs(self, problem: Problem, root_op: ir.Operation) -> Knobs | None:
        """Read the compiler's own choice from a configured root op, if it can be expressed."""


# Makes a family's space for a problem (a family may hold more than one: CPU windows).
SpaceFactory = Callable[["Problem"], FamilySpace]


@dataclass(frozen=True)
class TargetTraits:
    """What sets a backend apart, as facts the stages read."""

    # Real-input timing of the op, not the dispatch benchmark, picks the winner. Dispatch
    # benchmarks run on uninitialised buffers; where that distorts timings (the CPU, denormals),
    # the verified candidates are timed again on real inputs and that decides, unless the run
    # decides on the benchmark (a model's dispatches, zeroed: `decide_on_dispatch_benchmark`).
    decides_at_model_level: bool = False
    # A model's dumped dispatch benchmarks get their buffer zeroed once, when it is allocated
    # (`frontend/dispatches.zero_benchmark_buffer`): the compiler leaves it uninitialised, and
    # on the CPU the garbage made a benchmark up to 12x slower than the same dispatch on data
    # (denormals). On Vulkan's lavapipe the same 3136x24x144 matmul dispatch took the same time
    # dumped and zeroed (2026-11-29), so only the CPU sets it.
    zeroes_benchmark_buffers: bool = False
    # A configuration renders from its knobs alone, without `prepare` reading the dispatch
    # (hand-written CPU spaces do; GPU spaces read the compiler's template).
    renders_without_dispatch: bool = False
    # The iree-compile option that applies a tuning spec (the tuning-spec path by default; a
    # backend that ignores it names its own).
    spec_flag: str = TUNING_SPEC_FLAG
    # IREE ships default tuning specs for this target.
    has_default_specs: bool = False
    # The families whose configuration sets more than the root op's compilation_info (so a
    # spec cannot be rebuilt from a stored compilation_info alone).
    full_configuration_families: frozenset[str] = frozenset()


class Target(abc.ABC):
    """One IREE backend: compile flags, how specs are applied, runtime device, search spaces."""

    # Global iree-compile options added to every compile for this target (flag tuning's winner,
    # or the user's `--flags`); set through `with_global_flags`.
    global_flags: tuple[str, ...] = ()
    # Where what is slow to recompute for a problem (the compiler's space, drawn solutions) is
    # kept (None: nothing is kept); the tuner sets a folder beside its database.
    cache_folder: Path | None = None
    traits: TargetTraits = TargetTraits()

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """Name the target as the user wrote it, normalised (`cpu`, `cuda:sm_80`)."""

    @property
    @abc.abstractmethod
    def backend(self) -> str:
        """Name the HAL backend as it appears in executable targets (`llvm-cpu`, `cuda`)."""

    @property
    @abc.abstractmethod
    def runtime_device(self) -> str:
        """Name the default runtime device URI (`local-task`, `cuda://0`)."""

    @abc.abstractmethod
    def target_flags(self) -> list[str]:
        """Return the iree-compile flags that select this target."""

    def compile_flags(self) -> list[str]:
        """Return the flags of every compile for this target: its selection, then global flags."""
        return [*self.target_flags(), *self.global_flags]

    def with_global_flags(self, flags: Sequence[str]) -> Target:
        """Return this target with `flags` added to every compile (replacing earlier ones)."""
        changed = copy.copy(self)
        changed.global_flags = tuple(flags)
        return changed

    def flag_space(self) -> FlagSpace:
        """Return the global compiler options worth searching on this target (default: none)."""
        return FlagSpace(options=(), combinations=())

    def model_flag_space(self, model_path: Path, folder: Path, timeout_s: float) -> FlagSpace:
        """Return the options worth searching for one model: `flag_space()`, and any option
        made for the model (a file it needs is written into `folder`)."""
        return self.flag_space()

    def spec_prologue(self, problem: Problem) -> tuple[str, ...]:
        """Name the passes a spec must run on the payload before matching `problem`, so that the
        matcher sees the op as this target configures it (default: none)."""
        return ()

    @abc.abstractmethod
    def family_spaces(self) -> Mapping[str, SpaceFactory]:
        """Map each op family this target tunes to the factory of its search space."""

    def unsupported_families(self) -> Mapping[str, str]:
        """Say, for op families this target does not tune, why not."""
        return {}

    def features(self, request: SpaceRequest) -> FeatureExtractor | None:
        """Return the extractor of the features the learned cost model sees for the request's
        problem on its machine (None: the target has none, and its heuristic orders alone)."""
        return None


def spec_flags(target: Target, spec_path: Path) -> list[str]:
    """Return the flags that make iree-compile apply the tuning spec at `spec_path`."""
    return [f"{target.traits.spec_flag}={spec_path}", *SPEC_SAFETY_FLAGS]


def links_specs(target: Target) -> bool:
    """Say whether the compiler links the spec with others (a tuning spec) rather than running
    it as given (a transform-dialect library), so that it can dump the linked spec."""
    return target.traits.spec_flag == TUNING_SPEC_FLAG


def needs_more_than_compilation_info(
    target: Target, problem: Problem, knobs: Knobs | None = None
) -> bool:
    """Say whether a configuration of this problem (of these knobs, when given) sets more than
    the root op's compilation_info (so a spec cannot be rebuilt from a stored compilation_info
    alone)."""
    if problem.family in target.traits.full_configuration_families:
        return True
    return knobs is not None and space_for(target, problem).sets_more_than_compilation_info(knobs)


def target_refusal(target: Target, problem: Problem) -> str | None:
    """Say why a target cannot tune a problem, from the problem alone (None: it can try; GPU
    targets may still find the compiler's space empty when they prepare)."""
    try:
        space = space_for(target, problem)
    except IreetuneError as error:
        return str(error)
    return space.refusal(problem)


def space_for(target: Target, problem: Problem) -> FamilySpace:
    """Return a fresh search space of the problem's family (enough for spaces that need nothing
    from the dispatch to render a configuration); raise an IreetuneError for a family the target
    does not tune."""
    factory = target.family_spaces().get(problem.family)
    if factory is None:
        why = target.unsupported_families().get(problem.family, "no search space for it yet")
        raise IreetuneError(f"{problem.family} is not supported on {target.name}: {why}")
    return factory(problem)


def prepare_space(
    target: Target, problem: Problem, benchmark_path: Path, scratch_dir: Path, context: ir.Context
) -> FamilySpace:
    """Pick the problem's search space and let it learn from the dispatch; return it.

    Called once per problem, before the space's `parse_default_knobs` and `generate`; a target
    that does not support the problem raises an IreetuneError here. `scratch_dir` is a private
    folder.
    """
    space = space_for(target, problem)
    why = space.refusal(problem)
    if why is not None:
        raise IreetuneError(f"{problem.signature} is not tuned on {target.name}: {why}")
    space.prepare(problem, benchmark_path, scratch_dir, context)
    return space
