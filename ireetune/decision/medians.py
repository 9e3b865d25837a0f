"""Medians of several variants timed side by side, and their ratios, with bootstrap intervals.

`stats.py` compares two variants (a default and a candidate); this module compares any number
(IREE's default, IREE tuned and ONNX Runtime, say), timed in rounds where every variant ran in
turn. The interval is the same two-level paired bootstrap: draw whole rounds with replacement
(the same rounds for every variant, since they were timed side by side), then the calls inside
each drawn round. The generator is seeded, so the same timings always give the same interval.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ireetune.decision.stats import BOOTSTRAP_RESAMPLES, Rounds, confidence_interval

# The seed of bench/vs_onnxruntime.py's figures before they moved here: the same timings keep
# giving the intervals recorded in docs/benchmarks.md.
MEDIANS_SEED = 20261125


@dataclass(frozen=True)
class Estimate:
    """A median (or a ratio of medians) with its bootstrap interval."""

    value: float
    low: float
    high: float

    def describe(self, unit: str) -> str:
        """Render as `12.34 ms [12.01, 12.80]` or `1.234x [1.101, 1.350]`."""
        if unit == "x":
            return f"{self.value:.3f}x [{self.low:.3f}, {self.high:.3f}]"
        return f"{self.value:.2f} {unit} [{self.low:.2f}, {self.high:.2f}]"


def bootstrap_medians(rounds_by_variant: Sequence[Rounds]) -> npt.NDArray[np.float64]:
    """Return resampled medians, one row per resample and one column per variant."""
    count = min(len(rounds) for rounds in rounds_by_variant)
    assert count >= 1
    generator = np.random.default_rng(MEDIANS_SEED)
    arrays = [[np.asarray(r, dtype=float) for r in rounds[:count]] for rounds in rounds_by_variant]
    medians = np.empty((BOOTSTRAP_RESAMPLES, len(arrays)))
    for index in range(BOOTSTRAP_RESAMPLES):
        chosen = generator.integers(0, count, size=count)
        for column, variant in enumerate(arrays):
            calls = np.concatenate(
                [generator.choice(variant[r], size=len(variant[r])) for r in chosen]
            )
            medians[index, column] = np.median(calls)
    return medians


def summarize(point: float, samples: npt.NDArray[np.float64]) -> Estimate:
    """Return the point estimate with the central CONFIDENCE interval of its samples."""
    low, high = confidence_interval(point, samples)
    return Estimate(point, low, high)


@dataclass(frozen=True)
class SideBySide:
    """Every variant's median and its ratio to a reference variant, with intervals."""

    medians: dict[str, Estimate]
    # Each other variant's median over the reference's (above 1: slower than the reference).
    ratios: dict[str, Estimate]
    # Each variant's median over its fastest call: how much its time varies.
    median_over_fastest: dict[str, float]


def compare_side_by_side(times: dict[str, Rounds], reference: str) -> SideBySide:
    """Summarize variants timed in the same rounds against `reference`, one of them."""
    names = list(times)
    assert reference in names, (reference, names)
    samples = bootstrap_medians([times[name] for name in names])
    # Each variant's median over every call of every round.
    medians = {name: statistics.median(t for calls in times[name] for t in calls) for name in names}
    column = names.index(reference)
    return SideBySide(
        medians={name: summarize(medians[name], samples[:, i]) for i, name in enumerate(names)},
        ratios={
            name: summarize(medians[name] / medians[reference], samples[:, i] / samples[:, column])
            for i, name in enumerate(names)
            if name != reference
        },
        median_over_fastest={
            name: medians[name] / min(t for calls in times[name] for t in calls) for name in names
        },
    )
