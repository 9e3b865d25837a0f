"""Model-level decisions: keep a spec only if the model gets faster with it.

Both questions go through the decision stage (ireetune/decision): a paired interval over the
rounds in which two models were timed side by side, accepted only above the rule's threshold.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ireetune.decision.rules import DecisionRule, clears_threshold
from ireetune.decision.stats import (
    Basis,
    SpeedupEstimate,
    Statistic,
    estimate_speedup,
    split_rounds,
)
from ireetune.decision.thresholds import MODEL_THRESHOLD
from ireetune.model.timing import ModelComparison, ModelRun

if TYPE_CHECKING:
    from ireetune.executor.base import Executor

# What a spec's whole-model calls are judged by. A spec changes kernels, not how the model's
# calls wait for a core, yet on a busy machine the median call of a small model moves with that
# wait: SqueezeNet's calls ran p10 3.03, median 3.36, p90 7.27 ms, and the median rule rejected
# a spec set at 1.097x [1.001, 1.158] that the same session's faster halves put at 1.081x
# [1.055, 1.109] (docs/benchmarks.md, 2026-12-02). The faster half's mean keeps half the calls
# and leaves out the tail; the rule's median guard refuses a set whose typical call is shown
# slower. Flag sets, which can change how the calls wait (threads), are still judged by the
# median (flags/trials.py, flows/model/flag_finalists.py).
# A spec must make the whole model at least this much faster (the interval's lower bound).
MODEL_RULE = DecisionRule(threshold=MODEL_THRESHOLD, statistic=Statistic.FASTER_HALF)


def model_speedup(
    current: Sequence[float], candidate: Sequence[float], rule: DecisionRule = MODEL_RULE
) -> SpeedupEstimate | None:
    """Return the paired speedup of `candidate` over `current` by the rule's statistic, timed one
    call per round."""
    if not current or not candidate:
        return None
    return estimate_speedup(
        split_rounds(current, 1), split_rounds(candidate, 1), Basis.MODEL, rule.statistic
    )


def is_faster(
    current: Sequence[float], candidate: Sequence[float], rule: DecisionRule = MODEL_RULE
) -> bool:
    """Say whether `candidate` beats `current`: the whole interval lies above the threshold."""
    return clears_threshold(model_speedup(current, candidate, rule), rule)


def is_undecided(estimate: SpeedupEstimate | None, rule: DecisionRule = MODEL_RULE) -> bool:
    """Say whether more rounds could turn a comparison into a win: its point estimate clears the
    rule's threshold, its interval does not yet."""
    return (
        estimate is not None
        and estimate.speedup > rule.threshold
        and not clears_threshold(estimate, rule)
    )


def find_harmful(
    kept: Sequence[str],
    better_without: Callable[[Sequence[str], Sequence[str]], bool],
    may_try: Callable[[], bool] = lambda: True,
) -> list[str]:
    """Drop, one at a time, the specs whose removal makes the model faster.

    `better_without(current, trial)` compiles and times the model with `trial` (the current set
    less one spec; empty means the default model) side by side with `current` and says whether
    the trial is faster. Each removal that helps is made permanent before the next spec is
    tried, so interactions between specs are respected, and every subset kept was measured.
    The search stops, keeping the specs not tried yet, when `may_try()` says no (the time
    budget has no room for another trial).
    """
    current = list(kept)
    dropped: list[str] = []
    for name in list(current):
        if not may_try():
            break
        trial = [n for n in current if n != name]
        if better_without(current, trial):
            current = trial
            dropped.append(name)
    return dropped


# Batches of rounds a comparison may add while it is undecided (`is_undecided`): on this
# project's loaded 2-core machine, 5 rounds of a real-weights ResNet-50 gave intervals 20-60%
# wide (docs/benchmarks.md), wider than the gain of most single dispatches.
MAX_EXTRA_BATCHES = 2
# The batches it may add in all when the time budget has room for each (`until`): a run that
# would end with time left spends it narrowing the interval that decides (SqueezeNet's final
# check stopped undecided at 1.052x [0.997, 1.107] after two batches; docs/benchmarks.md).
# Every further look at an undecided comparison is one more chance for noise to clear the
# rule, so the batches stay few.
MAX_EXTRA_BATCHES_IN_TIME = 6


def time_pair_until_decided(
    executor: Executor, pair: ModelComparison, until: float | None = None
) -> dict[str, ModelRun]:
    """Time two models (`pair.models`, the second the one tried) side by side on `executor` for
    `pair.rounds` rounds, then, while the second looks faster but its interval does not yet
    clear the model rule, for up to `MAX_EXTRA_BATCHES` more batches of rounds, and up to
    `MAX_EXTRA_BATCHES_IN_TIME` while each further batch, as long as the batches so far took,
    ends by `until` (on `time.monotonic()`; None: no more than `MAX_EXTRA_BATCHES`); return each
    model's run with every round it was timed in."""
    first, second = pair.models
    labels = (first[0], second[0])
    started = time.monotonic()
    runs = executor.run_models_side_by_side(pair)
    for extra in range(MAX_EXTRA_BATCHES_IN_TIME):
        if extra >= MAX_EXTRA_BATCHES:
            now = time.monotonic()
            batch_s = (now - started) / (1 + extra)
            if until is None or now + batch_s > until:
                break
        if not all(runs[label].ok for label in labels):
            break
        estimate = model_speedup(runs[labels[0]].times_ms, runs[labels[1]].times_ms)
        if not is_undecided(estimate, MODEL_RULE):
            break
        more = executor.run_models_side_by_side(pair)
        if not all(more[label].ok for label in labels):
            break
        runs = {
            label: replace(runs[label], times_ms=runs[label].times_ms + more[label].times_ms)
            for label in labels
        }
    return runs
