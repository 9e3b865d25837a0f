"""`tune-dispatch --time-budget`: the run starts no part of its candidates that could not end in
time and closes with what it measured; a continued run keeps what is left of its budget.

The budget's clock is replaced by one that moves a fixed step each time it is read, so that
when a part may start does not hang on this machine's load.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ireetune
from ireetune.core.budget import TaskScheduler
from ireetune.core.errors import IreetuneError
from ireetune.flows.dispatch import budget
from ireetune.flows.dispatch.resume import _remaining_stages, resume_dispatch
from ireetune.report.html_report import write_html_report
from ireetune.report.result import TuneResult
from tests.conftest import FAST_RUN_OPTIONS, TEST_TARGET


class SteppingClock:
    """A clock that moves `step` seconds each time it is read."""

    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        now = self.now
        self.now += self.step
        return now


def _tune(benchmark: Path, output_dir: Path, budget_s: float | None) -> TuneResult:
    # Six candidates on two workers: with a budget, three parts of two.
    return ireetune.tune_dispatch(
        benchmark, target=TEST_TARGET, num_candidates=6, jobs=2, output_dir=output_dir,
        use_database=False, show_progress=False, time_budget_s=budget_s, **FAST_RUN_OPTIONS,
    )  # fmt: skip


def test_a_part_starts_only_when_it_and_the_closing_stages_end_in_time() -> None:
    scheduler = TaskScheduler(100.0, started=0.0)
    # 40 s left at 60 s; 2 candidates and 9 of closing at 4 s each need 44 s; at 3 s, 33 s.
    assert [scheduler.starts_part(60.0, s, 2, 9) for s in (4.0, 3.0)] == [False, True]
    assert TaskScheduler(None, started=0.0).starts_part(1e9, 1e9, 2, 9)


def test_the_budget_ends_the_run_and_a_continued_run_keeps_what_is_left(
    matmul_benchmark: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 40 s a reading of the clock against 100 s: the first part starts, no later one can end.
    monkeypatch.setattr(budget, "clock", SteppingClock(40.0))
    result = _tune(matmul_benchmark, tmp_path / "runs", 100.0)

    ended = (
        "the time budget (100 s) ended the run: it started no part that could not end in time "
        "(2 candidates tried; 4 were not tried)"
    )
    assert [record.candidate_id for record in result.records] == [0, 1, 2]
    assert ended in result.notes
    assert ended in (result.run_dir / "summary.txt").read_text()
    assert ended in write_html_report(result.run_dir).read_text()
    saved = json.loads((result.run_dir / "results.json").read_text())
    assert saved["outcome"] in ("improved", "no-improvement")
    assert {k: v for k, v in saved["time_budget"].items() if k != "spent_s"} == {
        "budget_s": 100.0, "ended_run": True, "tried": 2,
    }  # fmt: skip

    # Killed after measuring, 70 s into its budget: the continued run has 30 s left.
    saved.update(progress={"done": ["specs", "compile", "measure"]}, outcome="running")
    saved["time_budget"]["spent_s"] = 70.0
    (result.run_dir / "results.json").write_text(json.dumps(saved))
    monkeypatch.setattr(budget, "clock", SteppingClock(0.0))
    continued = resume_dispatch(result.run_dir)
    assert (
        "continued with 30 s of its 100 s time budget left (the time between the kill and the "
        "continue not counted)"
    ) in continued.notes
    after = json.loads((result.run_dir / "results.json").read_text())
    assert after["outcome"] in ("improved", "no-improvement")
    assert after["time_budget"]["spent_s"] == 70.0


def test_a_budget_with_room_tries_the_candidates_of_a_run_without_one(
    matmul_benchmark: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(budget, "clock", SteppingClock(0.001))
    budgeted = _tune(matmul_benchmark, tmp_path / "budgeted", 10_000.0)
    unlimited = _tune(matmul_benchmark, tmp_path / "unlimited", None)

    # As many, the first part the same; the later parts differ only where a leader's neighbours
    # were moved first (`budget.climb`, which says so).
    tried, without = [r.knobs for r in budgeted.records], [r.knobs for r in unlimited.records]
    assert tried[:3] == without[:3]
    climbed = [note for note in budgeted.notes if "untried neighbours go next" in note]
    assert tried == without or climbed
    assert len(budgeted.records) == 7
    saved = json.loads((budgeted.run_dir / "results.json").read_text())
    assert (saved["time_budget"]["ended_run"], saved["time_budget"]["tried"]) == (False, 6)
    assert "time_budget" not in json.loads((unlimited.run_dir / "results.json").read_text())
    assert not [note for note in budgeted.notes if "time budget" in note]


def test_a_run_killed_in_its_parts_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(IreetuneError) as refused:
        _remaining_stages(tmp_path, {"stage": "next_part", "outcome": "running", "time_budget": {}})
    assert str(refused.value) == (
        f"{tmp_path} was stopped in its time budget's parts, whose waiting candidates are not "
        "saved: run the same tune-dispatch command again (the database restores what was measured)"
    )


def test_a_leader_s_untried_neighbours_are_moved_to_the_front_of_the_waiting_parts(
    matmul_benchmark: Path, tmp_path: Path
) -> None:
    """After a part, the fastest candidate that beats the default has its untried neighbours
    (one or two knobs, each at most a factor of two away) tried next, in place of the last
    waiting: as many candidates wait as before; a leader is climbed from once."""
    import itertools
    from types import SimpleNamespace

    from iree.compiler import ir

    from ireetune.core.records import CandidateRecord, CandidateStatus
    from ireetune.core.target import SpaceRequest
    from ireetune.flows.dispatch.state import DispatchBudget
    from ireetune.frontend.load import load_dispatch
    from ireetune.targets import parse_target

    dispatch = load_dispatch(
        matmul_benchmark, None, parse_target(TEST_TARGET), tmp_path, ir.Context()
    )
    request = SpaceRequest(dispatch.problem, dispatch.variant_target, dispatch.default_knobs, 0)
    space = dispatch.space
    ordered = space.order(request, list(itertools.islice(space.generate(request), 24)))
    slow, fast = ordered[0][0], ordered[1][0]
    records = {
        0: CandidateRecord(0, dispatch.default_knobs, CandidateStatus.MEASURED, median_ms=1.0),
        1: CandidateRecord(1, slow, CandidateStatus.MEASURED, median_ms=2.0),
        2: CandidateRecord(2, fast, CandidateStatus.MEASURED, median_ms=0.5),
    }
    waiting = list(ordered[2:8])
    run = SimpleNamespace(
        budget=DispatchBudget(TaskScheduler(100.0, 0.0), part_size=2, waiting=list(waiting)),
        recorder=SimpleNamespace(records=records), problem=dispatch.problem, dispatch=dispatch,
        space=space, options=SimpleNamespace(seed=0), notes=[],
    )  # fmt: skip
    budget.climb(run)  # type: ignore[arg-type]

    moved = [knobs for knobs, _ in run.budget.waiting if (knobs, _) not in waiting]
    assert moved and len(run.budget.waiting) == len(waiting)
    assert [knobs for knobs, _ in run.budget.waiting[: len(moved)]] == moved
    tried = (slow, fast, dispatch.default_knobs)
    fresh = [knobs for knobs in space.near(request, fast) if knobs not in tried]
    assert len(moved) == 6 < len(fresh)
    centre = dict(fast)
    for knobs in moved:
        changed = [(centre[name], value) for name, value in knobs if centre[name] != value]
        assert 1 <= len(changed) <= 2, knobs
        assert all(max(a, b) <= 2 * min(a, b) or max(a, b) <= 1 for a, b in changed), knobs
        assert knobs not in (slow, fast, dispatch.default_knobs)
    assert run.notes == [
        f"candidate 2 led after 2 candidates (2.000x): its untried neighbours go next (6 of "
        f"{len(fresh)})"
    ]
    assert run.budget.climbed == [2]
    # The same leader again, or a leader slower than the default: nothing moves.
    after = list(run.budget.waiting)
    budget.climb(run)  # type: ignore[arg-type]
    records[2] = CandidateRecord(2, fast, CandidateStatus.MEASURED, median_ms=1.5)
    run.budget.climbed.clear()
    budget.climb(run)  # type: ignore[arg-type]
    assert run.budget.waiting == after and len(run.notes) == 1


def test_a_space_that_cannot_draw_around_its_leader_leaves_the_order(
    matmul_benchmark: Path, tmp_path: Path
) -> None:
    """A broken `near` never stops a run: the waiting candidates keep their order, and the
    notes say why."""
    from types import SimpleNamespace

    from iree.compiler import ir

    from ireetune.core.records import CandidateRecord, CandidateStatus
    from ireetune.flows.dispatch.state import DispatchBudget
    from ireetune.frontend.load import load_dispatch
    from ireetune.targets import parse_target

    dispatch = load_dispatch(
        matmul_benchmark, None, parse_target(TEST_TARGET), tmp_path, ir.Context()
    )

    class Broken:
        def near(self, request: object, centre: object) -> list[object]:
            raise ValueError("no solver\nhere")

    leader = (("tile", 4),)
    waiting = [((("tile", 8),), 1.0), ((("tile", 16),), 0.5)]
    run = SimpleNamespace(
        budget=DispatchBudget(TaskScheduler(100.0, 0.0), part_size=1, waiting=list(waiting)),
        recorder=SimpleNamespace(records={
            0: CandidateRecord(0, dispatch.default_knobs, CandidateStatus.MEASURED, median_ms=1.0),
            1: CandidateRecord(1, leader, CandidateStatus.MEASURED, median_ms=0.5),
        }),
        problem=dispatch.problem, dispatch=dispatch, space=Broken(),
        options=SimpleNamespace(seed=0), notes=[],
    )  # fmt: skip
    budget.climb(run)  # type: ignore[arg-type]
    assert run.budget.waiting == waiting
    assert run.notes == [
        "candidate 1 led, but its neighbours could not be drawn (ValueError: no solver here): "
        "the order is kept"
    ]
