"""Speedups with confidence intervals from timings taken side by side.

Timings come in rounds: in each round the default and the candidate were timed one after the
other, so a slow drift of the machine moves both alike. The interval is a two-level (paired
block) bootstrap: resample whole rounds with replacement, which keeps each round's default and
candidate together, then resample the repetitions inside each chosen round. The statistic is a
ratio (default / candidate), so a speedup above 1 means the candidate is faster: of the medians
by default. A comparison may ask for the mean of the faster half of the calls instead:
whole-model calls on a busy machine have a long tail (a call that loses a core to another process
runs 1.5-2x longer), and the median then moves with how often that happens, not with the code
(docs/benchmarks.md, 2026-12-02). Such an estimate also carries the medians' interval, so a rule
can refuse a candidate whose typical call the measurement says is slower (`typical_high`), or
rank by what the medians vouch for as well (`typical_low`).
The generator is seeded, so the same timings always give the same interval.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

Rounds = tuple[tuple[float, ...], ...]

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20261123
CONFIDENCE = 0.95


class Statistic(enum.Enum):
    """What a speedup compares of the two sides' timings."""

    MEDIAN = "median"
    FASTER_HALF = "faster-half mean"  # The mean of the faster half of the calls.


class Basis(enum.Enum):
    """What a speedup was measured on."""

    DISPATCH = "dispatch"  # The dispatch benchmark (synthetic data: zeros or garbage).
    REAL_INPUT = "real-input"  # The root op as a program of its own, on random real inputs.
    MODEL = "model"  # The whole model on its inputs.


@dataclass(frozen=True)
class SpeedupEstimate:
    """A speedup (default time / candidate time) with its confidence interval."""

    speedup: float
    low: float
    high: float
    rounds: int
    basis: Basis
    baseline_ms: float
    candidate_ms: float
    # What the speedup compares; for another statistic than the median, the bounds of the
    # medians' ratio's interval (the typical call's speedup at its best and at its worst).
    statistic: Statistic = Statistic.MEDIAN
    typical_high: float | None = None
    typical_low: float | None = None

    def describe(self) -> str:
        """Render as `1.170x [1.121, 1.214]` (with `, faster-half mean` for that statistic)."""
        figure = f"{self.speedup:.3f}x [{self.low:.3f}, {self.high:.3f}]"
        if self.statistic is Statistic.MEDIAN:
            return figure
        return f"{figure[:-1]}, {self.statistic.value}]"


def split_rounds(times_ms: Sequence[float], per_round: int) -> Rounds:
    """Cut a flat list of timings into rounds of `per_round` (a short last round is kept)."""
    assert per_round >= 1
    return tuple(
        tuple(times_ms[start : start + per_round]) for start in range(0, len(times_ms), per_round)
    )


# Resamples drawn at once by the vectorised bootstrap (bounds its memory: a chunk of 500 over 500
# rounds of 5 calls is 1.25 million timings a side).
BOOTSTRAP_CHUNK = 500


def _statistic(times: npt.NDArray[np.float64], statistic: Statistic, axis: int = -1) -> Any:
    """Return the timings' `statistic` along `axis`."""
    if statistic is Statistic.MEDIAN:
        return np.median(times, axis=axis)
    ordered = np.sort(times, axis=axis)
    faster = ordered.take(np.arange((ordered.shape[axis] + 1) // 2), axis=axis)
    return faster.mean(axis=axis)


def _bootstrap_ratios(
    pairs: list[tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]],
    resamples: int,
    generator: np.random.Generator,
    statistics: tuple[Statistic, ...] = (Statistic.MEDIAN,),
) -> npt.NDArray[np.float64]:
    """Return `resamples` bootstrap ratios of the baseline's `statistics` over the candidate's,
    one column a statistic: the rounds drawn with replacement, then each chosen round's timings
    with replacement (the rounds are the pairing unit). Rounds all of one size are drawn as arrays, a chunk of
    resamples at a time (a session of 20 models x 47 rounds spent a minute in the loop below,
    1.2 s per variant); rounds of several sizes one resample at a time."""
    count = len(pairs)
    ratios = np.empty((resamples, len(statistics)))
    sizes = {(len(baseline), len(candidate)) for baseline, candidate in pairs}
    if len(sizes) == 1:
        ((baseline_calls, candidate_calls),) = sizes
        baselines = np.stack([baseline for baseline, _ in pairs])
        candidates = np.stack([candidate for _, candidate in pairs])
        for start in range(0, resamples, BOOTSTRAP_CHUNK):
            drawn = min(BOOTSTRAP_CHUNK, resamples - start)
            chosen = generator.integers(0, count, size=(drawn, count, 1))
            within_baseline = generator.integers(0, baseline_calls, (drawn, count, baseline_calls))
            within_candidate = generator.integers(
                0, candidate_calls, (drawn, count, candidate_calls)
            )
            baseline = baselines[chosen, within_baseline].reshape(drawn, -1)
            candidate = candidates[chosen, within_candidate].reshape(drawn, -1)
            for column, statistic in enumerate(statistics):
                ratios[start : start + drawn, column] = _statistic(
                    baseline, statistic, axis=1
                ) / _statistic(candidate, statistic, axis=1)
        return ratios
    for index in range(resamples):
        rounds = generator.integers(0, count, size=count)
        baseline = np.concatenate([generator.choice(pairs[r][0], len(pairs[r][0])) for r in rounds])
        candidate = np.concatenate(
            [generator.choice(pairs[r][1], len(pairs[r][1])) for r in rounds]
        )
        ratios[index] = [_statistic(baseline, s) / _statistic(candidate, s) for s in statistics]
    return ratios


def confidence_interval(point: float, samples: npt.NDArray[np.float64]) -> tuple[float, float]:
    """Return the central CONFIDENCE interval of bootstrap samples, widened to hold `point`."""
    tail = (1.0 - CONFIDENCE) / 2.0
    low, high = np.quantile(samples, [tail, 1.0 - tail])
    return float(min(low, point)), float(max(high, point))


def estimate_speedup(
    baseline_rounds: Rounds,
    candidate_rounds: Rounds,
    basis: Basis,
    statistic: Statistic = Statistic.MEDIAN,
) -> SpeedupEstimate | None:
    """Return the paired speedup and its interval, or None without a round in which both ran.

    Rounds are paired by position; a round where either side has no timing is left out. The
    speedup compares the timings' `statistic`; for another than the median, the estimate also
    carries the bounds of the medians' ratio's interval (`typical_low`, `typical_high`).
    """
    pairs = [
        (np.asarray(b, dtype=float), np.asarray(c, dtype=float))
        for b, c in zip(baseline_rounds, candidate_rounds, strict=False)
        if b and c
    ]
    if not pairs:
        return None
    kinds = (statistic,) if statistic is Statistic.MEDIAN else (statistic, Statistic.MEDIAN)
    baseline_all = np.concatenate([b for b, _ in pairs])
    candidate_all = np.concatenate([c for _, c in pairs])
    baseline_ms = float(_statistic(baseline_all, statistic))
    candidate_ms = float(_statistic(candidate_all, statistic))
    speedup = baseline_ms / candidate_ms
    ratios = _bootstrap_ratios(
        pairs, BOOTSTRAP_RESAMPLES, np.random.default_rng(BOOTSTRAP_SEED), kinds
    )
    low, high = confidence_interval(speedup, ratios[:, 0])
    typical_low = typical_high = None
    if statistic is not Statistic.MEDIAN:
        median = Statistic.MEDIAN
        typical = float(_statistic(baseline_all, median) / _statistic(candidate_all, median))
        typical_low, typical_high = confidence_interval(typical, ratios[:, 1])
    return SpeedupEstimate(
        speedup=speedup,
        low=low,
        high=high,
        rounds=len(pairs),
        basis=basis,
        baseline_ms=baseline_ms,
        candidate_ms=candidate_ms,
        statistic=statistic,
        typical_high=typical_high,
        typical_low=typical_low,
    )
