"""`tune-dispatch --time-budget`: the run starts no part of its candidates that could not end in
time and closes with what it measured; a continued run keeps what is left of its budget.

The budget's clock is replaced by one that moves a fixed step each time it is read, so that
when a part may start does not hang on this machine's load.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import ireetune
from ireetune.core.budget import TaskScheduler
from ireetune.core.errors import IreetuneError
from ireetune.core.records import CandidateRecord, CandidateStatus
from ireetune.decision.rules import DecisionRule
from ireetune.flows.dispatch import budget
from ireetune.flows.dispatch.options import TuneOptions
from ireetune.flows.dispatch.resume import _remaining_stages, resume_dispatch
from ireetune.flows.dispatch.state import DispatchBudget
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
    # 40 s left at 60 s: a part of 8 s and closing stages of 36 s need 44 s; of 33 s, 41 s.
    assert [scheduler.starts_part(60.0, 8.0, s) for s in (36.0, 32.0)] == [False, True]
    assert TaskScheduler(None, started=0.0).starts_part(1e9, 1e9, 1e9)


def _budgeted_run(speedups: list[float], confirm_above: float, timing_s: float | None) -> Any:
    """A run 7 s into a 21.6 s budget whose first part measured two candidates in 5.5 s (as
    one of ResNet-50's dispatches under a model's budget did, 2026-12-08)."""
    records = {0: CandidateRecord(0, None, CandidateStatus.MEASURED, speedup=1.0)}
    for cid, speedup in enumerate(speedups, start=1):
        records[cid] = CandidateRecord(cid, None, CandidateStatus.MEASURED, speedup=speedup)
    options = TuneOptions(input_path=Path("x.mlir"), confirm_above=confirm_above)
    return SimpleNamespace(
        budget=DispatchBudget(
            TaskScheduler(21.6, started=0.0), measuring_since=1.5, started=2, timing_s=timing_s
        ),
        options=options, rule=DecisionRule(), recorder=SimpleNamespace(records=records),
        search=SimpleNamespace(untried=11), notes=[],
    )  # fmt: skip


def test_the_closing_stages_are_counted_in_the_timings_they_hold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(budget, "clock", lambda: 7.0)
    # No candidate reached the 1.1x its share needs: in five rounds, the closing stages hold the
    # default twice, then five rounds of it and at most the part's two (were they to reach it),
    # and two checks.
    run = _budgeted_run([1.01, 0.97], confirm_above=1.1, timing_s=0.3)
    assert budget.closing_timings(run, 2, 5) == 2 + 5 * 3 + 2
    # Both reach the default's 0x: four leaders (`confirm_top`) and three checks (`verify_top`).
    assert budget.closing_timings(_budgeted_run([1.01, 0.97], 0.0, 0.3), 2, 5) == 2 + 5 * 5 + 3
    # 14.6 s left: the part's 5.5 s and the closing at its fewest rounds (two: 10 timings at
    # 0.3 s, 3 s) fit. Counted as 9 candidates' whole time (24.75 s), they did not, and the run
    # stopped at a third of its budget.
    assert budget.may_start_part(run, 2) and run.budget.started == 4
    assert not budget.may_start_part(_budgeted_run([1.01, 0.97], 1.1, None), 2)
    # At 1 s a timing the closing stages (10 s) do not fit: the run ends, and says so.
    slow = _budgeted_run([1.01, 0.97], confirm_above=1.1, timing_s=1.0)
    assert not budget.may_start_part(slow, 2) and slow.budget.ended
    assert slow.notes == [
        "the time budget (21.6 s) ended the run: it started no part that could not end in time "
        "(2 candidates tried; 13 were not tried)"
    ]


def test_the_confirmation_times_the_rounds_what_is_left_of_the_budget_holds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(budget, "clock", lambda: 7.0)
    # Two leaders: a round times the default and both; the default twice and two checks besides.
    # 14.6 s left at 0.3 s a timing holds 14 rounds: the five asked.
    roomy = _budgeted_run([1.2, 1.1], confirm_above=1.05, timing_s=0.3)
    assert budget.confirm_rounds_that_fit(roomy) == 5 and roomy.notes == []
    # At 1 s a timing, three; at 3 s, none, but never fewer than two.
    tight = _budgeted_run([1.2, 1.1], confirm_above=1.05, timing_s=1.0)
    assert budget.confirm_rounds_that_fit(tight) == 3
    assert tight.notes == [
        "the leaders were confirmed in 3 rounds, not 5: what the time budget left"
    ]
    assert budget.confirm_rounds_that_fit(_budgeted_run([1.2, 1.1], 1.05, 3.0)) == 2
    # No leader, or no part timed: as asked.
    assert budget.confirm_rounds_that_fit(_budgeted_run([1.0, 0.9], 1.05, 3.0)) == 5
    assert budget.confirm_rounds_that_fit(_budgeted_run([1.2, 1.1], 1.05, None)) == 5


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
    # were moved first (search/climb.py, which says so).
    tried, without = [r.knobs for r in budgeted.records], [r.knobs for r in unlimited.records]
    assert tried[:3] == without[:3]
    climbed = [note for note in budgeted.notes if "untried neighbour" in note]
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


def test_a_budget_s_parts_learn_every_measurement_and_their_notes_reach_the_run(
    matmul_benchmark: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parts after the first are the run's rounds: before each, they have learned what the
    parts so far measured, and what they note of a part the run starts is in its notes."""
    from ireetune.search.climb import ClimbingParts

    learned: list[int] = []

    def noting_climb(self: ClimbingParts) -> None:
        learned.append(len(self.measured))
        self.notes.append(f"climbed after {len(self.measured)}")

    monkeypatch.setattr(ClimbingParts, "_climb", noting_climb)
    monkeypatch.setattr(budget, "clock", SteppingClock(0.001))
    result = _tune(matmul_benchmark, tmp_path / "runs", 10_000.0)

    # 6 candidates in parts of 2 (the workers): two later parts, after the first part's
    # measurements and after both parts' (a binary equal to an earlier one teaches nothing).
    assert len(learned) == 2 and 0 < learned[0] < learned[1] <= 4
    assert [note for note in result.notes if note.startswith("climbed")] == [
        f"climbed after {count}" for count in learned
    ]
