"""Model-level decisions: keep a spec only if the model gets faster with it."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence


def relative_noise(samples: Sequence[float]) -> float:
    """Return the median absolute deviation, as a standard deviation, relative to the median."""
    median = statistics.median(samples)
    deviation = statistics.median(abs(s - median) for s in samples)
    return 1.4826 * deviation / median if median > 0 else 0.0


def is_faster(
    current: Sequence[float], candidate: Sequence[float], threshold: float = 0.01
) -> bool:
    """Say whether `candidate` beats `current` by more than the threshold and both noises."""
    if not current or not candidate:
        return False
    margin = max(threshold, relative_noise(current), relative_noise(candidate))
    return statistics.median(candidate) < statistics.median(current) * (1.0 - margin)


def find_harmful(
    kept: Sequence[str], measure_without: Callable[[Sequence[str]], bool]
) -> list[str]:
    """Drop, one at a time, the specs whose removal makes the model faster.

    `measure_without(subset)` compiles and times the model with `subset` and says whether it is
    faster than with the current set. Each removal that helps is made permanent before the next
    spec is tried, so interactions between specs are respected.
    """
    current = list(kept)
    dropped: list[str] = []
    for name in list(current):
        trial = [n for n in current if n != name]
        if measure_without(trial):
            current = trial
            dropped.append(name)
    return dropped
