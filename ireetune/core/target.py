"""The interface every target implements, and the per-family search space it registers.

A target knows how to compile, apply a spec and run; what it can tune it says family by family:
`family_spaces()` maps an op family's name to a factory of the `FamilySpace` that searches it, and
`unsupported_families()` says, for the families it cannot tune, why not. Generic code never asks
which record a problem is: the target picks the space by `problem.family`.
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
from ireetune.core.features import FeatureSpace
from ireetune.core.flag_space import FlagSpace
from ireetune.core.tools import SPEC_SAFETY_FLAGS

if TYPE_CHECKING:
    from ireetune.problem.family import Problem

# The option that applies a tuning spec on most backends (llvm-cpu, ROCm).
TUNING_SPEC_FLAG = "--iree-codegen-tuning-spec-path"
# A machine fact a target's features depend on (vector width, cache size, thread count).
FactValue = int | float | str


@dataclass(frozen=True)
class OpConfiguration:
    """What a candidate sets: its compilation_info on the root op and, for some families, other
    attributes beside it (attention's `decomposition_config`) and the `lowering_config` of the
    dispatch's other ops by kind (`reduction` or `parallel`: a GPU softmax's maximum and
    normalisation), all as IR text."""

    compilation_info: str
    op_attributes: tuple[tuple[str, str], ...] = ()
    sibling_configs: tuple[tuple[str, str], ...] = ()
    # Registered passes run on the configured op's function once its attributes are set (the
    # CPU's strided contractions become contractions there, keeping their configuration).
    function_passes: tuple[str, ...] = ()


@dataclass(frozen=True)
class SpaceRequest:
    """What a space generates candidates for: the problem, the dispatch's executable target, the
    compiler's own configuration (None when unknown; never yielded, it is the baseline) and the
    seed of the order of exploration."""

    problem: Problem
    variant_target: ir.Attribute
    default_knobs: Knobs | None
    seed: int


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

    @abc.abstractmethod
    def order(self, problem: Problem, pool: list[Knobs], seed: int) -> list[tuple[Knobs, float]]:
        """Order a pool of candidates, most promising first, each with its heuristic score."""

    @abc.abstractmethod
    def configuration(self, problem: Problem, knobs: Knobs, context: ir.Context) -> OpConfiguration:
        """Render a configuration as the attributes the spec sets on the root op."""

    @abc.abstractmethod
    def parse_default_knobs(self, problem: Problem, root_op: ir.Operation) -> Knobs | None:
        """Read the compiler's own choice from a configured root op, if it can be expressed."""


SpaceFactory = Callable[[], FamilySpace]


class Target(abc.ABC):
    """One IREE backend: compile flags, how specs are applied, runtime device, search spaces."""

    _space: FamilySpace | None = None
    _space_family: str = ""

    # Global iree-compile options added to every compile for this target (flag tuning's winner,
    # or the user's `--flags`); set through `with_global_flags`.
    global_flags: tuple[str, ...] = ()

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """Name the target as the user wrote it, normalised (`cpu`, `cuda:sm_80`)."""

    @property
    @abc.abstractmethod
    def backend(self) -> str:
        """Name the HAL backend as it appears in executable targets (`llvm-cpu`, `cuda`)."""

    @property
    def decides_at_model_level(self) -> bool:
        """Say whether real-input timing of the op, not the dispatch benchmark, picks the winner.

        Dispatch benchmarks run on uninitialised buffers; where that distorts timings (the CPU,
        denormals), the verified candidates are timed again on real inputs and that decides.
        """
        return False

    @property
    def zeroes_benchmark_buffers(self) -> bool:
        """Say whether a model's dumped dispatch benchmarks get their buffer zeroed once, when it
        is allocated (`frontend/dispatches.zero_benchmark_buffer`): the compiler leaves it
        uninitialised, and on the CPU the garbage made a benchmark up to 12x slower than the
        same dispatch on data (denormals). On Vulkan's lavapipe the same 3136x24x144 matmul
        dispatch took the same time dumped and zeroed (2026-11-29), so only the CPU sets it."""
        return False

    def searches_on_real_inputs(self, problem: Problem) -> bool:
        """Say whether candidates are timed on real inputs from the first pass (the reference
        program), so that the search is steered by the signal that decides."""
        return self.decides_at_model_level and problem.reference_carries_config

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

    @property
    def spec_flag(self) -> str:
        """Name the iree-compile option that applies a tuning spec on this target (the tuning-spec
        path by default; a backend that ignores it names its own)."""
        return TUNING_SPEC_FLAG

    @property
    def links_specs(self) -> bool:
        """Say whether the compiler links the spec with others (a tuning spec) rather than running
        it as given (a transform-dialect library), so that it can dump the linked spec."""
        return self.spec_flag == TUNING_SPEC_FLAG

    @property
    def has_default_specs(self) -> bool:
        """Say whether IREE ships default tuning specs for this target (default: no)."""
        return False

    def peak_gflops(self, element_type: str) -> float | None:
        """Return the published dense peak of this target's usual device for inputs of
        `element_type` (`f16`, `f32`, ...), or None when unknown (CPUs: it depends on the part)."""
        return None

    @property
    def peak_device(self) -> str:
        """Name the device `peak_gflops` describes."""
        return self.name

    def spec_flags(self, spec_path: Path) -> list[str]:
        """Return the flags that make iree-compile apply the tuning spec at `spec_path`."""
        return [f"{self.spec_flag}={spec_path}", *SPEC_SAFETY_FLAGS]

    def spec_prologue(self, problem: Problem) -> tuple[str, ...]:
        """Name the passes a spec must run on the payload before matching `problem`, so that the
        matcher sees the op as this target configures it (default: none)."""
        return ()

    @property
    def renders_without_dispatch(self) -> bool:
        """Say whether a configuration renders from its knobs alone, without `prepare` reading
        the dispatch (hand-written CPU spaces do; GPU spaces read the compiler's template)."""
        return False

    def needs_more_than_compilation_info(self, problem: Problem) -> bool:
        """Say whether a configuration of this problem sets more than the root op's
        compilation_info (so a spec cannot be rebuilt from a stored compilation_info alone)."""
        return False

    @abc.abstractmethod
    def family_spaces(self) -> Mapping[str, SpaceFactory]:
        """Map each op family this target tunes to the factory of its search space."""

    def unsupported_families(self) -> Mapping[str, str]:
        """Say, for op families this target does not tune, why not."""
        return {}

    def prepare(
        self, problem: Problem, benchmark_path: Path, scratch_dir: Path, context: ir.Context
    ) -> None:
        """Pick the problem's search space and let it learn from the dispatch.

        Called once per problem, before `parse_default_knobs` and `generate_candidates`; a target
        that does not support the problem raises an IreetuneError here. `scratch_dir` is a
        private folder.
        """
        self._space = None
        space = self.space_for(problem)
        refusal = space.refusal(problem)
        if refusal is not None:
            raise IreetuneError(f"{problem.signature} is not tuned on {self.name}: {refusal}")
        space.prepare(problem, benchmark_path, scratch_dir, context)

    def refusal(self, problem: Problem) -> str | None:
        """Say why this target cannot tune a problem, from the problem alone (None: it can try;
        GPU targets may still find the compiler's space empty when they prepare)."""
        if problem.family not in self.family_spaces():
            why = self.unsupported_families().get(problem.family, "no search space for it yet")
            return f"{problem.family} is not supported on {self.name}: {why}"
        return self.space_for(problem).refusal(problem)

    def space_for(self, problem: Problem) -> FamilySpace:
        """Return the search space of the problem's family: the one `prepare` set up, or a fresh
        one (enough for spaces that need nothing from the dispatch to render a configuration)."""
        if self._space is not None and self._space_family == problem.family:
            return self._space
        factory = self.family_spaces().get(problem.family)
        if factory is None:
            why = self.unsupported_families().get(problem.family, "no search space for it yet")
            raise IreetuneError(f"{problem.family} is not supported on {self.name}: {why}")
        self._space, self._space_family = factory(), problem.family
        return self._space

    def generate_candidates(
        self,
        problem: Problem,
        variant_target: ir.Attribute,
        default_knobs: Knobs | None,
        seed: int,
    ) -> Iterator[Knobs]:
        """Yield valid configurations lazily, in a seeded, reproducible order of exploration."""
        return self.generate_for(SpaceRequest(problem, variant_target, default_knobs, seed))

    def generate_for(self, request: SpaceRequest) -> Iterator[Knobs]:
        """Yield the candidates of a request from its family's space (a target that keeps
        solutions between runs draws them from its cache first)."""
        return self.space_for(request.problem).generate(request)

    def order_candidates(
        self, problem: Problem, pool: list[Knobs], seed: int
    ) -> list[tuple[Knobs, float]]:
        """Order a pool of candidates, most promising first, each with its heuristic score."""
        return self.space_for(problem).order(problem, pool, seed)

    def configuration(self, problem: Problem, knobs: Knobs, context: ir.Context) -> OpConfiguration:
        """Render a configuration as the attributes the spec sets on the root op."""
        return self.space_for(problem).configuration(problem, knobs, context)

    def use_cache_folder(self, folder: Path) -> None:
        """Keep what is slow to recompute for a problem (the compiler's space) under `folder`.

        Default: nothing is kept. The tuner passes a folder beside its database.
        """

    def feature_space(self, problem: Problem) -> FeatureSpace | None:
        """Name the features the learned cost model sees for this problem (None: the target has
        none, and its heuristic orders alone)."""
        return None

    def candidate_features(self, problem: Problem, pool: Sequence[Knobs]) -> list[list[float]]:
        """Return each candidate's features, in `feature_space(problem).names` order.

        Called after `generate_candidates` (or `use_machine_facts`), when the machine is known.
        """
        raise NotImplementedError(f"{self.name} has no features for a learned cost model")

    def machine_facts(self) -> dict[str, FactValue]:
        """Return what the features know about the machine, to record beside measurements."""
        return {}

    def use_machine_facts(self, facts: Mapping[str, FactValue]) -> None:
        """Take recorded machine facts (from `machine_facts`), to compute features offline."""

    def compilation_info(self, problem: Problem, knobs: Knobs, context: ir.Context) -> str:
        """Render a configuration as `#iree_codegen.compilation_info<...>` text."""
        return self.configuration(problem, knobs, context).compilation_info

    def parse_default_knobs(self, problem: Problem, root_op: ir.Operation) -> Knobs | None:
        """Read the compiler's own choice from a configured root op, if it can be expressed."""
        return self.space_for(problem).parse_default_knobs(problem, root_op)
