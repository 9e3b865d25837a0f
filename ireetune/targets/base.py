"""The interface every target implements."""

from __future__ import annotations

import abc
import copy
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from iree.compiler import ir

from ireetune.flags.space import FlagSpace
from ireetune.problem.root_op import Problem
from ireetune.search.candidate import Knobs
from ireetune.search.features import FeatureSpace

# A machine fact a target's features depend on (vector width, cache size, thread count).
FactValue = int | float | str


class Target(abc.ABC):
    """One IREE backend: compile flags, how specs are applied, runtime device, search space."""

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

    @abc.abstractmethod
    def spec_flags(self, spec_path: Path) -> list[str]:
        """Return the flags that make iree-compile apply the tuning spec at `spec_path`."""

    def prepare(
        self, problem: Problem, benchmark_path: Path, scratch_dir: Path, context: ir.Context
    ) -> None:
        """Learn what the search space needs from the dispatch (default: nothing).

        Called once, before `parse_default_knobs` and `generate_candidates`; a target that does not
        support the problem raises an IreetuneError here. `scratch_dir` is a private folder.
        """

    @abc.abstractmethod
    def generate_candidates(
        self,
        problem: Problem,
        variant_target: ir.Attribute,
        default_knobs: Knobs | None,
        seed: int,
    ) -> Iterator[Knobs]:
        """Yield valid configurations lazily, in a seeded, reproducible order of exploration."""

    @abc.abstractmethod
    def order_candidates(
        self, problem: Problem, pool: list[Knobs], seed: int
    ) -> list[tuple[Knobs, float]]:
        """Order a pool of candidates, most promising first, each with its heuristic score."""

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

    @abc.abstractmethod
    def compilation_info(self, problem: Problem, knobs: Knobs, context: ir.Context) -> str:
        """Render a configuration as `#iree_codegen.compilation_info<...>` text."""

    @abc.abstractmethod
    def parse_default_knobs(self, problem: Problem, root_op: ir.Operation) -> Knobs | None:
        """Read the compiler's own choice from a configured root op, if it can be expressed."""
