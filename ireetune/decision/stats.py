"""Speedups with confidence intervals from timings taken side by side.

Timings come in rounds: in each round the default and the candidate were timed one after the
other, so a slow drift of the machine moves both alike. The interval is a two-level (paired
block) bootstrap: resample whole rounds with replacement, which keeps each round's default and
candidate together, then resample the repetitions inside each chosen round. The statistic is the
ratio of medians (default / candidate), so a speedup above 1 means the candidate is faster.
The generator is seeded, so the same timings always give the same interval.
"""

from __future__ import annotations

import enum
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Rounds = tuple[tuple[float, ...], ...]

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20261123
CONFIDENCE = 0.95


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

    def describe(self) -> str:
        """Render as `1.170x [1.121, 1.214]`."""
        return f"{self.speedup:.3f}x [{self.low:.3f}, {self.high:.3f}]"


def split_rounds(times_ms: Sequence[float], per_round: int) -> Rounds:
    """Cut a flat list of timings into rounds of `per_round` (a short last round is kept)."""
    assert per_round >= 1
    return tuple(
        tuple(times_ms[start : start + per_round]) for start in range(0, len(times_ms), per_round)
    )


# Resamples drawn at once by the vectorised bootstrap (bounds its memory: a chunk of 500 over 500
# rounds of 5 calls is 1.25 million timings a side).
BOOTSTRAP_CHUNK = 500


def _bootstrap_ratios(
    pairs: list[tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]],
    resamples: int,
    generator: np.random.Generator,
) -> npt.NDArray[np.float64]:
    """Return `resamples` bootstrap ratios of the baseline's median over the candidate's: the
    rounds drawn with replacement, then each chosen round's timings with replacement (the
    rounds are the pairing unit). Rounds all of one size are drawn as arrays, a chunk of
    resamples at a time (a session of 20 models x 47 rounds spent a minute in the loop below,
    1.2 s per variant); rounds of several sizes one resample at a time."""
    count = len(pairs)
    ratios = np.empty(resamples)
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
            ratios[start : start + drawn] = np.median(baseline, axis=1) / np.median(
                candidate, axis=1
            )
        return ratios
    for index in range(resamples):
        rounds = generator.integers(0, count, size=count)
        baseline = np.concatenate([generator.choice(pairs[r][0], len(pairs[r][0])) for r in rounds])
        candidate = np.concatenate(
            [generator.choice(pairs[r][1], len(pairs[r][1])) for r in rounds]
        )
        ratios[index] = np.median(baseline) / np.median(candidate)
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
) -> SpeedupEstimate | None:
    """Return the paired speedup and its interval, or None without a round in which both ran.

    Rounds are paired by position; a round where either side has no timing is left out.
    """
    pairs = [
        (np.asarray(b, dtype=float), np.asarray(c, dtype=float))
        for b, c in zip(baseline_rounds, candidate_rounds, strict=False)
        if b and c
    ]
    if not pairs:
        return None
    baseline_ms = statistics.median(float(t) for b, _ in pairs for t in b)
    candidate_ms = statistics.median(float(t) for _, c in pairs for t in c)
    speedup = baseline_ms / candidate_ms
    ratios = _bootstrap_ratios(pairs, BOOTSTRAP_RESAMPLES, np.random.default_rng(BOOTSTRAP_SEED))
    low, high = confidence_interval(speedup, ratios)
    return SpeedupEstimate(
        speedup=speedup,
        low=low,
        high=high,
        rounds=len(pairs),
        basis=basis,
        baseline_ms=baseline_ms,
        candidate_ms=candidate_ms,
    )
