"""The search-strategy role: which candidates of a sampled pool are compiled, and in what order.

A strategy is a function, `propose(search, pool) -> Proposal`: it gets the pool the space drew
and what it was drawn for (`SearchInput`), and returns the first candidates to compile, how they
were chosen, and, for a strategy that learns from measurements, the `Rounds` that pick the rest
of the budget as measurements arrive (`learn`, then `next_round`). A run with a time budget
that has no such rounds measures in parts, which are rounds too (search/climb.py: they climb
from the fastest candidate so far). Each strategy is one module of
search/strategies/, found there by name; `--order` takes those names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ireetune.core.candidate import Knobs

if TYPE_CHECKING:
    from ireetune.core.target import FamilySpace, SpaceRequest, Target
    from ireetune.database.store import TuningDatabase


@dataclass(frozen=True)
class SearchInput:
    """What a strategy chooses for: the target and the space that drew the pool, the request it
    was drawn for, the tuning database (None: none), the budget of candidates, and whether
    measurements may come in rounds (`--online`, in a run that measures)."""

    target: Target
    space: FamilySpace
    request: SpaceRequest
    database: TuningDatabase | None
    num_candidates: int
    online: bool


class Rounds(Protocol):
    """The later rounds of a strategy that learns from measurements, or of a run with a time
    budget (its parts, search/climb.py); `notes` says, a line each, what the last
    `next_round` did beyond taking the best of what remains."""

    notes: list[str]

    @property
    def rounds_left(self) -> int:
        """Say how many rounds are still to be picked."""
        ...

    @property
    def untried(self) -> int:
        """Say how many candidates the rounds still to be picked hold."""
        ...

    def learn(self, measured: Sequence[tuple[Knobs, float | None]]) -> None:
        """Learn from every measurement so far: its time over its round's default (1.0 for a
        config that did not apply), or None for a failure (flows/dispatch/recording.py)."""

    def next_round(self) -> list[tuple[Knobs, float | None]]:
        """Return the next round's candidates, best first, each with its score (None: none)."""
        ...


@dataclass(frozen=True)
class Proposal:
    """A strategy's answer: the candidates to compile first (each with its score, None when the
    strategy has none), how they were chosen (results.json's `ordering`), and the rounds to come
    (None: the candidates are the whole budget)."""

    candidates: list[tuple[Knobs, float | None]]
    ordering: str
    rounds: Rounds | None = None


Strategy = Callable[[SearchInput, list[Knobs]], Proposal]
