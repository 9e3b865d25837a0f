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

Rounds = tuple[tuple[float, ...], ...]

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20261123


class Basis(enum.Enum):
    """What a speedup was measured on."""

    DISPATCH = "dispatch"  # The dispatch benchmark (on the CPU: uninitialised buffers).
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


def estimate_speedup(
    baseline_rounds: Rounds,
    candidate_rounds: Rounds,
    basis: Basis,
    confidence: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
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
    generator = np.random.default_rng(BOOTSTRAP_SEED)
    ratios = np.empty(resamples)
    count = len(pairs)
    for index in range(resamples):
        chosen = generator.integers(0, count, size=count)
        baseline = np.concatenate(
            [generator.choice(pairs[r][0], size=len(pairs[r][0])) for r in chosen]
        )
        candidate = np.concatenate(
            [generator.choice(pairs[r][1], size=len(pairs[r][1])) for r in chosen]
        )
        ratios[index] = np.median(baseline) / np.median(candidate)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(ratios, [tail, 1.0 - tail])
    return SpeedupEstimate(
        speedup=speedup,
        low=float(min(low, speedup)),
        high=float(max(high, speedup)),
        rounds=count,
        basis=basis,
        baseline_ms=baseline_ms,
        candidate_ms=candidate_ms,
    )
