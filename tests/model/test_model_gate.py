"""The gate before dispatch tuning: a problem whose share cannot clear the model rule is skipped."""

from __future__ import annotations

from pathlib import Path

import pytest

from ireetune.decision.thresholds import MODEL_THRESHOLD
from ireetune.model.gate import SMALL_SHARE_NOTE, best_possible_speedup, skip_small_dispatches
from ireetune.model.hot import DispatchProfile, select_hot_dispatches


def _profile(name: str, problem: str, ms: float, runs: int = 1) -> DispatchProfile:
    return DispatchProfile(name, Path(f"{name}.mlir"), problem, True, ms, runs)


def test_best_possible_speedup_is_the_model_without_the_part() -> None:
    assert [best_possible_speedup(s) for s in (0.0, 0.5, 0.75)] == [1.0, 2.0, 4.0]
    assert best_possible_speedup(1.0) == float("inf")


def test_the_gate_skips_a_dispatch_too_small_to_clear_the_rule_and_keeps_a_large_one() -> None:
    # Of 100 ms: 90 ms big, 0.9 ms small (at best 1/(1 - 0.009) = 1.0091x, below 1.01x).
    profiles = [_profile("big", "matmul_big", 90.0), _profile("small", "matmul_small", 0.9)]
    hot = select_hot_dispatches(profiles, model_ms=100.0, coverage=1.0, max_dispatches=8)
    assert [p.name for p in hot.selected] == ["big", "small"]
    gated, skipped = skip_small_dispatches(hot, MODEL_THRESHOLD)
    assert [p.name for p in gated.selected] == ["big"]
    assert skipped == {
        "small": f"{SMALL_SHARE_NOTE} (0.90%): even taking no time it would make the model at "
        "most 1.0091x faster, not above the rule's 1.01x"
    }
    assert gated.covered_ms == 90.0
    assert (gated.ranked, gated.model_ms) == (hot.ranked, hot.model_ms)


def test_the_gate_counts_every_dispatch_of_a_problem() -> None:
    # One spec configures every dispatch of a problem: three of 0.5 ms are 1.5% together.
    profiles = [
        _profile("big", "matmul_big", 90.0),
        *(_profile(f"part{i}", "matmul_part", 0.5) for i in range(3)),
    ]
    hot = select_hot_dispatches(profiles, model_ms=100.0, coverage=1.0, max_dispatches=8)
    gated, skipped = skip_small_dispatches(hot, MODEL_THRESHOLD)
    assert ([p.name for p in gated.selected], skipped) == (["big", "part0"], {})


@pytest.mark.parametrize("threshold", [1.0, 1.5])
def test_the_gate_follows_the_threshold(threshold: float) -> None:
    profiles = [_profile("big", "a", 60.0), _profile("mid", "b", 30.0)]
    hot = select_hot_dispatches(profiles, model_ms=100.0, coverage=1.0, max_dispatches=8)
    gated, _ = skip_small_dispatches(hot, threshold)
    # 30% of the model is worth at most 1.43x: enough for 1.0, not for 1.5.
    assert [p.name for p in gated.selected] == (["big", "mid"] if threshold == 1.0 else ["big"])


def test_the_gate_leaves_a_hot_set_without_time_alone() -> None:
    hot = select_hot_dispatches([_profile("d", "a", 0.0)], 0.0, 1.0, 8)
    assert skip_small_dispatches(hot, MODEL_THRESHOLD) == (hot, {})


def test_the_coverage_line_names_the_time_it_is_a_share_of() -> None:
    """Dispatches that explain less than the model takes cover a share of the model's measured
    time (MobileNet's report said "of dispatch time" for 18% of the model's); where the dispatch
    benchmarks add up to more, the share is of the dispatch total."""
    from ireetune.flows.model.report import describe_coverage

    profiles = [_profile("a", "conv_a", 2.0), _profile("b", "conv_b", 1.0, runs=2)]
    short = select_hot_dispatches(profiles, model_ms=10.0, coverage=0.9, max_dispatches=1)
    assert describe_coverage(short) == (
        "1 dispatch problem(s) selected, covering 20% of the model's measured time"
    )
    over = select_hot_dispatches(profiles, model_ms=2.0, coverage=0.9, max_dispatches=2)
    assert (
        describe_coverage(over) == "2 dispatch problem(s) selected, covering 100% of dispatch time"
    )
