"""What a flag search is asked (`ModelFlagSearch`), tried and concluded: one record per flag set,
and the search's result.

Both searches (a whole model, `flags/model_search.py`; one dispatch benchmark,
`flags/dispatch_search.py`) compile the default and every proposed set from the same source
path, sort the binaries by hash (`classify_by_hash`), time the distinct ones side by side with
the default, and let the decision stage's rule pick the winner (`judge_flag_sets`).
"""

from __future__ import annotations

import enum
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ireetune.compile.driver import CompileRequest, CompileStatus
from ireetune.compile.pool import CompileBatch, CompileJob
from ireetune.core.candidate import earlier_binary
from ireetune.core.files import write_text_atomically
from ireetune.core.flag_space import DEFAULT_FLAGS, FlagSet, FlagSpace
from ireetune.core.records import FLAG_TRIALS_FORMAT
from ireetune.decision.rules import CandidateFacts, DecisionRule, pick_winner
from ireetune.decision.stats import SpeedupEstimate
from ireetune.flags.strategy import StrategySettings
from ireetune.model.select import MODEL_RULE

if TYPE_CHECKING:
    from ireetune.executor.base import Executor

TRIALS_FILE_NAME = "trials.json"

# What a flag set's speedups compare: the model rule's statistic (`model_flag_rule`).
FLAG_STATISTIC = MODEL_RULE.statistic


def model_flag_rule(threshold: float) -> DecisionRule:
    """The flag phase's rule: a set must make the whole model, timed on its inputs, faster by
    at least `threshold` (the lower bound of its paired interval) in the mean of the faster half
    of its calls, its typical call not shown slower (the model rule's statistic and guard,
    `model/select.py`), and of the sets that do, the one with the highest lower bound, of that
    interval and of the medians', wins (`rank_value`).

    IREE's calls on the 2-core machine run at two speeds, and a small model's slow calls take
    2-3x its fast ones. A held-out decoder language model's data tiling, 1.31-1.33x by the
    faster halves ([1.306, 1.366], [1.288, 1.379], [1.100, 1.488] in three sessions of 10 rounds
    of 4 calls), read [1.296, 1.428], [0.885, 1.611] and [0.744, 1.770] by the medians, which
    passed it once in three; in its run the medians' confirmation refused all three finalists
    and kept no flags (2026-12-07). A flag set also changes how calls wait for a core, so its
    time can be bimodal (few workgroups, one worker): MobileNet-v2's
    `--iree-llvmcpu-number-of-threads=1` won 2 times in 3 by its medians' point at 4.49x [2.29,
    4.75] over a steady 4.42x [4.20, 4.60], then ran slower than the steady set; ranked by the
    lower of the two bounds, its medians' 2.29 puts it behind the steady set's 4.20, however
    fast its faster half."""
    return DecisionRule(
        threshold=threshold, real_input_decides=True, rank_by_low=True, statistic=FLAG_STATISTIC
    )


FLAG_RULE = model_flag_rule(MODEL_RULE.threshold)


@dataclass(frozen=True)
class ModelFlagSearch:
    """What the flag phase needs: the model, how to compile and run it, and how hard to search.

    `base_flags` go on every compile (the target's, the user's `--flags`); proposals touching an
    option the user fixed are left out, since a repeated option is a compile error. The search
    starts no new compile or timing once its budget (on `clock`) is spent: `time_budget_s`, or
    else the flag phase's share of the whole run's `run_budget_s` (core/budget.py).
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
    # At most this many sets are compiled (the seeds first).
    max_sets: int = 48
    confirm_top: int = 3
    jobs: int = 2
    compile_timeout_s: float = 1200.0
    rule: DecisionRule = FLAG_RULE
    time_budget_s: float | None = None
    run_budget_s: float | None = None
    strategy: StrategySettings = field(default_factory=StrategySettings)
    clock: Callable[[], float] = time.monotonic


class TrialStatus(enum.Enum):
    """How far a flag set got."""

    DEFAULT = "default"  # The compiler's defaults: what every set is timed against.
    NO_EFFECT = "no-effect"  # Binary identical to the default's: not timed.
    DUPLICATE = "duplicate"  # Binary identical to an earlier set's: not timed again.
    COMPILE_FAILED = "compile-failed"
    RUN_FAILED = "run-failed"
    TIMED = "timed"


@dataclass(frozen=True)
class FlagTrial:
    """One flag set: its binary, its timings against the default, and the rule's verdict.

    `first` is the speedup from the search's last side-by-side session of the set (its deepest
    rung); `confirmed` the one from the fresh confirmation session of the contenders, which
    decides.
    """

    trial_id: int
    flag_set: FlagSet
    status: TrialStatus
    reason: str = ""
    binary_hash: str = ""
    compile_s: float = 0.0
    times_ms: tuple[float, ...] = ()
    first: SpeedupEstimate | None = None
    confirmed: SpeedupEstimate | None = None
    outputs_match: bool | None = None
    verdict: str = ""


@dataclass(frozen=True)
class FlagSearchResult:
    """The winning flag set (the default when none won) and every trial."""

    winner: FlagSet
    estimate: SpeedupEstimate | None
    trials: tuple[FlagTrial, ...]
    rule: DecisionRule
    trials_path: Path
    notes: tuple[str, ...] = field(default_factory=tuple)
    # The winner's binary (compiled from the same source as the default); None for the default.
    winner_binary: Path | None = None
    # The device's runtime options to run the winner with (`runtime_flags.txt`), and what they
    # were worth over the runtime's defaults on the winner's binary.
    runtime_flags: tuple[str, ...] = ()
    runtime_estimate: SpeedupEstimate | None = None

    @property
    def improved(self) -> bool:
        return self.winner != DEFAULT_FLAGS


def classify_by_hash(trials: Sequence[FlagTrial]) -> list[FlagTrial]:
    """Mark sets whose binary equals the default's (no effect) or an earlier set's (duplicate).

    Trial 0 is the default; trials that did not compile keep their status.
    """
    assert trials and trials[0].status is TrialStatus.DEFAULT
    seen: dict[str, int] = {trials[0].binary_hash: 0}
    classified = [trials[0]]
    for trial in trials[1:]:
        timed = trial.status is TrialStatus.TIMED
        earlier = earlier_binary(trial.binary_hash, trial.trial_id, seen) if timed else None
        if earlier is None:
            classified.append(trial)
        elif earlier == 0:
            reason = "binary identical to the default's: the flags change nothing here"
            classified.append(replace(trial, status=TrialStatus.NO_EFFECT, reason=reason))
        else:
            reason = f"binary identical to trial {earlier}'s"
            classified.append(replace(trial, status=TrialStatus.DUPLICATE, reason=reason))
    return classified


def choose_flag_contenders(
    trials: Sequence[FlagTrial], rule: DecisionRule, limit: int
) -> list[int]:
    """Return up to `limit` timed sets faster than the threshold in the first session, fastest
    first.

    The first session only pre-selects, by its point estimate (with a handful of rounds on a
    loaded machine a real 1.6x can have an interval reaching below 1); the confirmation session,
    measured afresh, decides by the rule's interval. That also keeps the winner's figure free of
    the selection's optimism.
    """
    speedups = {t.trial_id: first_speedup(t) for t in trials}
    passing = [
        i for i, speedup in speedups.items() if speedup is not None and speedup > rule.threshold
    ]
    passing.sort(key=lambda i: (-(speedups[i] or 0.0), i))
    return passing[: max(0, limit)]


def first_speedup(trial: FlagTrial | None) -> float | None:
    """Return a trial's speedup in its last session, if it was timed there and its outputs
    matched the default's."""
    if trial is None or trial.status is not TrialStatus.TIMED or trial.outputs_match is False:
        return None
    return trial.first.speedup if trial.first is not None else None


def judge_flag_sets(
    trials: Sequence[FlagTrial], contenders: Sequence[int], rule: DecisionRule
) -> tuple[list[FlagTrial], int | None]:
    """Apply the decision stage's rule to the contenders' confirmed speedups and output checks.

    Every timed set gets a verdict: the contenders the rule's own (`winner`, `beaten`,
    `rejected` with its reason); the others `rejected` with the first session's figure.
    """
    # The interval goes where the rule reads it: real inputs (a whole model on its inputs) or
    # the dispatch benchmark.
    facts = [
        CandidateFacts(
            t.trial_id,
            dispatch=None if rule.real_input_decides else t.confirmed,
            real_input=t.confirmed if rule.real_input_decides else None,
            outputs_match=t.outputs_match,
            # Outputs that differ, or that could not be compared, say why in the trial's reason.
            output_reason="" if t.outputs_match is True else t.reason,
            confirmed=True,
        )
        for t in trials
        if t.trial_id in contenders
    ]
    decision = pick_winner(facts, list(contenders), rule)
    judged: list[FlagTrial] = []
    for trial in trials:
        judgement = decision.judgements.get(trial.trial_id)
        if judgement is not None:
            judged.append(
                replace(
                    trial, verdict=judgement.verdict.value, reason=judgement.reason or trial.reason
                )
            )
        elif trial.status is TrialStatus.TIMED:
            judged.append(
                replace(trial, verdict="rejected", reason=_why_not_confirmed(trial, rule))
            )
        else:
            judged.append(trial)
    return judged, decision.winner


def _why_not_confirmed(trial: FlagTrial, rule: DecisionRule) -> str:
    if trial.reason:
        return trial.reason
    if trial.first is None:
        return "no timing"
    if trial.first.speedup > rule.threshold:
        return "faster in the first session, but not among the fastest confirmed"
    return f"first session {trial.first.describe()}: not faster than {rule.threshold:g}x"


def trial_row(trial: FlagTrial) -> dict[str, object]:
    """Render one trial as the JSON row of trials.json and the report."""

    def interval(estimate: SpeedupEstimate | None) -> dict[str, float] | None:
        if estimate is None:
            return None
        return {
            "speedup": estimate.speedup, "low": estimate.low, "high": estimate.high,
            "rounds": estimate.rounds, "default_ms": estimate.baseline_ms,
            "flags_ms": estimate.candidate_ms,
        }  # fmt: skip

    return {
        "trial": trial.trial_id,
        "flags": list(trial.flag_set.flags),
        "status": trial.status.value,
        "binary_hash": trial.binary_hash,
        "compile_s": round(trial.compile_s, 3),
        "times_ms": list(trial.times_ms),
        "first": interval(trial.first),
        "confirmed": interval(trial.confirmed),
        "outputs_match": trial.outputs_match,
        "verdict": trial.verdict,
        "reason": trial.reason,
    }


def write_trials(
    path: Path, trials: Sequence[FlagTrial], rule: DecisionRule, extra: Mapping[str, object]
) -> None:
    """Write every trial (flags, hash, times, intervals, verdict) to `path` as JSON."""
    payload = {
        "format": FLAG_TRIALS_FORMAT,
        "rule": rule.name,
        **extra,
        "trials": [trial_row(t) for t in trials],
    }
    write_text_atomically(path, json.dumps(payload, indent=2) + "\n")


def describe_trial(trial: FlagTrial) -> str:
    """Render one trial as a report line."""
    estimate = trial.confirmed or trial.first
    timing = estimate.describe() if estimate is not None else "-"
    verdict = trial.verdict or trial.status.value
    reason = f" ({trial.reason})" if trial.reason else ""
    return f"{verdict:<14} {timing:<26} {trial.flag_set.label}{reason}"


def compile_flag_sets(
    executor: Executor,
    source: Path,
    base_flags: tuple[str, ...],
    flag_sets: Mapping[int, FlagSet],
    folder: Path,
    jobs: int,
    timeout_s: float,
) -> list[FlagTrial]:
    """Compile `source` on `executor` once per flag set (by trial id) into
    `folder/<id>.vmfb`; trial 0 is the default.

    Every set is compiled from the same source path: a binary's hash depends on it (locations
    are embedded), so only binaries of one path compare.
    """
    folder.mkdir(parents=True, exist_ok=True)
    compile_jobs = [
        CompileJob(
            trial_id,
            CompileRequest(
                source, folder / f"{trial_id}.vmfb", target_flags=base_flags,
                phase_flags=flag_set.flags, reproducer_path=folder / f"{trial_id}_reproducer.mlir",
            ),
            folder / f"{trial_id}_compile.log",
        )
        for trial_id, flag_set in flag_sets.items()
    ]  # fmt: skip
    batch = CompileBatch(compile_jobs, jobs, timeout_s)
    outcomes = {o.candidate_id: o for o in executor.compile(batch)}
    trials = []
    for trial_id, flag_set in flag_sets.items():
        outcome = outcomes[trial_id]
        status = (
            TrialStatus.COMPILE_FAILED
            if outcome.status is not CompileStatus.COMPILED
            else TrialStatus.DEFAULT
            if trial_id == 0
            else TrialStatus.TIMED
        )
        trials.append(
            FlagTrial(
                trial_id, flag_set, status, outcome.reason, outcome.binary_hash, outcome.seconds
            )
        )
    return trials


def remove_losing_binaries(folder: Path, trials: Sequence[FlagTrial], keep: int | None) -> str:
    """Delete the binaries in `folder` of every set but the default (trial 0) and `keep` (the
    winner), once the phase is decided; return a note saying what went, or "" when nothing did.

    A model's flag phase compiles up to `--max-flag-sets` whole models: 0.7 GB for MobileNet-v2,
    3.3 GB for a small encoder, which filled a disk in a few runs. The trials file keeps each
    set's flags and binary hash, so any set can be compiled again; its compile log and crash
    reproducer stay.
    """
    kept = {0, keep}
    freed, removed = 0, 0
    for trial in trials:
        path = folder / f"{trial.trial_id}.vmfb"
        if trial.trial_id in kept or not path.is_file():
            continue
        freed += path.stat().st_size
        path.unlink()
        removed += 1
    if not removed:
        return ""
    return (
        f"removed the binaries of {removed} flag set(s) that were not kept ({freed / 1e6:.0f} MB); "
        f"{TRIALS_FILE_NAME} keeps their flags and binary hashes"
    )
