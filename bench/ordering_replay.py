"""Replay an ordering on a recorded space: how many benchmarks until a near-best candidate?

The tuner benchmarks candidates in the order a strategy gives; a recorded space says how fast
each one is. Replaying the order counts the benchmarks spent before the first candidate within
`tolerance` of the best of the sample is measured. A candidate that failed to compile costs no
benchmark; one whose binary was already measured (a duplicate, or a config that did not apply and
so runs the default's binary) costs none either and tells nothing new.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ireetune.search.recorded import RecordedSpace

TOLERANCE = 0.02


@dataclass(frozen=True)
class ReplaySpace:
    """What a replay needs of a recorded space: each row's time and binary."""

    name: str
    times_ms: tuple[float | None, ...]
    binaries: tuple[str, ...]
    baseline_binary: str = ""

    @property
    def best_ms(self) -> float:
        measured = [t for t in self.times_ms if t is not None]
        assert measured, "a replayed space has a measured candidate"
        return min(measured)


def replay_space(space: RecordedSpace) -> ReplaySpace:
    """Reduce a recorded space to what a replay needs."""
    return ReplaySpace(
        space.name,
        tuple(space.effective_times()),
        tuple(row.binary for row in space.rows),
        space.baseline.binary if space.baseline is not None else "",
    )


def costs_benchmark(space: ReplaySpace, index: int, measured_binaries: set[str]) -> bool:
    """Say whether trying row `index` runs a benchmark, given the binaries already measured."""
    if space.times_ms[index] is None:
        return False
    binary = space.binaries[index]
    return not binary or (binary not in measured_binaries and binary != space.baseline_binary)


class _Replay:
    """Benchmarks spent so far in a replay, and whether the last one reached the goal."""

    def __init__(self, space: ReplaySpace, tolerance: float) -> None:
        self.space = space
        self.goal = space.best_ms * (1.0 + tolerance)
        self.measured_binaries: set[str] = set()
        self.spent = 0

    def try_row(self, index: int) -> bool:
        """Try row `index` (spending a benchmark if it costs one); say whether it is near-best."""
        if costs_benchmark(self.space, index, self.measured_binaries):
            self.spent += 1
            self.measured_binaries.add(self.space.binaries[index])
        time_ms = self.space.times_ms[index]
        return time_ms is not None and time_ms <= self.goal


def count_benchmarks(
    space: ReplaySpace, order: Sequence[int], tolerance: float = TOLERANCE
) -> int | None:
    """Return the benchmarks spent, following `order`, until a candidate within `tolerance` of
    the best is measured (that benchmark included); None if the order never reaches one."""
    replay = _Replay(space, tolerance)
    for index in order:
        if replay.try_row(index):
            return max(replay.spent, 1)
    return None


# A re-ranking step: from the (index, time) pairs tried so far and the indices left, return the
# indices left in the order to try them.
Reranker = Callable[[Sequence[tuple[int, float | None]], Sequence[int]], list[int]]


def count_benchmarks_online(
    space: ReplaySpace,
    rerank: Reranker,
    batch: int,
    tolerance: float = TOLERANCE,
) -> int | None:
    """Like `count_benchmarks`, but the order is decided batch by batch: `rerank` sees every
    result so far before the next `batch` candidates are chosen (as the tuner does between
    rounds of measurements)."""
    assert batch >= 1
    replay = _Replay(space, tolerance)
    remaining = list(range(len(space.times_ms)))
    tried: list[tuple[int, float | None]] = []
    while remaining:
        chosen = rerank(tried, remaining)[:batch]
        assert set(chosen) <= set(remaining) and chosen, "a re-ranking keeps to what is left"
        for index in chosen:
            if replay.try_row(index):
                return max(replay.spent, 1)
            tried.append((index, space.times_ms[index]))
        chosen_set = set(chosen)
        remaining = [index for index in remaining if index not in chosen_set]
    return None
