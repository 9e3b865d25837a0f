"""Summary statistics of repeated timings."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class TimingStats:
    """Median, extremes, relative spread ((max - min) / median) and robust relative noise.

    `noise` is the median absolute deviation scaled to a standard deviation (x1.4826) and divided
    by the median: unlike the spread, one disturbed repetition barely moves it.
    """

    median_ms: float
    min_ms: float
    max_ms: float
    spread: float
    count: int
    noise: float


def compute_stats(times_ms: Sequence[float]) -> TimingStats:
    """Summarise repeated timings; the median resists the odd slow repetition."""
    assert times_ms, "no timings to summarise"
    median = statistics.median(times_ms)
    low, high = min(times_ms), max(times_ms)
    deviation = statistics.median(abs(t - median) for t in times_ms)
    noise = 1.4826 * deviation / median if median > 0 else 0.0
    spread = (high - low) / median if median > 0 else 0.0
    return TimingStats(median, low, high, spread, len(times_ms), noise)
