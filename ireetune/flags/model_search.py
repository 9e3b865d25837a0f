"""The flag phase of model tuning: search the compiler's global options for this model.

    compile      the default and each proposed flag set, from the same source path
    hash         a set whose binary equals the default's has no effect: recorded, never timed
    time         every distinct binary side by side with the default in one process, on the
                 model's real inputs; outputs compared with the default's
    confirm      the fastest sets of that first session (pre-selected by their point estimate),
                 plus the union of them when it is new, timed again in a fresh session against
                 the default
    decide       the decision stage's rule on the confirmed intervals and the output checks

Everything is recorded in `flags/trials.json` of the run folder.
"""

from __future__ import annotations

import logging
import math
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ireetune.core.flag_space import (
    DEFAULT_FLAGS,
    FlagSpace,
    propose_flag_sets,
    union_of_winners,
)
from ireetune.core.target import Target
from ireetune.decision.rules import DecisionRule
from ireetune.decision.stats import Basis, SpeedupEstimate, estimate_speedup, split_rounds
from ireetune.errors import IreetuneError
from ireetune.flags.trials import (
    TRIALS_FILE_NAME,
    FlagSearchResult,
    FlagTrial,
    TrialStatus,
    choose_flag_contenders,
    classify_by_hash,
    compile_flag_sets,
    judge_flag_sets,
    write_trials,
)
from ireetune.model.outputs import outputs_match
from ireetune.model.select import MODEL_RULE
from ireetune.model.timing import ModelComparison, ModelRun

if TYPE_CHECKING:
    from ireetune.executor.base import Executor

logger = logging.getLogger(__name__)

# A flag set must make the whole model, timed on its inputs, faster by at least the model
# tuner's threshold (the lower bound of its paired interval).
FLAG_RULE = DecisionRule(threshold=MODEL_RULE.threshold, real_input_decides=True)


@dataclass(frozen=True)
class ModelFlagSearch:
    """What the flag phase needs: the model, how to compile and run it, and how hard to search.

    `base_flags` go on every compile (the target's, the user's `--flags`); proposals touching an
    option the user fixed are left out, since a repeated option is a compile error.
    """

    source_path: Path
    function: str
    inputs_path: Path
    base_flags: tuple[str, ...]
    user_flags: tuple[str, ...]
    device: str
    space: FlagSpace
    rounds: int = 5
    # Calls of each model per round: a fast model is called several times in a row so that a
    # round lasts long enough to time (`repetitions_for`); 0 measures the default first.
    repetitions: int = 0
    max_sets: int = 24
    confirm_top: int = 3
    jobs: int = 2
    compile_timeout_s: float = 1200.0
    rule: DecisionRule = FLAG_RULE


# A round should time each model for at least this long.
MIN_ROUND_MS = 20.0
MAX_REPETITIONS = 1000


def repetitions_for(model_ms: float) -> int:
    """Return how many calls per round make a round of a `model_ms` model last MIN_ROUND_MS."""
    if model_ms <= 0:
        return 1
    return max(1, min(MAX_REPETITIONS, math.ceil(MIN_ROUND_MS / model_ms)))


def search_model_flags(
    executor: Executor, search: ModelFlagSearch, work_dir: Path
) -> FlagSearchResult:
    """Run the flag phase in `work_dir`, compiling and timing on `executor`; return the winning
    set (the default when none won)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    fixed = {flag.split("=", 1)[0] for flag in search.user_flags}
    proposals = [
        p
        for p in propose_flag_sets(search.space, search.max_sets)
        if not any(flag.split("=", 1)[0] in fixed for flag in p.flags)
    ]
    trials = compile_flag_sets(
        executor, search.source_path, search.base_flags, dict(enumerate([DEFAULT_FLAGS, *proposals])),
        work_dir, search.jobs, search.compile_timeout_s,
    )  # fmt: skip
    if trials[0].status is not TrialStatus.DEFAULT:
        raise IreetuneError(f"the model does not compile with default flags: {trials[0].reason}")
    trials = classify_by_hash(trials)
    if search.repetitions < 1:
        warm_up = _time(executor, search, work_dir, [0], "warm_up", rounds=3)[0]
        if not warm_up.ok:
            raise IreetuneError(f"the default model does not run: {warm_up.reason}")
        search = replace(search, repetitions=repetitions_for(min(warm_up.times_ms)))
    timed_ids = [t.trial_id for t in trials if t.status is TrialStatus.TIMED]
    first_runs = _time(executor, search, work_dir, [0, *timed_ids], "first")
    default_run = first_runs[0]
    if not default_run.ok:
        raise IreetuneError(f"the default model does not run: {default_run.reason}")
    trials = [
        _with_timing(t, first_runs.get(t.trial_id), default_run, False, search.repetitions)
        for t in trials
    ]
    contenders = choose_flag_contenders(trials, search.rule, search.confirm_top)
    notes: list[str] = []
    union = union_of_winners([trials[i].flag_set for i in contenders], [t.flag_set for t in trials])
    if union is not None:
        # The options that each won alone, together: compiled and timed only in the confirmation.
        compiled = compile_flag_sets(
            executor, search.source_path, search.base_flags, {len(trials): union}, work_dir,
            search.jobs, search.compile_timeout_s,
        )  # fmt: skip
        extra = classify_by_hash([*trials, *compiled])[-1]
        trials.append(extra)
        if extra.status is TrialStatus.TIMED:
            contenders.append(extra.trial_id)
        notes.append(f"tried the union of the sets that won alone: {union.label}")
    if contenders:
        confirm_runs = _time(
            executor,
            search,
            work_dir,
            [0, *contenders],
            "confirm",
            rounds=max(2 * search.rounds, 10),
        )
        if not confirm_runs[0].ok:
            raise IreetuneError(f"the default model stopped running: {confirm_runs[0].reason}")
        trials = [
            _with_timing(t, confirm_runs.get(t.trial_id), confirm_runs[0], True, search.repetitions)
            if t.trial_id in contenders
            else t
            for t in trials
        ]
    trials, winner_id = judge_flag_sets(trials, contenders, search.rule)
    winner = trials[winner_id] if winner_id is not None else None
    result = FlagSearchResult(
        winner=winner.flag_set if winner is not None else DEFAULT_FLAGS,
        estimate=winner.confirmed if winner is not None else None,
        trials=tuple(trials),
        rule=search.rule,
        trials_path=work_dir / TRIALS_FILE_NAME,
        notes=tuple(notes),
        winner_binary=work_dir / f"{winner_id}.vmfb" if winner_id is not None else None,
    )
    write_trials(
        result.trials_path, trials, search.rule,
        {"level": "model", "source": str(search.source_path), "base_flags": list(search.base_flags),
         "rounds": search.rounds, "calls_per_round": search.repetitions,
         "winner": list(result.winner.flags), "notes": notes},
    )  # fmt: skip
    return result


def _time(
    executor: Executor, search: ModelFlagSearch, work_dir: Path, trial_ids: Sequence[int],
    session: str, rounds: int | None = None,
) -> dict[int, ModelRun]:  # fmt: skip
    """Time the trials' binaries interleaved in one process; return each one's run by id."""
    session_dir = work_dir / session
    session_dir.mkdir(exist_ok=True)
    runs = executor.run_models_side_by_side(
        ModelComparison(
            [(str(i), work_dir / f"{i}.vmfb") for i in trial_ids], search.function,
            search.inputs_path, session_dir, search.device, rounds or search.rounds,
            max(1, search.repetitions),
        )
    )  # fmt: skip
    return {int(model_id): run for model_id, run in runs.items()}


def _speedup(
    default: Sequence[float], candidate: Sequence[float], repetitions: int
) -> SpeedupEstimate | None:
    """Return the paired speedup over rounds of `repetitions` calls of each model."""
    if not default or not candidate:
        return None
    return estimate_speedup(
        split_rounds(default, repetitions), split_rounds(candidate, repetitions), Basis.MODEL
    )


def _with_timing(
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
    executor: Executor, original: Path, final: Path, search: ModelFlagSearch, work_dir: Path
) -> tuple[SpeedupEstimate | None, str]:
    """Time the untouched default and the final model (flags plus spec) side by side on
    `executor`.

    Returns the paired speedup, or None and why (the final model failed, or its outputs differ).
    """
    session_dir = work_dir / "combined"
    session_dir.mkdir(parents=True, exist_ok=True)
    runs = executor.run_models_side_by_side(
        ModelComparison(
            [("default", original), ("tuned", final)], search.function, search.inputs_path,
            session_dir, search.device, 2 * search.rounds, search.repetitions,
        )
    )  # fmt: skip
    if not runs["default"].ok or not runs["tuned"].ok:
        return None, runs["tuned"].reason or runs["default"].reason
    matches, why = outputs_match(runs["default"].outputs, runs["tuned"].outputs)
    if not matches:
        return None, f"outputs differ from the default's ({why})"
    return _speedup(runs["default"].times_ms, runs["tuned"].times_ms, search.repetitions), ""


def apply_command(
    model_path: Path, target: Target, flags_file: Path | None, spec_path: Path | None
) -> str:
    """Return the one iree-compile command that builds the tuned model."""
    words = [
        "iree-compile", str(model_path), *target.target_flags(),
        *([f"@{flags_file}"] if flags_file is not None else []),
        *(target.spec_flags(spec_path) if spec_path is not None else []),
        "-o", "model.vmfb",
    ]  # fmt: skip
    return " ".join(shlex.quote(word) for word in words)
