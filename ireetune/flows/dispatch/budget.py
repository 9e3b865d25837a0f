"""A dispatch run's time budget (`tune-dispatch --time-budget`): no part started that could not
end in time.

With a budget a run measures its candidates in parts, as an online search measures its rounds:
each part's specs are written, compiled and timed (first pass, `measure_round_stage`). Before each
later part (or round) the task scheduler (core/budget.py `starts_part`) says whether it and the
run's closing stages (the leaders timed again beside the default, their outputs checked, the
decision) can still end within the budget: the part going by how long the parts so far took a
candidate, the closing stages by the timings they hold (`closing_timings`) at what one timing
took in the last part's first pass, with the confirmation at its fewest rounds
(`LEAST_CONFIRM_ROUNDS`): the confirmation then times as many of its rounds as what is left of
the budget holds (`confirm_rounds_that_fit`), and the run's notes say when that was fewer than
asked.
When they can not, the run starts no new part and closes with what it measured; its notes (the
summary, the result) and results.json's `time_budget` say that the budget ended it. A budget spent
before the first measurement is one line. The later parts are the rounds of search/climb.py
(`ClimbingParts`): before each, the untried neighbours of the fastest candidate so far that
beats the default go first.

The seconds a run spent are saved with it (results.json's `time_budget`), so `ireetune continue`
of a killed run goes on with what is left of its budget; the time between the kill and the
continue is not counted.
"""

from __future__ import annotations

import math
import time
from typing import Any

from ireetune.core.budget import TaskScheduler
from ireetune.core.errors import IreetuneError
from ireetune.flows.dispatch.state import DispatchBudget, DispatchRun
from ireetune.search.climb import ClimbingParts

# The clock the budget is kept on (a test may replace it).
clock = time.monotonic


def read_clock() -> float:
    """Return the budget's clock's time."""
    return clock()


# A budget's run measures in at most this many parts: each part times the default once more.
MAX_PARTS = 8
# The fewest rounds a budget cuts the leaders' confirmation to (never more than asked).
LEAST_CONFIRM_ROUNDS = 2


def start_budget(run: DispatchRun, started: float) -> None:
    """Give a run with `--time-budget` its budget, begun at `started`, and hold back all but
    the first part of its candidates: the later parts are its rounds (`run.search`, climbing:
    search/climb.py; an online search's rounds are its parts already)."""
    budget_s = run.options.time_budget_s
    if budget_s is None:
        return
    run.budget = DispatchBudget(TaskScheduler(budget_s, started))
    if run.search is not None:
        return
    size = max(run.workers, math.ceil(len(run.candidates) / MAX_PARTS))
    first, waiting = run.candidates[:size], run.candidates[size:]
    run.search = ClimbingParts(run.space, run.request, waiting, size, [k for k, _ in first])
    run.candidates = first


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
    """Say whether the run may start measuring the `size` candidates of its next round (always
    without a budget) and count them; once it may not, say in the run's notes that the budget
    ended it."""
    assert run.search is not None, "only a run with rounds starts a part"
    budget = run.budget
    if budget is None:
        return True
    if budget.ended:
        return False
    now = clock()
    candidate_s = (now - budget.measuring_since) / max(1, budget.started)
    options = run.options
    if budget.timing_s is None:
        # No part was timed here (a continued run): a candidate's whole time for each.
        closing_s = candidate_s * (options.confirm_top + options.verify_top + 2)
    else:
        rounds = min(options.confirm_rounds, LEAST_CONFIRM_ROUNDS)
        closing_s = budget.timing_s * closing_timings(run, size, rounds)
    if budget.scheduler.starts_part(now, candidate_s * size, closing_s):
        budget.started += size
        return True
    budget.ended = True
    untried = size + run.search.untried
    run.notes.append(
        f"the time budget ({budget.scheduler.budget_s:g} s) ended the run: it started no part "
        f"that could not end in time ({budget.started} candidates tried; {untried} were not "
        "tried)"
    )
    return False


def _leaders(run: DispatchRun, more: int) -> int:
    """Return how many leaders the confirmation would time were `more` candidates to reach
    `confirm_above` besides those measured so far that do (at most `confirm_top`)."""
    options = run.options
    reaching = sum(
        1
        for cid, record in run.recorder.records.items()
        if cid and record.speedup is not None and not record.stopped_early
        and record.speedup >= options.confirm_above
    )  # fmt: skip
    return min(options.confirm_top, reaching + more)


def closing_timings(run: DispatchRun, size: int, rounds: int) -> int:
    """Return how many timings of a binary the run's closing stages hold if it starts a part of
    `size` more candidates and confirms in `rounds` rounds: the default before and after, the
    confirmation's rounds of the default and the leaders (the candidates measured so far that
    reach `confirm_above`, and the part's; none without a leader), and each contender's output
    check (a run on real inputs; its rounds too where real inputs decide)."""
    leaders = _leaders(run, size)
    if not leaders or rounds < 1:
        return 2
    return 2 + rounds * (1 + leaders) + _check_timings(run, leaders, rounds)


def _check_timings(run: DispatchRun, leaders: int, rounds: int) -> int:
    contenders = min(run.options.verify_top, leaders)
    return contenders * (1 + rounds if run.rule.real_input_decides else 1)


def confirm_rounds_that_fit(run: DispatchRun) -> int:
    """Return the rounds the leaders' confirmation times: as asked, or, with a budget, as many
    as what is left of it holds beside the closing's other timings, at least
    `LEAST_CONFIRM_ROUNDS` (the parts started were counted with those); say so in the notes
    when fewer than asked."""
    asked = run.options.confirm_rounds
    budget = run.budget
    if budget is None or budget.timing_s is None or asked <= LEAST_CONFIRM_ROUNDS:
        return asked
    leaders = _leaders(run, 0)
    left = budget.scheduler.seconds_left(clock())
    if not leaders or left is None:
        return asked
    other = 2 + _check_timings(run, leaders, asked)
    fit = math.floor((left / budget.timing_s - other) / (1 + leaders))
    rounds = max(LEAST_CONFIRM_ROUNDS, min(asked, fit))
    if rounds < asked:
        run.notes.append(
            f"the leaders were confirmed in {rounds} rounds, not {asked}: what the time budget left"
        )
    return rounds


def note_part_timing(run: DispatchRun, seconds: float, timings: int) -> None:
    """Keep what one timing of a binary took in a part's first pass (`seconds` over `timings`,
    the default's included), for the closing stages' estimate."""
    if run.budget is not None and timings > 0:
        run.budget.timing_s = seconds / timings


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
