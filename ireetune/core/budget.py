"""The task scheduler: one object owns a run's time budget (`--time-budget`) and its shares.

The phases ask it when to stop starting new work; the shares are its policy, kept here only:

    flags        `flag_phase` of the budget (a flag phase given its own budget keeps that);
                 `flag_explore` of that exploring, the rest confirming the best sets found; the
                 runtime options get at least `flag_runtime` of it from when their search starts
    dispatches   `dispatch_phase` of what is left when the phase starts, less what trying
                 every hot dispatch's first candidates in the model needs (`reserve_s`): the
                 rest is kept for the model-level selection, which alone turns a tuned dispatch
                 into a kept spec; within the phase, `DispatchScheduler` gives each dispatch a
                 slot by its expected gain
    variants     what is left, less the tail (`tail_seconds`)
    decide       what is left, less `tail_slack_s`; a comparison still undecided may time more
                 rounds while they leave the tail (`extension_deadline`)

A dispatch run (`tune-dispatch --time-budget`, or its slot in a model run) measures its
candidates in parts and starts a part only when it and the run's closing stages can end in time
(`starts_part`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


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
    # The seconds the decide and report phases need beyond four model loads: their timing, ONNX
    # Runtime's and the reports (MobileNet-v2 on the 2-core machine: 35 s in all where 10 s here
    # gave 22 s). They compile nothing new: the final check's set is a variant the selection
    # built, and the flags' combined check compiles the final check's last set again; both
    # copy the binary the model remembers (`ModelUnderTuning.remember`).
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

    def dispatch_phase_deadline(self, now: float, reserve_s: float = 0.0) -> float | None:
        """Return the time after which the dispatch phase starts tuning no new dispatch: its
        share of the budget left at `now`, and never later than leaves `reserve_s` (what the
        selection needs to try every tuned dispatch in the model) (None: no budget)."""
        left = self.seconds_left(now)
        if left is None:
            return None
        left = max(0.0, left)
        return now + max(0.0, min(self.shares.dispatch_phase * left, left - reserve_s))

    def tail_seconds(self, load_s: float) -> float:
        """Return the seconds kept at the end for the decide and report phases, for a model that
        loads in `load_s` (their compiles copy binaries built before: `tail_slack_s`)."""
        return 4 * load_s + self.shares.tail_slack_s

    def decide_deadline(self, now: float) -> float | None:
        """Return when the final check's harm search stops: the flags' combined check (its
        compile a copy of the last set the search built) and the report keep their time (None:
        no budget)."""
        left = self.seconds_left(now)
        return None if left is None else now + left - self.shares.tail_slack_s

    def extension_deadline(self, now: float, load_s: float) -> float | None:
        """Return until when a model comparison still undecided may time more rounds: what is
        left at `now` less the tail (`tail_seconds`) (None: no budget, no more than usual)."""
        left = self.seconds_left(now)
        return None if left is None else now + left - self.tail_seconds(load_s)

    def starts_part(self, now: float, part_s: float, closing_s: float) -> bool:
        """Say whether a dispatch run may start a part of its candidates at `now`: the part
        (`part_s`, as its parts so far went) and its closing stages (`closing_s`: the leaders
        timed again beside the default, their outputs checked) end within the budget (always,
        without one)."""
        left = self.seconds_left(now)
        return left is None or left >= part_s + closing_s


# What a dispatch is expected to gain before any of its kind was tuned: its time cut by this
# share (a 1.11x dispatch), weighed as one observation against the ones measured.
PRIOR_GAIN = 0.1

# The same for a data-tiled matmul (`linalg.mmt4d`, `linalg.batch_mmt4d`): its space searches
# only the distribution tile, how its work is split among the threads, and for an mmt4d whether
# the microkernel or codegen does it, not the code itself (the inner tile is the data layout's;
# targets/llvm_cpu/mmt4d_space.py). On the 2-core machine the best candidates of six mmt4d
# dispatches ran 0.92-1.03x alone, where a window sum's ran 3.12x (docs/benchmarks.md,
# 2026-12-04), and codegen ran as fast as the microkernel (2026-12-05): a 1.02x dispatch. An
# inner-tiled matmul's (`iree_codegen.inner_tiled`) searches its distribution tile alone too; three
# of ZFNet-512's kept none of 8 candidates (2026-12-06).
DISTRIBUTION_ONLY_PRIOR = 0.02


@dataclass(frozen=True)
class DispatchTask:
    """A hot dispatch to tune: its name, its family (what gains are learned across), its
    problem's share of the model's time, and the share of its time tuning is expected to cut
    before any of its family was tuned."""

    name: str
    family: str
    share: float
    prior: float = PRIOR_GAIN


def needed_dispatch_speedup(share: float, threshold: float) -> float:
    """Return the dispatch-level speedup that makes a model whose part `share` it is clear
    `threshold` (inf: even taking no time it can not)."""
    cut = 1.0 - 1.0 / threshold
    return float("inf") if cut >= share else 1.0 / (1.0 - cut / share)


@dataclass
class DispatchScheduler:
    """The dispatch phase's policy, after TVM MetaSchedule's gradient task scheduler: spend the
    phase (until `ends_at`, None: no limit) where it can move the model.

    A dispatch's expected gain is its share of the model's time times the share of its time
    tuning cuts, learned from the dispatches of its family tuned before it (the prior,
    its task's, counts as one of them: a family not tuned yet has the prior alone). The
    dispatch with the largest expected gain goes next, and gets a slot of the time left in
    proportion to its expected gain among the dispatches still to tune, at least `least_s`:
    every dispatch is tuned before the phase ends, and one that finishes early leaves its time
    to the others.
    """

    ends_at: float | None
    least_s: float = 1.0
    learned: dict[str, list[float]] = field(default_factory=dict)

    def expected_gain(self, task: DispatchTask) -> float:
        """Return the share of the model's time tuning `task` is expected to save."""
        seen = self.learned.get(task.family, [])
        return task.share * (task.prior + sum(seen)) / (1 + len(seen))

    def next_task(self, pending: Sequence[DispatchTask]) -> DispatchTask:
        """Return the pending dispatch to tune next: the largest expected gain (the first of
        equals, the profile's order)."""
        return max(pending, key=self.expected_gain)

    def slot_s(
        self, task: DispatchTask, pending: Sequence[DispatchTask], now: float
    ) -> float | None:
        """Return the seconds `task` may spend (None: no limit): its expected gain's part of the
        time left among `pending` (which holds it), at least `least_s`, at most what is left."""
        if self.ends_at is None:
            return None
        left = max(0.0, self.ends_at - now)
        total = sum(self.expected_gain(p) for p in pending)
        part = self.expected_gain(task) / total if total > 0 else 1.0 / len(pending)
        return min(left, max(self.least_s, part * left))

    def learn(
        self, task: DispatchTask, dispatch_speedup: float | None, session_scale: float = 1.0
    ) -> float:
        """Record what tuning `task` found (its best candidate's speedup over the default in its
        own session; None: nothing measured, no gain); return the model's share it saves.

        `session_scale` is the session's time of the default over the profile's, per launch:
        below 1, the profile's time (and so the task's share) was high, and the model saves the
        time the session's own default loses, not the cut of the profile's (inception_v2's
        im2col gather packed for a data-tiled matmul, whose time moves between two speeds, was
        profiled at 6 times its session's: 2.078x alone, 1.001x in the model). Above 1 it
        counts as 1: the share is no smaller for it."""
        speedup = dispatch_speedup if dispatch_speedup and dispatch_speedup > 0 else 1.0
        scale = min(1.0, session_scale) if session_scale > 0 else 1.0
        cut = max(0.0, 1.0 - 1.0 / speedup) * scale
        self.learned.setdefault(task.family, []).append(cut)
        return task.share * cut
