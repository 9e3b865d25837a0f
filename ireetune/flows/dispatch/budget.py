"""A dispatch run's time budget (`tune-dispatch --time-budget`): no part started that could not
end in time.

With a budget a run measures its candidates in parts, as an online search measures its rounds:
each part's specs are written, compiled and timed (first pass, `measure_round_stage`). Before each
later part (or round) the task scheduler (core/budget.py `starts_part`) says whether it and the
run's closing stages (the leaders timed again beside the default, their outputs checked, the
decision) can still end within the budget, going by how long the parts so far took a candidate.
When they can not, the run starts no new part and closes with what it measured; its notes (the
summary, the result) and results.json's `time_budget` say that the budget ended it. A budget spent
before the first measurement is one line. Before each later part the run climbs from its leader
(`climb`): the untried neighbours of the fastest candidate so far that beats the default go first.

The seconds a run spent are saved with it (results.json's `time_budget`), so `ireetune continue`
of a killed run goes on with what is left of its budget; the time between the kill and the
continue is not counted.
"""

from __future__ import annotations

import math
import time
from typing import Any

from ireetune.core.budget import TaskScheduler
from ireetune.core.candidate import Knobs
from ireetune.core.errors import IreetuneError
from ireetune.core.target import SpaceRequest
from ireetune.flows.dispatch.state import DispatchBudget, DispatchRun

# The clock the budget is kept on (a test may replace it).
clock = time.monotonic


def read_clock() -> float:
    """Return the budget's clock's time."""
    return clock()


# A budget's run measures in at most this many parts: each part times the default once more.
MAX_PARTS = 8


def start_budget(run: DispatchRun, started: float) -> int:
    """Give a run with `--time-budget` its budget, begun at `started`, and hold back all but
    the first part of its candidates (an online search's rounds are its parts already); return
    how many parts follow the first (0 without a budget)."""
    budget_s = run.options.time_budget_s
    if budget_s is None:
        return 0
    run.budget = budget = DispatchBudget(TaskScheduler(budget_s, started))
    if run.search is not None:
        return 0
    budget.part_size = max(run.workers, math.ceil(len(run.candidates) / MAX_PARTS))
    budget.waiting = run.candidates[budget.part_size :]
    run.candidates = run.candidates[: budget.part_size]
    return math.ceil(len(budget.waiting) / budget.part_size)


def check_time_to_measure(run: DispatchRun) -> None:
    """Refuse in one line a run whose budget was spent before its first measurement; else start
    counting its parts' time."""
    budget = run.budget
    if budget is None:
        return
    now = clock()
    left = budget.scheduler.seconds_left(now)
    assert left is not None and budget.scheduler.budget_s is not None, "a budget has seconds"
    if left <= 0:
        raise IreetuneError(
            f"the time budget of {budget.scheduler.budget_s:g} s was spent before any candidate "
            f"was measured (loading the dispatch and drawing its candidates took "
            f"{now - budget.scheduler.started:.1f} s): give --time-budget more seconds"
        )
    budget.measuring_since = now
    budget.started = len(run.candidates)


def may_start_part(run: DispatchRun, size: int) -> bool:
    """Say whether the run may start measuring `size` more candidates (always without a
    budget) and count them; once it may not, say in the run's notes that the budget ended it."""
    budget = run.budget
    if budget is None:
        return True
    if budget.ended:
        return False
    now = clock()
    candidate_s = (now - budget.measuring_since) / max(1, budget.started)
    options = run.options
    closing = options.confirm_top + options.verify_top + 2
    if budget.scheduler.starts_part(now, candidate_s, size, closing):
        budget.started += size
        return True
    budget.ended = True
    later = (
        f"{len(budget.waiting)} were not tried"
        if run.search is None
        else "the online search's later rounds were not started"
    )
    run.notes.append(
        f"the time budget ({budget.scheduler.budget_s:g} s) ended the run: it started no part "
        f"that could not end in time ({budget.started} candidates tried; {later})"
    )
    return False


def climb(run: DispatchRun) -> None:
    """Before a part: when the fastest candidate measured so far beats the default and was not
    climbed from yet, move its untried neighbours (`FamilySpace.near`, ordered around it) to
    the front of the candidates waiting, so the next parts search next to it; as many of the
    last waiting as they add are dropped: the run tries no more candidates.

    A run with a budget measures only what its parts reach: a neighbourhood of the default
    searched in the space's order left GoogLeNet's LRN window sum at two channels a vector
    step (1.54x alone), its next step, four, never tried."""
    budget = run.budget
    assert budget is not None, "only a run with a time budget has parts"
    records = run.recorder.records
    baseline = records[0].median_ms if 0 in records else None
    timed = [
        (r.median_ms, r.candidate_id, r.knobs) for r in records.values()
        if not r.is_baseline and r.median_ms and r.knobs is not None
    ]  # fmt: skip
    if not budget.waiting or not baseline or not timed:
        return
    best_ms, leader, knobs = min(timed)
    if best_ms >= baseline or leader in budget.climbed:
        return
    budget.climbed.append(leader)
    request = SpaceRequest(run.problem, run.dispatch.variant_target, knobs, run.options.seed)
    tried = {r.knobs for r in records.values()} | {run.dispatch.default_knobs}
    try:
        near = run.space.near(request, knobs)
    except Exception as error:  # A space that cannot draw around a leader leaves the order.
        run.notes.append(
            f"candidate {leader} led, but its neighbours could not be drawn "
            f"({type(error).__name__}: {' '.join(str(error).split())[:200]}): the order is kept"
        )
        return
    fresh = [knobs for knobs in near if knobs not in tried]
    if not fresh:
        return
    moved = set(fresh)
    ordered: list[tuple[Knobs, float | None]] = list(run.space.order(request, fresh))
    rest = [entry for entry in budget.waiting if entry[0] not in moved]
    budget.waiting = (ordered + rest)[: len(budget.waiting)]
    run.notes.append(
        f"candidate {leader} led after {len(timed)} candidates "
        f"({baseline / best_ms:.3f}x): its untried neighbours go next "
        f"({min(len(ordered), len(budget.waiting))} of {len(fresh)})"
    )


def record_budget(run: DispatchRun, stage: str) -> None:
    """After each stage, keep the budget's account in results.json (`time_budget`): the seconds
    spent so far, whether the budget ended the run, the candidates tried."""
    budget = run.budget
    if budget is None:
        return
    scheduler = budget.scheduler
    run.recorder.info["time_budget"] = {
        "budget_s": scheduler.budget_s,
        "spent_s": round(clock() - scheduler.started, 3),
        "ended_run": budget.ended,
        "tried": budget.started,
    }


def resume_budget(run: DispatchRun, info: dict[str, Any]) -> None:
    """Give a continued run what is left of its budget: results.json holds the seconds it spent
    before it was killed (checked as the file's `time_budget` by database/run_files.py); say
    so in its notes, or that the time spent is not known and the budget starts anew."""
    budget_s = run.options.time_budget_s
    if budget_s is None:
        return
    account = info.get("time_budget") or {}
    spent, tried = account.get("spent_s"), account.get("tried", 0)
    now = clock()
    if run.run_progress.last == "specs" and tried < run.options.num_candidates:
        run.notes.append(
            "continued after its first part: the candidates it had not started are not saved, "
            "and not tried"
        )
    if spent is None:
        run.notes.append(
            f"continued: the time it spent before it was killed is not known; its time budget "
            f"({budget_s:g} s) starts anew"
        )
        spent = 0.0
    else:
        run.notes.append(
            f"continued with {max(0.0, budget_s - spent):.0f} s of its {budget_s:g} s time "
            "budget left (the time between the kill and the continue not counted)"
        )
    run.budget = DispatchBudget(
        TaskScheduler(budget_s, now - spent), measuring_since=now, started=tried
    )
