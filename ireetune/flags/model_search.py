"""The flag phase of model tuning: search the compiler's global options for this model.

    search       the strategy (`flags/strategy.py`) proposes sets: the target's known-good
                 list first, then single option changes of the best set so far; each set is
    compile        compiled once, from the same source path as the default
    hash           a set whose binary equals the default's (or an earlier set's) is not timed
    time           distinct binaries side by side with the default in one process, on the
                   model's real inputs, few rounds first and more for the survivors; outputs
                   compared with the default's (a mismatch drops the set)
    confirm      the search's best sets, timed again in a fresh session against the default
    decide       the decision stage's rule on the confirmed intervals and the output checks
    runtime      the device's runtime options on the winning binary (`flags/runtime.py`)
    clean up     the binaries of the sets not kept are deleted (the default's and the winner's
                 stay; the trials keep every set's flags and binary hash)

Everything stops starting new work once `time_budget_s` is spent. Everything is recorded in
`flags/trials.json` of the run folder.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ireetune.core.budget import TaskScheduler
from ireetune.core.errors import IreetuneError
from ireetune.core.flag_space import DEFAULT_FLAGS, FlagSet, FlagSpace, propose_flag_sets
from ireetune.core.target import Target, spec_flags
from ireetune.core.tools import path_argument
from ireetune.decision.stats import (
    Basis,
    SpeedupEstimate,
    Statistic,
    estimate_speedup,
    split_rounds,
)
from ireetune.flags.runtime import runtime_row, search_runtime_flags
from ireetune.flags.strategy import Budget, search_flag_space
from ireetune.flags.trials import (
    FLAG_STATISTIC,
    TRIALS_FILE_NAME,
    FlagSearchResult,
    FlagTrial,
    ModelFlagSearch,
    TrialStatus,
    classify_by_hash,
    compile_flag_sets,
    first_speedup,
    judge_flag_sets,
    remove_losing_binaries,
    write_trials,
)
from ireetune.model.outputs import outputs_match
from ireetune.model.timing import (
    ModelComparison,
    ModelRun,
    repetitions_for,
    write_session_times,
)

if TYPE_CHECKING:
    from ireetune.executor.base import Executor


def propose_seeds(space: FlagSpace, user_flags: Sequence[str], max_sets: int) -> list[FlagSet]:
    """Return the sets the search starts from: the space's fixed proposals (at most
    `max_sets`), without those that touch an option the user's flags fix (a repeated option is
    a compile error)."""
    fixed = {flag.split("=", 1)[0] for flag in user_flags}
    return [
        p
        for p in propose_flag_sets(space, max_sets)
        if not any(flag.split("=", 1)[0] in fixed for flag in p.flags)
    ]


def search_model_flags(
    executor: Executor, search: ModelFlagSearch, work_dir: Path
) -> FlagSearchResult:
    """Run the flag phase in `work_dir`, compiling and timing on `executor`; return the winning
    compile flags (the default when none won) and runtime flags."""
    started = search.clock()
    work_dir.mkdir(parents=True, exist_ok=True)
    fixed = {flag.split("=", 1)[0] for flag in search.user_flags}
    seeds = propose_seeds(search.space, search.user_flags, search.max_sets)
    tuned = [
        o
        for o in search.space.tuned
        if o.name not in fixed and not any(name in fixed for name, _ in o.depends_on)
    ]
    scheduler = TaskScheduler(search.run_budget_s, started)
    budget_s = scheduler.flag_phase_budget(search.time_budget_s)
    deadline = None if budget_s is None else started + budget_s
    explore_until = scheduler.shares.explore_until(started, budget_s)
    exploring = Budget(explore_until, search.clock)
    evaluator = ModelEvaluator(executor, search, work_dir, exploring, compile_until=deadline)
    if search.repetitions < 1:
        warm_up = _time(executor, search, work_dir, [0], "warm_up", rounds=3)[0]
        if not warm_up.ok:
            raise IreetuneError(f"the default model does not run: {warm_up.reason}")
        search = evaluator.search = replace(
            search, repetitions=repetitions_for(min(warm_up.times_ms))
        )
    settings = replace(search.strategy, max_sets=search.max_sets)
    strategy = search_flag_space(evaluator, seeds, tuned, settings, exploring)
    trials = evaluator.trials
    notes = list(strategy.notes)
    if evaluator.not_compiled:
        notes.append(
            f"time budget spent: {evaluator.not_compiled} proposed set(s) were not compiled"
        )
    contenders = _choose_contenders(trials, evaluator, strategy.ranking, search)
    if contenders:
        # The confirmation decides: it runs even when the budget is spent (a few sets, bounded
        # rounds), so that a set the search found faster is never dropped unjudged.
        if Budget(deadline, search.clock).spent():
            notes.append(
                f"time budget spent: the {len(contenders)} best set(s) found were confirmed anyway"
            )
        confirm_runs = _time(
            executor, search, work_dir, [0, *contenders], "confirm",
            rounds=max(2 * search.rounds, 10),
        )  # fmt: skip
        if not confirm_runs[0].ok:
            raise IreetuneError(f"the default model stopped running: {confirm_runs[0].reason}")
        trials = [
            with_timing(t, confirm_runs.get(t.trial_id), confirm_runs[0], True, search.repetitions)
            if t.trial_id in contenders
            else t
            for t in trials
        ]
    trials, winner_id = judge_flag_sets(trials, contenders, search.rule)
    winner = trials[winner_id] if winner_id is not None else None
    winner_binary = work_dir / f"{winner_id}.vmfb" if winner_id is not None else None
    runtime = search_runtime_flags(
        executor, search, winner_binary or work_dir / "0.vmfb", work_dir / "runtime",
        Budget(
            scheduler.shares.runtime_deadline(deadline, budget_s, search.clock()), search.clock
        ),
    )  # fmt: skip
    removed = remove_losing_binaries(work_dir, trials, winner_id)
    result = FlagSearchResult(
        winner=winner.flag_set if winner is not None else DEFAULT_FLAGS,
        estimate=winner.confirmed if winner is not None else None,
        trials=tuple(trials),
        rule=search.rule,
        trials_path=work_dir / TRIALS_FILE_NAME,
        notes=(*notes, *runtime.notes, *([removed] if removed else [])),
        winner_binary=winner_binary,
        runtime_flags=runtime.flags,
        runtime_estimate=runtime.estimate,
    )
    write_trials(
        result.trials_path, trials, search.rule,
        {"level": "model", "source": str(search.source_path), "base_flags": list(search.base_flags),
         "rounds": search.rounds, "calls_per_round": search.repetitions,
         "winner": list(result.winner.flags), "notes": list(result.notes),
         "search": [{"flags": list(s.flags), "relative": strategy.scores[s].relative,
                     "rung": strategy.scores[s].rung} for s in strategy.ranking],
         "runtime": runtime_row(runtime)},
    )  # fmt: skip
    return result


def _choose_contenders(
    trials: Sequence[FlagTrial],
    evaluator: ModelEvaluator,
    ranking: Sequence[FlagSet],
    search: ModelFlagSearch,
) -> list[int]:
    """Return up to `confirm_top` distinct timed binaries of the search's ranking (best first)
    whose last session was faster than the rule's threshold."""
    contenders: list[int] = []
    for flag_set in ranking:
        trial_id = evaluator.binary_of(flag_set)
        if trial_id is None or trial_id in contenders:
            continue
        speedup = first_speedup(trials[trial_id])
        if speedup is not None and speedup > search.rule.threshold:
            contenders.append(trials[trial_id].trial_id)
    return contenders[: max(0, search.confirm_top)]


class ModelEvaluator:
    """The strategy's view of the model (`strategy.Evaluate`): compile each new set once (its
    binary's hash decides whether it is new), time the distinct binaries side by side with the
    default, and keep every trial.

    New sets are compiled `jobs` at a time, and no more once `budget` is spent: a step's batch
    of 24 sets of a CNN is minutes of compiling, and compiled whole after the deadline it took
    the dispatch phase's time (ShuffleNet's flag phase ran about 235 s of its 150). A set left
    uncompiled is absent from the result, as one that does not compile is.

    A compile started before that ends with the flag phase (`compile_until`) at the latest: on
    the 2-core machine inception_v2's set of im2col, data tiling and channels-last windows took
    226 s where the others took 20-36 s, and the phase ended 100 s past its share, leaving the
    dispatch phase no time to tune one dispatch (2026-12-03). Such a set is a failed compile
    whose reason says so. The default's compile is never cut."""

    def __init__(
        self,
        executor: Executor,
        search: ModelFlagSearch,
        work_dir: Path,
        budget: Budget,
        compile_until: float | None = None,
    ) -> None:
        self.executor, self.search, self.work_dir = executor, search, work_dir
        self.budget = budget
        # The default's compile is never cut: without it there is no search.
        self.compile_until: float | None = None
        self.trials: list[FlagTrial] = []
        self.sessions = 0
        self.not_compiled = 0
        self._compile_now([DEFAULT_FLAGS])
        if self.trials[0].status is not TrialStatus.DEFAULT:
            raise IreetuneError(
                f"the model does not compile with default flags: {self.trials[0].reason}"
            )
        self.compile_until = compile_until

    def binary_of(self, flag_set: FlagSet) -> int | None:
        """Return the trial whose binary the set compiles to (0: the default's), None if the
        set did not compile or was never compiled."""
        key = frozenset(flag_set.flags)
        trial = next((t for t in self.trials if frozenset(t.flag_set.flags) == key), None)
        if trial is None or trial.status in (TrialStatus.COMPILE_FAILED, TrialStatus.RUN_FAILED):
            return None
        if trial.status in (TrialStatus.DEFAULT, TrialStatus.NO_EFFECT):
            return 0
        return next(t.trial_id for t in self.trials if t.binary_hash == trial.binary_hash)

    def __call__(self, flag_sets: Sequence[FlagSet], rounds: int) -> dict[FlagSet, float]:
        known = {frozenset(t.flag_set.flags) for t in self.trials}
        self._compile([s for s in dict.fromkeys(flag_sets) if frozenset(s.flags) not in known])
        binaries = {s: self.binary_of(s) for s in flag_sets}
        timed = sorted({b for b in binaries.values() if b})
        if timed:
            self.sessions += 1
            runs = _time(
                self.executor, self.search, self.work_dir, [0, *timed],
                f"session_{self.sessions}", rounds,
            )  # fmt: skip
            if not runs[0].ok:
                raise IreetuneError(f"the default model stopped running: {runs[0].reason}")
            for trial_id in timed:
                self.trials[trial_id] = with_timing(
                    self.trials[trial_id], runs.get(trial_id), runs[0], False,
                    self.search.repetitions,
                )  # fmt: skip
        relative: dict[FlagSet, float] = {}
        for flag_set, binary in binaries.items():
            trial = self.trials[binary] if binary is not None else None
            if binary == 0:
                relative[flag_set] = 1.0
            elif (speedup := first_speedup(trial)) is not None:
                relative[flag_set] = 1.0 / speedup
        return relative

    def _compile(self, flag_sets: Sequence[FlagSet]) -> None:
        """Compile the sets `jobs` at a time until the budget is spent."""
        chunk = max(1, self.search.jobs)
        for start in range(0, len(flag_sets), chunk):
            if self.budget.spent():
                self.not_compiled += len(flag_sets) - start
                return
            self._compile_now(flag_sets[start : start + chunk])

    def _compile_now(self, flag_sets: Sequence[FlagSet]) -> None:
        if not flag_sets:
            return
        first_id = len(self.trials)
        timeout_s = self.search.compile_timeout_s
        cut = (
            self.compile_until is not None and self.compile_until - self.search.clock() < timeout_s
        )
        if cut and self.compile_until is not None:
            timeout_s = max(MIN_COMPILE_S, self.compile_until - self.search.clock())
        compiled = compile_flag_sets(
            self.executor, self.search.source_path, self.search.base_flags,
            dict(enumerate(flag_sets, start=first_id)), self.work_dir, self.search.jobs,
            timeout_s,
        )  # fmt: skip
        if cut:
            compiled = [
                replace(t, reason=f"not compiled within the flag phase's time ({timeout_s:.0f} s "
                        "were left when it started)")
                if t.status is TrialStatus.COMPILE_FAILED and t.reason.startswith("timed out")
                else t
                for t in compiled
            ]  # fmt: skip
        self.trials = classify_by_hash([*self.trials, *compiled]) if first_id else compiled


# The least a flag set's compile is given when the flag phase's end cuts its timeout.
MIN_COMPILE_S = 1.0


def _time(
    executor: Executor, search: ModelFlagSearch, work_dir: Path, trial_ids: Sequence[int],
    session: str, rounds: int | None = None,
) -> dict[int, ModelRun]:  # fmt: skip
    """Time the trials' binaries interleaved in one process; return each one's run by id.

    The session's raw times, the default's among them, stay in its folder (`SESSION_TIMES`),
    beside the outputs: trials.json keeps a set's times of its last search session only, and
    without the default's no interval there could be computed again."""
    session_dir = work_dir / session
    session_dir.mkdir(exist_ok=True)
    comparison = ModelComparison(
        [(str(i), work_dir / f"{i}.vmfb") for i in trial_ids], search.function,
        search.inputs_path, session_dir, search.device, rounds or search.rounds,
        max(1, search.repetitions),
    )  # fmt: skip
    runs = executor.run_models_side_by_side(comparison)
    write_session_times(comparison, runs)
    return {int(model_id): run for model_id, run in runs.items()}


def _speedup(
    default: Sequence[float],
    candidate: Sequence[float],
    repetitions: int,
    statistic: Statistic = FLAG_STATISTIC,
) -> SpeedupEstimate | None:
    """Return the paired speedup over rounds of `repetitions` calls of each model, by the flag
    rule's statistic (`model_flag_rule`) unless told otherwise."""
    if not default or not candidate:
        return None
    return estimate_speedup(
        split_rounds(default, repetitions), split_rounds(candidate, repetitions), Basis.MODEL,
        statistic,
    )  # fmt: skip


def with_timing(
    trial: FlagTrial, run: ModelRun | None, default_run: ModelRun, confirm: bool, repetitions: int
) -> FlagTrial:
    """Add one session's timing and output check to a trial."""
    if run is None or trial.status is not TrialStatus.TIMED:
        return trial
    if not run.ok:
        return replace(trial, status=TrialStatus.RUN_FAILED, reason=run.reason)
    matches, why = outputs_match(default_run.outputs, run.outputs)
    estimate = _speedup(default_run.times_ms, run.times_ms, repetitions)
    if confirm:
        return replace(
            trial, confirmed=estimate, outputs_match=matches and trial.outputs_match is not False,
            reason=f"outputs differ from the default's ({why})" if not matches else trial.reason,
        )  # fmt: skip
    return replace(
        trial, times_ms=run.times_ms, first=estimate, outputs_match=matches,
        reason=f"outputs differ from the default's ({why})" if not matches else "",
    )  # fmt: skip


def measure_combined(
    executor: Executor,
    original: Path,
    final: Path,
    search: ModelFlagSearch,
    work_dir: Path,
    runtime_flags: Sequence[str] = (),
) -> tuple[SpeedupEstimate | None, str]:
    """Time the untouched default and the final model (flags plus spec) side by side on
    `executor`, both under the tuned runtime flags (one process has one set).

    Returns the paired speedup, or None and why (the final model failed, or its outputs differ).
    The session's raw times stay in its folder (`SESSION_TIMES`).
    """
    session_dir = work_dir / "combined"
    session_dir.mkdir(parents=True, exist_ok=True)
    comparison = ModelComparison(
        [("default", original), ("tuned", final)], search.function, search.inputs_path,
        session_dir, search.device, 2 * search.rounds, search.repetitions,
        runtime_flags=tuple(runtime_flags),
    )  # fmt: skip
    runs = executor.run_models_side_by_side(comparison)
    write_session_times(comparison, runs)
    if not runs["default"].ok or not runs["tuned"].ok:
        return None, runs["tuned"].reason or runs["default"].reason
    matches, why = outputs_match(runs["default"].outputs, runs["tuned"].outputs)
    if not matches:
        return None, f"outputs differ from the default's ({why})"
    # The medians: the figure a user reads of the whole tuned model is its typical call's.
    default, tuned = runs["default"].times_ms, runs["tuned"].times_ms
    return _speedup(default, tuned, search.repetitions, Statistic.MEDIAN), ""


def apply_command(
    model_path: Path, target: Target, flags_file: Path | None, spec_path: Path | None
) -> str:
    """Return the one iree-compile command that builds the tuned model."""
    words = [
        "iree-compile", path_argument(model_path), *target.target_flags(),
        *([f"@{path_argument(flags_file)}"] if flags_file is not None else []),
        *(spec_flags(target, spec_path) if spec_path is not None else []),
        "-o", "model.vmfb",
    ]  # fmt: skip
    return " ".join(shlex.quote(word) for word in words)
