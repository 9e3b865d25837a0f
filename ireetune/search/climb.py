"""The rounds of a dispatch run with a time budget: its candidates in parts, climbing from the
leader between them.

A run with `--time-budget` measures the candidates its strategy proposed in parts, about an
eighth each (flows/dispatch/budget.py starts them while the budget lasts). Before each part,
when the fastest candidate measured so far beats the default and was not climbed from yet, its
untried neighbours (`FamilySpace.near`, ordered around it by the space) go to the front of the
candidates waiting, and as many of the last waiting are dropped: the run tries no more
candidates than it would have. Searched only in the space's order, a neighbourhood of the
default stays next to the default: GoogLeNet's LRN window sum reached two channels a vector step
(1.54x alone) and never tried four (3.6x). A space that cannot draw around a leader leaves the
order as it was, and says why.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ireetune.core.candidate import Knobs

if TYPE_CHECKING:
    from ireetune.core.target import FamilySpace, SpaceRequest


class ClimbingParts:
    """The parts after the first, as a strategy's rounds (search/strategy.py `Rounds`): each
    `next_round` is the next part, its leader's neighbours first."""

    def __init__(
        self,
        space: FamilySpace,
        request: SpaceRequest,
        waiting: Sequence[tuple[Knobs, float | None]],
        part_size: int,
        given: Sequence[Knobs],
    ) -> None:
        self.space, self.request, self.part_size = space, request, part_size
        self.waiting = list(waiting)
        # Every configuration handed to the run (the default and the first part included).
        self.given = set(given)
        if request.default_knobs is not None:
            self.given.add(request.default_knobs)
        self.climbed: list[Knobs] = []
        self.measured: list[tuple[Knobs, float | None]] = []
        self.notes: list[str] = []

    @property
    def rounds_left(self) -> int:
        return math.ceil(len(self.waiting) / self.part_size)

    @property
    def untried(self) -> int:
        return len(self.waiting)

    def learn(self, measured: Sequence[tuple[Knobs, float | None]]) -> None:
        """Keep every measurement so far (time relative to the default) to climb from."""
        self.measured = list(measured)

    def next_round(self) -> list[tuple[Knobs, float | None]]:
        """Return the next part, after climbing from the leader when there is a new one."""
        self.notes = []
        self._climb()
        part, self.waiting = self.waiting[: self.part_size], self.waiting[self.part_size :]
        self.given.update(knobs for knobs, _ in part)
        return part

    def _climb(self) -> None:
        timed = [(time, knobs) for knobs, time in self.measured if time is not None]
        if not self.waiting or not timed:
            return
        time, leader = min(timed)
        if time >= 1.0 or leader in self.climbed:
            return
        self.climbed.append(leader)
        led = f"the fastest candidate after {len(timed)} ({1.0 / time:.3f}x) led"
        centred = replace(self.request, default_knobs=leader)
        try:
            near = self.space.near(centred, leader)
        except Exception as error:  # A space that cannot draw around a leader leaves the order.
            self.notes.append(
                f"{led}, but its neighbours could not be drawn "
                f"({type(error).__name__}: {' '.join(str(error).split())[:200]}): the order is kept"
            )
            return
        fresh = [knobs for knobs in near if knobs not in self.given]
        if not fresh:
            return
        ordered: list[tuple[Knobs, float | None]] = list(self.space.order(centred, fresh))
        moved = set(fresh)
        rest = [entry for entry in self.waiting if entry[0] not in moved]
        self.waiting = (ordered + rest)[: len(self.waiting)]
        going = min(len(ordered), len(self.waiting))
        if going == len(fresh) == 1:
            which = "its one untried neighbour goes"
        elif going == len(fresh):
            which = f"its {going} untried neighbours go"
        else:
            which = (
                f"{going} of its {len(fresh)} untried neighbours {'goes' if going == 1 else 'go'}"
            )
        self.notes.append(f"{led}: {which} next")
