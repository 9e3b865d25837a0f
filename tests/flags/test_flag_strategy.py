"""The flag search's strategy (seeded greedy steps with successive halving) on a fake objective.

The strategy sees the model only through its `Evaluate`; here a fake one plants a best
combination outside the fixed list the searches tried before. The compile path is real in
tests/flags/test_flag_search.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ireetune.core.flag_space import (
    FlagSet,
    list_tuned_flags,
    make_flag_set,
    parse_configuration,
    propose_flag_sets,
    spell_configuration,
)
from ireetune.flags.strategy import (
    Budget,
    StrategySettings,
    propose_single_changes,
    search_flag_space,
    set_option,
)
from ireetune.targets.llvm_cpu.flags import CPU_FLAG_SPACE, CPU_TUNED_OPTIONS, DATA_TILING

TILE_BYTES = "--iree-llvmcpu-matmul-tile-bytes"
DISTRIBUTION = "--iree-llvmcpu-distribution-size"
THREADS = "--iree-llvmcpu-number-of-threads"
UKERNELS = "--iree-llvmcpu-enable-ukernels"
# The planted best: the old list's best set plus two numeric options it never tried.
PLANTED = make_flag_set((DATA_TILING, f"{UKERNELS}=mmt4d", f"{DISTRIBUTION}=32", f"{THREADS}=2"))
SEEDS = propose_flag_sets(CPU_FLAG_SPACE, 24)
# Room for the seeds and about three steps of the 26 CPU options (the default, 48, is one and a
# half: it bounds the compiles of a real model when no time budget is given).
SETTINGS = StrategySettings(max_sets=96)


class FakeModel:
    """A model whose time is a product of per-option factors (plus seeded noise that shrinks
    with the rounds), on a clock that advances with every compile and timed round."""

    def __init__(self, noise: float = 0.01) -> None:
        self.rng = np.random.default_rng(0)
        self.noise = noise
        self.clock_s = 0.0
        self.compiled: set[frozenset[str]] = set()
        self.calls: list[tuple[float, int, int]] = []

    def relative_time(self, flag_set: FlagSet) -> float:
        configuration = parse_configuration(flag_set)
        factors = {
            (DATA_TILING, "true"): 0.6,
            (UKERNELS, "mmt4d"): 0.9 if DATA_TILING in configuration else 1.0,
            (DISTRIBUTION, "32"): 0.85,
            (THREADS, "2"): 0.9,
        }
        time = 1.0
        for item in configuration.items():
            time *= factors.get(item, 1.03)
        return time

    def __call__(self, flag_sets: Sequence[FlagSet], rounds: int) -> Mapping[FlagSet, float]:
        self.calls.append((self.clock_s, len(flag_sets), rounds))
        fresh = {frozenset(s.flags) for s in flag_sets} - self.compiled
        self.compiled |= fresh
        self.clock_s += 2.0 * len(fresh) + 0.1 * rounds * (len(flag_sets) + 1)
        spread = self.noise / np.sqrt(rounds)
        return {s: self.relative_time(s) * (1 + self.rng.normal(0, spread)) for s in flag_sets}


def test_the_planted_best_is_outside_the_old_list() -> None:
    assert frozenset(PLANTED.flags) not in {frozenset(s.flags) for s in SEEDS}
    # Every flag the search can write is one a run folder may carry.
    assert set(PLANTED.flags) <= list_tuned_flags(CPU_TUNED_OPTIONS)


def test_the_search_finds_a_planted_best_combination_outside_the_old_list() -> None:
    model = FakeModel()
    result = search_flag_space(model, SEEDS, CPU_TUNED_OPTIONS, SETTINGS, Budget())
    assert frozenset(result.incumbent.flags) == frozenset(PLANTED.flags)
    assert result.ranking[0] == result.incumbent
    assert not result.budget_spent
    # The seeds' best, then two moves (one numeric option each; a step without a move goes on
    # with the incumbent's changes not tried yet), until `max_sets` sets were compiled.
    assert result.notes[0].startswith(
        "step 0: 12 seeds; moved to --iree-opt-data-tiling --iree-llvmcpu-enable-ukernels=mmt4d ("
    )
    assert sum("moved to" in note for note in result.notes) == 3
    assert "moved to" not in result.notes[-1] and result.notes[-1].endswith("the incumbent")
    assert len(model.compiled - {frozenset()}) == SETTINGS.max_sets
    # Successive halving: most sets were timed in the cheap first rung only.
    deepest = {score.rung for score in result.scores.values()}
    assert deepest == {0, 1, 2}
    shallow = sum(score.rung == 0 for score in result.scores.values())
    assert shallow > len(result.scores) / 2


def test_the_search_stops_starting_measurements_once_the_budget_is_spent() -> None:
    unlimited = FakeModel()
    search_flag_space(unlimited, SEEDS, CPU_TUNED_OPTIONS, SETTINGS, Budget())
    model = FakeModel()
    deadline = unlimited.calls[len(unlimited.calls) // 2][0]
    result = search_flag_space(
        model, SEEDS, CPU_TUNED_OPTIONS, SETTINGS, Budget(deadline, lambda: model.clock_s)
    )
    assert result.budget_spent and result.notes[-1].startswith("time budget spent")
    assert [start for start, _, _ in model.calls if start >= deadline] == []
    assert 0 < len(model.calls) < len(unlimited.calls)


def test_a_set_that_does_not_compile_or_match_is_dropped() -> None:
    model = FakeModel(noise=0.0)

    def failing(flag_sets: Sequence[FlagSet], rounds: int) -> Mapping[FlagSet, float]:
        measured = model(flag_sets, rounds)
        # Data tiling "fails to compile": absent from every answer.
        return {s: t for s, t in measured.items() if DATA_TILING not in s.flags}

    result = search_flag_space(failing, SEEDS, CPU_TUNED_OPTIONS, SETTINGS, Budget())
    assert DATA_TILING not in result.incumbent.flags
    assert parse_configuration(result.incumbent) == {DISTRIBUTION: "32", THREADS: "2"}
    # No seed beat the default (all but three use data tiling): the search stepped on from it.
    assert result.notes[0].startswith("step 0: 12 seeds; best ")
    assert result.notes[0].endswith("the incumbent")
    assert result.notes[1].startswith("step 1: 24 single changes of default; moved to")


def test_a_step_proposes_ablations_first_and_honours_dependencies() -> None:
    incumbent = {DATA_TILING: "true", TILE_BYTES: "65536"}
    changes = [c for _, c in propose_single_changes(incumbent, CPU_TUNED_OPTIONS)]
    # Resetting data tiling resets the tile bytes that depend on it.
    assert changes[0] == {}
    assert changes[1] == {DATA_TILING: "true"}
    assert changes[2] == {DATA_TILING: "true", TILE_BYTES: "16384"}
    assert set_option({}, TILE_BYTES, "65536", CPU_TUNED_OPTIONS) == {
        TILE_BYTES: "65536", DATA_TILING: "true"
    }  # fmt: skip
    assert len({frozenset(spell_configuration(c, CPU_TUNED_OPTIONS).flags) for c in changes}) == (
        len(changes)
    )
    tiling_ops = "--iree-dispatch-creation-experimental-set-data-tiling-ops"
    spelled = spell_configuration(
        set_option({}, tiling_ops, "matmul,convolution", CPU_TUNED_OPTIONS), CPU_TUNED_OPTIONS
    )
    assert spelled.flags == (f"{tiling_ops}=matmul", f"{tiling_ops}=convolution", DATA_TILING)
    assert parse_configuration(spelled) == {tiling_ops: "matmul,convolution", DATA_TILING: "true"}


def test_the_search_compiles_at_most_max_sets_seeds_first() -> None:
    model = FakeModel()
    settings = StrategySettings(max_sets=15)
    result = search_flag_space(model, SEEDS, CPU_TUNED_OPTIONS, settings, Budget())
    assert len(model.compiled - {frozenset()}) == 15
    assert {frozenset(s.flags) for s in SEEDS} < model.compiled
    assert len(result.scores) == 16  # The 15 sets and the default, the incumbent at first.


def test_capped_steps_rotate_through_every_option() -> None:
    # A step takes at most 4 changes: over the steps, the least proposed go first, so options
    # declared last are reached too (an objective where every change helps a little).
    def everything_helps(flag_sets: Sequence[FlagSet], rounds: int) -> Mapping[FlagSet, float]:
        return {s: 0.97 ** len(parse_configuration(s)) for s in flag_sets}

    settings = StrategySettings(max_batch=4, max_steps=20, max_sets=200)
    result = search_flag_space(everything_helps, [], CPU_TUNED_OPTIONS, settings, Budget())
    tried_options = {name for s in result.scores for name in parse_configuration(s)}
    assert tried_options == {o.name for o in CPU_TUNED_OPTIONS}
