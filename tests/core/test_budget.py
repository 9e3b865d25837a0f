"""The task scheduler's dispatch-phase policy (core/budget.py), on a fake clock."""

from __future__ import annotations

import math

import pytest

from ireetune.core.budget import (
    DISTRIBUTION_ONLY_PRIOR,
    PRIOR_GAIN,
    SHARES,
    DispatchScheduler,
    DispatchTask,
    TaskScheduler,
    needed_dispatch_speedup,
)


def test_every_dispatch_is_tuned_before_the_phase_ends_each_by_its_expected_gain() -> None:
    # Six hot dispatches, the first far the largest: tuned one after another, each using all of
    # its slot, they all start before the phase's end, and the slots follow the shares.
    tasks = [
        DispatchTask(f"d{i}", "conv", share)
        for i, share in enumerate([0.4, 0.1, 0.1, 0.05, 0.05, 0.02])
    ]
    now, scheduler = 0.0, DispatchScheduler(ends_at=100.0)
    pending, slots = list(tasks), {}
    while pending:
        task = scheduler.next_task(pending)
        slot = scheduler.slot_s(task, pending, now)
        assert slot is not None
        slots[task.name] = slot
        now += slot
        scheduler.learn(task, 1.1)
        pending.remove(task)
    assert math.isclose(now, 100.0)
    assert list(slots) == ["d0", "d1", "d2", "d3", "d4", "d5"]
    assert slots["d0"] == pytest.approx(100.0 * 0.4 / 0.72)
    assert slots["d1"] == pytest.approx(slots["d2"])
    assert slots["d5"] < slots["d3"] < slots["d1"] < slots["d0"]


def test_a_task_s_own_prior_counts_until_its_family_is_measured() -> None:
    # A data-tiled matmul's space searches only how its work is split: a smaller prior, so a
    # window sum of a smaller share goes first; once its family is measured, that counts.
    scheduler = DispatchScheduler(ends_at=None)
    mmt4d = DispatchTask("mm", "mmt4d", 0.12, DISTRIBUTION_ONLY_PRIOR)
    window = DispatchTask("lrn", "conv", 0.109)
    assert scheduler.expected_gain(mmt4d) == pytest.approx(0.12 * DISTRIBUTION_ONLY_PRIOR)
    assert scheduler.next_task([mmt4d, window]) is window
    scheduler.learn(DispatchTask("mm0", "mmt4d", 0.1), 2.0)
    assert scheduler.expected_gain(mmt4d) == pytest.approx(0.12 * (0.02 + 0.5) / 2)
    assert scheduler.next_task([mmt4d, window]) is mmt4d


def test_a_family_that_gained_nothing_gives_way_to_one_not_tried_yet() -> None:
    scheduler = DispatchScheduler(ends_at=None)
    pool, conv, matmul = (
        DispatchTask("pool0", "pool", 0.2),
        DispatchTask("conv1", "conv", 0.2),
        DispatchTask("mm", "mmt4d", 0.2),
    )
    assert scheduler.next_task([conv, mm := matmul]) is conv  # Equals: the profile's order.
    assert scheduler.learn(DispatchTask("conv0", "conv", 0.3), 1.0) == 0.0
    assert scheduler.expected_gain(conv) == pytest.approx(0.2 * PRIOR_GAIN / 2)
    assert scheduler.next_task([conv, mm]) is mm
    # A family that gained much goes first; an untried one keeps the prior.
    assert scheduler.learn(pool, 2.0) == pytest.approx(0.1)
    assert scheduler.next_task([conv, mm, DispatchTask("pool1", "pool", 0.2)]).name == "pool1"
    assert scheduler.expected_gain(mm) == pytest.approx(0.2 * PRIOR_GAIN)
    # No budget, no slot.
    assert scheduler.slot_s(conv, [conv], now=5.0) is None


def test_a_session_faster_than_the_profile_counts_only_what_its_default_loses() -> None:
    # inception_v2's im2col gather: profiled at 0.871 ms a launch, 0.1445 ms in its own session,
    # where a candidate ran 2.078x faster; the model saved what the session's default loses.
    scheduler = DispatchScheduler(ends_at=None)
    pool = DispatchTask("pool0", "pool", 0.08)
    cut = 1.0 - 1.0 / 2.078
    assert scheduler.learn(pool, 2.078, 0.1445 / 0.871) == pytest.approx(0.08 * cut * 0.1659, 1e-3)
    # Its family learns the smaller cut, with the prior counted once beside it.
    next_pool = DispatchTask("pool1", "pool", 0.08)
    expected = 0.08 * (PRIOR_GAIN + cut * 0.1445 / 0.871) / 2
    assert scheduler.expected_gain(next_pool) == pytest.approx(expected)
    # A session slower than the profile, or none (NaN), leaves the share's cut.
    assert scheduler.learn(DispatchTask("mm", "mmt4d", 0.1), 1.25, 1.6) == pytest.approx(0.02)
    assert scheduler.learn(DispatchTask("mm1", "mmt4d", 0.1), 1.25, math.nan) == pytest.approx(0.02)


def test_a_slot_is_never_under_the_least_nor_over_what_is_left() -> None:
    scheduler = DispatchScheduler(ends_at=10.0, least_s=2.0)
    big, tiny = DispatchTask("big", "conv", 0.9), DispatchTask("tiny", "conv", 0.001)
    assert scheduler.slot_s(tiny, [big, tiny], now=0.0) == 2.0
    assert scheduler.slot_s(big, [big, tiny], now=9.0) == pytest.approx(1.0)
    assert scheduler.slot_s(big, [big], now=12.0) == 0.0


def test_the_dispatch_speedup_a_model_rule_needs_grows_as_the_share_shrinks() -> None:
    assert needed_dispatch_speedup(1.0, 1.01) == pytest.approx(1.01)
    assert needed_dispatch_speedup(0.2, 1.01) == pytest.approx(1 / (1 - (1 - 1 / 1.01) / 0.2))
    assert needed_dispatch_speedup(0.005, 1.01) == math.inf


def test_the_dispatch_phase_leaves_the_selection_what_it_needs() -> None:
    scheduler = TaskScheduler(budget_s=600.0, started=100.0)
    # 300 s left: the share alone would stop at 180 s; a selection needing 200 s moves it to 100.
    assert scheduler.dispatch_phase_deadline(400.0) == 400.0 + SHARES.dispatch_phase * 300.0
    assert scheduler.dispatch_phase_deadline(400.0, reserve_s=200.0) == 500.0
    assert scheduler.dispatch_phase_deadline(400.0, reserve_s=400.0) == 400.0


def test_more_rounds_stop_at_the_tail_and_the_harm_search_at_the_slack() -> None:
    scheduler = TaskScheduler(budget_s=600.0, started=0.0)
    tail_s = 4 * 2.0 + SHARES.tail_slack_s
    assert scheduler.tail_seconds(load_s=2.0) == tail_s
    assert scheduler.extension_deadline(500.0, load_s=2.0) == 600.0 - tail_s
    assert scheduler.decide_deadline(500.0) == 600.0 - SHARES.tail_slack_s
    assert TaskScheduler(budget_s=None, started=0.0).extension_deadline(500.0, 2.0) is None
