"""bench/ordering_replay.py: replaying orderings on recorded spaces, what a benchmark costs and
when the goal is met."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from tests.conftest import REPOSITORY

sys.path.insert(0, str(REPOSITORY / "bench"))

from ordering_replay import (  # noqa: E402
    ReplaySpace,
    count_benchmarks,
    count_benchmarks_online,
)

# Rows: 0 fast-ish, 1 failed to compile, 2 the best, 3 duplicate of row 0's binary,
# 4 within 2% of the best, 5 runs the default's binary (config not applied).
SPACE = ReplaySpace(
    name="toy",
    times_ms=(2.0, None, 1.0, 2.0, 1.015, 3.0),
    binaries=("a", "", "b", "a", "c", "base"),
    baseline_binary="base",
)


def test_the_best_first_costs_one_benchmark() -> None:
    assert count_benchmarks(SPACE, [2, 0, 1, 3, 4, 5]) == 1


def test_failures_duplicates_and_the_default_binary_cost_no_benchmark() -> None:
    # Row 0 is measured (1), row 1 failed (free), row 3 repeats row 0's binary (free), row 5 is
    # the default's binary (free), row 4 is within 2% of the best (2).
    assert count_benchmarks(SPACE, [0, 1, 3, 5, 4, 2]) == 2


def test_tolerance_decides_which_candidates_count_as_near_best() -> None:
    assert count_benchmarks(SPACE, [0, 4, 2], tolerance=0.01) == 3
    assert count_benchmarks(SPACE, [0, 4, 2], tolerance=0.02) == 2


def test_an_order_that_never_reaches_the_goal_says_so() -> None:
    assert count_benchmarks(SPACE, [0, 1, 3, 5]) is None


def test_online_replay_reranks_with_every_result_so_far() -> None:
    seen: list[list[tuple[int, float | None]]] = []

    def rerank(tried: Sequence[tuple[int, float | None]], remaining: Sequence[int]) -> list[int]:
        seen.append(list(tried))
        # Try the slow rows first until something was measured, then the rest from the end.
        return sorted(remaining, reverse=bool(tried))

    # First batch: rows 0 (measured) and 1 (failed); second: 5 (the default, free), 4 (near best).
    assert count_benchmarks_online(SPACE, rerank, batch=2) == 2
    assert seen == [[], [(0, 2.0), (1, None)]]


def test_online_replay_with_batches_of_one_matches_a_fixed_order() -> None:
    order = [5, 3, 0, 1, 4, 2]

    def fixed(tried: Sequence[tuple[int, float | None]], remaining: Sequence[int]) -> list[int]:
        return [index for index in order if index in remaining]

    assert count_benchmarks_online(SPACE, fixed, batch=1) == count_benchmarks(SPACE, order) == 2
