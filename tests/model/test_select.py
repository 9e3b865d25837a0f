"""The model-level rule for specs (`model/select.py`): the faster half of the calls decides, with
the median as a guard, on a real session whose long tail hid a gain from the median."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from ireetune.decision.rules import clears_threshold
from ireetune.decision.stats import Basis, Statistic, estimate_speedup, split_rounds
from ireetune.model.select import MODEL_RULE, is_faster, model_speedup
from ireetune.model.variants import decide_variants

SESSION = json.loads(
    (Path(__file__).parent / "data" / "squeezenet_confirm_session.json").read_text()
)
MEDIAN_RULE = replace(MODEL_RULE, statistic=Statistic.MEDIAN)


def test_a_gain_the_tail_hid_from_the_median_is_kept() -> None:
    """SqueezeNet's confirming session (100 rounds of 7 calls a side): every tuned dispatch's
    best candidate linked. The median rejected it; the faster halves show it clearly."""
    default, best = SESSION["default_ms"], SESSION["best_ms"]
    calls = SESSION["calls_per_round"]
    assert np.percentile(default, 90) > 1.5 * np.percentile(default, 10)  # the long tail
    rounds = split_rounds(default, calls), split_rounds(best, calls)
    by_median = estimate_speedup(*rounds, Basis.MODEL)
    assert by_median is not None and not clears_threshold(by_median, MEDIAN_RULE)
    variants = {
        "calls_per_round": calls,
        "contenders": ["best"],
        "confirm": {"default": {"times_ms": default}, "best": {"times_ms": best}},
    }
    decision, estimates = decide_variants(variants, ["best"], {"best": (True, "")})
    estimate = estimates["best"]
    assert decision.winner == 1 and estimate is not None
    assert estimate == estimate_speedup(*rounds, Basis.MODEL, Statistic.FASTER_HALF)
    assert estimate.statistic is Statistic.FASTER_HALF and estimate.typical_high is not None
    assert 1.05 < estimate.low < estimate.speedup < 1.12 and estimate.high - estimate.low < 0.1
    assert estimate.describe().endswith(", faster-half mean]")
    # Timed one call a round (the final check's way), the rule's statistic decides too.
    assert model_speedup(default, best) == estimate_speedup(
        split_rounds(default, 1), split_rounds(best, 1), Basis.MODEL, Statistic.FASTER_HALF
    )
    assert is_faster(default, best)


def test_a_set_fast_only_in_some_calls_is_refused_by_the_median_guard() -> None:
    """A candidate whose calls are fast a third of the time and slow otherwise: its faster half
    clears the threshold, its typical call is slower than the steady default's: refused."""
    rng = np.random.default_rng(0)
    fast = rng.permutation(np.arange(60) < 21)
    candidate = list(np.where(fast, 2.0, 4.0) * (1 + rng.normal(0, 0.01, 60)))
    default = list(3.3 * (1 + rng.normal(0, 0.01, 60)))
    estimate = model_speedup(default, candidate)
    assert estimate is not None and estimate.low > MODEL_RULE.threshold
    assert estimate.typical_high is not None and estimate.typical_high < 1.0
    assert not is_faster(default, candidate)
    assert clears_threshold(replace(estimate, typical_high=None), MODEL_RULE)


def test_the_rules_are_named_apart_and_the_median_is_unchanged() -> None:
    """A verdict stored under the median rule is not reused under this one; the median estimate is
    the one it always was (no second statistic drawn into it)."""
    assert (
        MODEL_RULE.name
        == "paired-bootstrap/0.95/above-1.01/dispatch/faster-half-mean/median-guard/v1"
    )
    assert MEDIAN_RULE.name == "paired-bootstrap/0.95/above-1.01/dispatch/v1"
    median = estimate_speedup(((4.0, 1.0, 2.0),), ((2.0, 1.0, 1.0),), Basis.MODEL)
    assert median is not None and median.speedup == 2.0 and median.typical_high is None
    half = estimate_speedup(
        ((4.0, 1.0, 2.0),), ((2.0, 1.0, 1.0),), Basis.MODEL, Statistic.FASTER_HALF
    )
    # The faster half of three calls is the two fastest: (1 + 2) / 2 against (1 + 1) / 2.
    assert half is not None and half.speedup == 1.5 and half.baseline_ms == 1.5
