"""The task scheduler: one object owns a run's time budget (`--time-budget`) and its shares.

The phases ask it when to stop starting new work; the shares are its policy, kept here only:

    flags        `flag_phase` of the budget (a flag phase given its own budget keeps that);
                 `flag_explore` of that exploring, the rest confirming the best sets found; the
                 runtime options get at least `flag_runtime` of it from when their search starts
    dispatches   `dispatch_phase` of what is left when the phase starts: the rest is kept for
                 the model-level selection, which alone turns a tuned dispatch into a kept spec
    variants     what is left, less the tail (`tail_seconds`)
    decide       what is left, less one compile and `tail_slack_s`

A dispatch run (`tune-dispatch --time-budget`) measures its candidates in parts and starts a
part only when it and the run's closing stages can end in time (`starts_part`).

TODO(scheduler): issue 39 gives the dispatch phase's share to the dispatches by their expected
gain (as MetaSchedule's gradient task scheduler); `dispatch_phase_deadline` is where it goes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BudgetShares:
    """How a run's time budget is shared among its phases (the scheduler's policy)."""

    # The flag phase's share of `ireetune tune --time-budget` (the later phases have the rest).
    flag_phase: float = 0.5
    # The share of the flag phase's budget spent exploring: the rest confirms the best sets
    # found (the step that decides) and searches the runtime options.
    flag_explore: float = 0.8
    # The share of the flag phase's budget the runtime options always get, from when their
    # search starts: exploring and confirming the compile flags can use the whole budget
    # (MobileNet-v2 with --time-budget 600 left the runtime search none), and the runtime
    # search is two short sessions.
    flag_runtime: float = 0.05
    # The share of what is left when the dispatch phase starts that it may spend tuning
    # dispatches (MobileNet-v2 with --time-budget 600 tuned eight dispatches and had no time
    # left to try one of them in the model).
    dispatch_phase: float = 0.6
    # The seconds the decide and report phases need beyond two compiles of the model (the final
    # check's and the flags' combined check) and four model loads: their timing, ONNX Runtime's
    # and the reports (MobileNet-v2 on the 2-core machine: 35 s in all where 10 s here gave
    # 22 s).
    tail_slack_s: float = 20.0

    def explore_until(self, started: float, phase_budget_s: float | None) -> float | None:
        """Return when the flag search stops exploring (None: no limit)."""
        return None if phase_budget_s is None else started + self.flag_explore * phase_budget_s

    def runtime_deadline(
        self, deadline: float | None, phase_budget_s: float | None, now: float
    ) -> float | None:
        """Return when the runtime search starts no new session: the flag phase's deadline, or
        `flag_runtime` of its budget from `now` when that is later (None: no limit)."""
        if deadline is None or phase_budget_s is None:
            return deadline
        return max(deadline, now + self.flag_runtime * phase_budget_s)


SHARES = BudgetShares()


@dataclass(frozen=True)
class TaskScheduler:
    """A run's time budget: `budget_s` seconds (None: no limit) from `started` (on the clock of
    the `now` each question is asked with), shared by `shares`."""

    budget_s: float | None
    started: float
    shares: BudgetShares = SHARES

    def seconds_left(self, now: float) -> float | None:
        """Return the seconds left at `now` (None: no budget)."""
        return None if self.budget_s is None else self.started + self.budget_s - now

    def flag_phase_budget(self, phase_budget_s: float | None = None) -> float | None:
        """Return the flag phase's budget: its own (`phase_budget_s`), else its share of the
        run's (None: no limit)."""
        if phase_budget_s is not None or self.budget_s is None:
            return phase_budget_s
        return self.shares.flag_phase * self.budget_s

    def dispatch_phase_deadline(self, now: float) -> float | None:
        """Return the time after which the dispatch phase starts tuning no new dispatch: its
        share of the budget left at `now` (None: no budget)."""
        left = self.seconds_left(now)
        return None if left is None else now + self.shares.dispatch_phase * max(0.0, left)

    def tail_seconds(self, compile_s: float, load_s: float) -> float:
        """Return the seconds kept at the end for the decide and report phases, for a model that
        compiles in `compile_s` and loads in `load_s`."""
        return 2 * compile_s + 4 * load_s + self.shares.tail_slack_s

    def decide_deadline(self, now: float, compile_s: float) -> float | None:
        """Return when the final check's harm search stops: the flags' combined check (one
        compile) and the report keep their time (None: no budget)."""
        left = self.seconds_left(now)
        return None if left is None else now + left - compile_s - self.shares.tail_slack_s

    def starts_part(self, now: float, candidate_s: float, size: int, closing: int) -> bool:
        """Say whether a dispatch run may start measuring `size` more candidates at `now`: they
        and its closing stages (about `closing` candidates' time: the leaders timed again beside
        the default, their outputs checked), at `candidate_s` seconds a candidate as its parts so
        far went, end within the budget (always, without one)."""
        left = self.seconds_left(now)
        return left is None or left >= candidate_s * (size + closing)
