"""How the flag phase searches a target's options: seeded greedy steps, each successively halved.

    seed     the sets known to be good (the target's fixed list) are measured first; the best
             of them that beats the default becomes the incumbent
    step     every single change of the incumbent: an option set to another of its values (a
             forward step, with what the option depends on) or back to its default (an
             ablation, which also resets what depended on it)
    halve    each batch is timed cheaply first (a few rounds); the best third of those faster
             than the incumbent is timed again with more rounds, and so on (successive
             halving); the incumbent is in every session, so each rung compares like with like
    move     to the best set of the deepest rung when it beats the incumbent there by
             `min_gain`; else the next step tries the incumbent's changes not tried yet (a
             step takes at most `max_batch`, the least proposed first); stop when none is
             left, after `max_steps` or `max_sets`, or when the budget is spent

The cost grows with the number of option values per step (each compiled once, most timed only
briefly), not with the number of their combinations. The strategy is pure: it sees the model
only through `Evaluate`, which compiles and times (`flags/model_search.py`), or a test's fake.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ireetune.core.flag_space import (
    DEFAULT_FLAGS,
    Configuration,
    FlagSet,
    TunedOption,
    parse_configuration,
    spell_configuration,
)


class Evaluate(Protocol):
    def __call__(self, flag_sets: Sequence[FlagSet], rounds: int) -> Mapping[FlagSet, float]:
        """Time the sets side by side with the default for `rounds` rounds; return each one's
        time relative to the default's (below 1 is faster; the default itself is 1). A set that
        does not compile, run or match the default's outputs is absent."""
        ...


@dataclass(frozen=True)
class StrategySettings:
    """How hard to search: rounds per rung, what survives a rung, when to move and stop."""

    rung_rounds: tuple[int, ...] = (2, 5, 10)
    # A rung keeps this share (rounded up) of the sets faster than the incumbent.
    keep_share: float = 1 / 3
    # A move must make the incumbent at least this much faster (its time over the set's).
    min_gain: float = 1.02
    max_steps: int = 8
    # At most this many sets per step (ablations first, then options in declaration order),
    # and in all (seeds included; each is compiled once).
    max_batch: int = 24
    max_sets: int = 48


@dataclass(frozen=True)
class Budget:
    """When to stop starting new measurements (`deadline` on `clock`; None: no limit)."""

    deadline: float | None = None
    clock: Callable[[], float] = time.monotonic

    def spent(self) -> bool:
        return self.deadline is not None and self.clock() >= self.deadline


@dataclass(frozen=True)
class Score:
    """A set's time relative to the default at the deepest rung it reached (0 is the first)."""

    relative: float
    rung: int


@dataclass(frozen=True)
class StrategyResult:
    """Every measured set with its score, best first, and what each step did."""

    ranking: tuple[FlagSet, ...]
    scores: Mapping[FlagSet, Score]
    incumbent: FlagSet
    notes: tuple[str, ...] = field(default_factory=tuple)
    budget_spent: bool = False


def search_flag_space(
    evaluate: Evaluate,
    seeds: Sequence[FlagSet],
    options: Sequence[TunedOption],
    settings: StrategySettings,
    budget: Budget,
) -> StrategyResult:
    """Search from the seeds by single option changes; return every measured set, best first."""
    scores: dict[FlagSet, Score] = {}
    tried: set[frozenset[str]] = {frozenset()}
    incumbent, notes = DEFAULT_FLAGS, []
    # How often each (option, value) change was in a batch: the least tried go first, so a
    # step capped at `max_batch` does not keep proposing the first options declared.
    proposed: dict[tuple[str, str], int] = {}
    batch = _new_sets(seeds, tried, settings.max_sets)
    for step in range(settings.max_steps + 1):
        if budget.spent() or (step > 0 and not batch):
            break
        tried.update(frozenset(flag_set.flags) for flag_set in batch)
        incumbent_scores = _halve(evaluate, batch, incumbent, settings, budget, scores)
        best = _best_of_batch(batch, scores)
        what = "seeds" if step == 0 else f"single changes of {incumbent.label}"
        gain = 0.0
        if best is not None and scores[best].rung in incumbent_scores:
            gain = incumbent_scores[scores[best].rung] / scores[best].relative
        if best is not None and gain >= settings.min_gain:
            notes.append(f"step {step}: {len(batch)} {what}; moved to {best.label} ({gain:.3f}x)")
            incumbent = best
        elif batch:
            found = "none measured" if best is None else f"best {best.label} {gain:.3f}x"
            notes.append(f"step {step}: {len(batch)} {what}; {found} the incumbent")
        # Without a move, the next step takes the incumbent's changes not tried yet (a step is
        # capped at `max_batch`); the search ends when none is left.
        batch = _next_batch(incumbent, options, tried, proposed, settings)
    spent = budget.spent()
    if spent:
        notes.append("time budget spent: the search stopped there")
    ranking = sorted(scores, key=lambda s: (s != incumbent, -scores[s].rung, scores[s].relative))
    return StrategyResult(tuple(ranking), scores, incumbent, tuple(notes), spent)


def propose_single_changes(
    configuration: Configuration, options: Sequence[TunedOption]
) -> Iterator[tuple[tuple[str, str], Configuration]]:
    """Yield every (option, value) change of the configuration and what it leads to: ablations
    (an option set here back to its default) first, then each other value of each option, in
    declaration order."""
    by_name = {option.name: option for option in options}
    ablations = [by_name[name] for name in configuration if name in by_name]
    for option in [*ablations, *[o for o in options if o not in ablations]]:
        current = configuration.get(option.name, option.default)
        for value in (option.default, *option.values):
            if value != current:
                yield (option.name, value), set_option(configuration, option.name, value, options)


def _next_batch(
    incumbent: FlagSet,
    options: Sequence[TunedOption],
    tried: set[frozenset[str]],
    proposed: dict[tuple[str, str], int],
    settings: StrategySettings,
) -> list[FlagSet]:
    """Return the next step's untried single changes of the incumbent, those proposed least
    often so far first (ablations first among equals); count the ones taken in `proposed`."""
    configuration = parse_configuration(incumbent)
    changes = sorted(
        propose_single_changes(configuration, options),
        key=lambda change: (proposed.get(change[0], 0), change[0][0] not in configuration),
    )
    spelled = [(change, spell_configuration(c, options)) for change, c in changes]
    left = settings.max_sets - (len(tried) - 1)
    batch = _new_sets([s for _, s in spelled], tried, min(settings.max_batch, left))
    taken = {frozenset(s.flags) for s in batch}
    for change, flag_set in spelled:
        if frozenset(flag_set.flags) in taken:
            proposed[change] = proposed.get(change, 0) + 1
    return batch


def set_option(
    configuration: Configuration, name: str, value: str, options: Sequence[TunedOption]
) -> Configuration:
    """Return the configuration with one option set (and what it depends on), then drop the
    options whose dependencies no longer hold."""
    by_name = {option.name: option for option in options}
    changed = dict(configuration)
    option = by_name.get(name)
    if option is not None and value == option.default:
        changed.pop(name, None)
    else:
        changed[name] = value
        for dependency, needed in option.depends_on if option is not None else ():
            changed = set_option(changed, dependency, needed, options)
    return _drop_unmet(changed, by_name)


def _drop_unmet(configuration: Configuration, by_name: Mapping[str, TunedOption]) -> Configuration:
    """Drop options whose dependencies do not hold (repeated: a drop can unmeet another)."""

    def holds(name: str, value: str) -> bool:
        default = by_name[name].default if name in by_name else None
        return configuration.get(name, default) == value

    while True:
        unmet = [
            name
            for name in configuration
            if name in by_name and not all(holds(*d) for d in by_name[name].depends_on)
        ]
        if not unmet:
            return configuration
        configuration = {n: v for n, v in configuration.items() if n not in unmet}


def _new_sets(
    candidates: Iterator[FlagSet] | Sequence[FlagSet], tried: set[frozenset[str]], limit: int
) -> list[FlagSet]:
    """Return up to `limit` of the candidates not tried before (in any flag order)."""
    fresh: dict[frozenset[str], FlagSet] = {}
    if limit < 1:
        return []
    for flag_set in candidates:
        key = frozenset(flag_set.flags)
        if key not in tried and key not in fresh:
            fresh[key] = flag_set
        if len(fresh) >= limit:
            break
    return list(fresh.values())


def _halve(
    evaluate: Evaluate,
    batch: Sequence[FlagSet],
    incumbent: FlagSet,
    settings: StrategySettings,
    budget: Budget,
    scores: dict[FlagSet, Score],
) -> dict[int, float]:
    """Time the batch rung by rung with the incumbent, keeping the best share of those faster
    than it; record each set's score in `scores`; return the incumbent's score at each rung."""
    survivors = list(batch)
    incumbent_scores: dict[int, float] = {}
    for rung, rounds in enumerate(settings.rung_rounds):
        if not survivors or budget.spent():
            break
        measured = evaluate([incumbent, *survivors], rounds)
        if incumbent not in measured:
            break
        incumbent_scores[rung] = measured[incumbent]
        if incumbent not in scores or scores[incumbent].rung <= rung:
            scores[incumbent] = Score(measured[incumbent], rung)
        for flag_set in survivors:
            if flag_set in measured:
                scores[flag_set] = Score(measured[flag_set], rung)
        faster = sorted(
            (s for s in survivors if s in measured and measured[s] < measured[incumbent]),
            key=lambda s: measured[s],
        )
        survivors = faster[: math.ceil(len(faster) * settings.keep_share)]
    return incumbent_scores


def _best_of_batch(batch: Sequence[FlagSet], scores: Mapping[FlagSet, Score]) -> FlagSet | None:
    """Return the batch's set with the best score at the deepest rung any of them reached."""
    measured = [s for s in batch if s in scores]
    if not measured:
        return None
    return min(measured, key=lambda s: (-scores[s].rung, scores[s].relative))
