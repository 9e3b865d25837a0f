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


def earlier_binary(binary_hash: str, item_id: int, seen: dict[str, int]) -> int | None:
    """Return the id of the first item (candidate or flag trial) built to the same binary, 0 for
    the baseline, or None when this binary is new, remembering it as this item's in `seen`
    (hash -> id, which starts with the baseline's)."""
    first = seen.setdefault(binary_hash, item_id)
    return None if first == item_id else first
