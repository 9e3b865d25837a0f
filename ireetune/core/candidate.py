"""A configuration as a sorted tuple of knob values, hashable and printable."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence

Knobs = tuple[tuple[str, int | str], ...]


def make_knobs(values: Mapping[str, int | str]) -> Knobs:
    """Freeze a knob mapping into the canonical sorted tuple form."""
    return tuple(sorted(values.items()))


def format_knobs(knobs: Knobs | None) -> str:
    """Write knobs as `name=value` pairs separated by spaces (empty for the baseline)."""
    if knobs is None:
        return ""
    return " ".join(f"{name}={value}" for name, value in knobs)


def sort_by_score(
    pool: Sequence[Knobs], score: Callable[[Knobs], float], seed: int
) -> list[tuple[Knobs, float]]:
    """Sort a pool by descending score; ties are broken by a seeded hash of each configuration.

    The tie-break depends only on the seed and the configuration, never on the pool's order.
    """
    scored = [(knobs, score(knobs), random.Random(f"{seed}:{knobs}").random()) for knobs in pool]
    scored.sort(key=lambda item: (-item[1], item[2]))
    return [(knobs, value) for knobs, value, _ in scored]


def interleave(orders: list[list[tuple[Knobs, float]]]) -> list[tuple[Knobs, float]]:
    """Merge several orders by taking their heads in turn: [a1, b1, a2, b2, b3]."""
    merged: list[tuple[Knobs, float]] = []
    for position in range(max((len(order) for order in orders), default=0)):
        merged.extend(order[position] for order in orders if position < len(order))
    return merged


def order_in_turns(
    pool: list[Knobs],
    group_of: Callable[[Knobs], int | str],
    score: Callable[[Knobs], float],
    seed: int,
) -> list[tuple[Knobs, float]]:
    """Rank each group's candidates (a space's, a pipeline's) by score, then take the groups in
    turn: scores compare within a group, not across, so no group is left unmeasured by a budget
    its rival fills."""
    groups: dict[int | str, list[Knobs]] = {}
    for knobs in pool:
        groups.setdefault(group_of(knobs), []).append(knobs)
    return interleave([sort_by_score(group, score, seed) for _, group in sorted(groups.items())])


def earlier_binary(binary_hash: str, item_id: int, seen: dict[str, int]) -> int | None:
    """Return the id of the first item (candidate or flag trial) built to the same binary, 0 for
    the baseline, or None when this binary is new, remembering it as this item's in `seen`
    (hash -> id, which starts with the baseline's)."""
    first = seen.setdefault(binary_hash, item_id)
    return None if first == item_id else first
