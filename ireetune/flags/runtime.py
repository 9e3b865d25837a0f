"""The device's runtime options: searched on the flag phase's winning binary, written beside the
compile flags (`runtime_flags.txt`), and handed to every timing process that runs the model.

The runtime reads its options when a device is created, and one process can hold several
devices, each created under its own options (`model/timing.RuntimeVariants`: every option the
sets change is spelled back to the runtime's default before each set, since the flags are
global and sticky). So the runtime's defaults and every set are timed side by side in one
process, each on a device of its own, interleaved round by round with the order rotating and a
pause before each (a spinning worker pool parks first); a set's speedup pairs its rounds with
the defaults' rounds of the same session, as every other verdict of the flag phase. A set of
worker counts whose device runs as many task workers as the defaults' (a count at or above the
core count) changes nothing and is not timed; a set whose outputs differ from the defaults' is
dropped. The sets the first session put above the rule's threshold (the best `confirm_top`)
are timed again in a second, fresh session against the defaults, which decides: a set is kept
when that interval lies above the threshold; the kept set the rule ranks first wins (the
highest lower bound, as among the compile flag sets). No session starts once the
budget is spent.

The result is written as `runtime_flags.txt` (`flags/file.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ireetune.core.errors import IreetuneError
from ireetune.core.flag_space import RuntimeOption
from ireetune.decision.rules import DecisionRule, rank_value
from ireetune.decision.stats import Basis, SpeedupEstimate, estimate_speedup, split_rounds
from ireetune.model.timing import (
    ModelComparison,
    ModelRun,
    RuntimeVariants,
    write_session_times,
)

if TYPE_CHECKING:
    from ireetune.executor.base import Executor
    from ireetune.flags.strategy import Budget
    from ireetune.flags.trials import ModelFlagSearch

RuntimeSet = tuple[str, ...]

# The worker-count option: a set of it alone changes nothing when its device runs as many
# workers as the defaults'.
_WORKER_COUNT = "--task_topology_max_group_count="
_SPIN = "--task_worker_spin_us="
# The pause before each set's calls in a round: at least this, and several times the longest
# spin of the sets timed (a pool that spins for new work parks before the next set runs).
MIN_PAUSE_S = 0.02
SPINS_PER_PAUSE = 4
# The model id of the runtime's defaults in a session.
_DEFAULTS = "defaults"


@dataclass(frozen=True)
class RuntimeTrial:
    """One runtime flag set on the winning binary: its speedup over the runtime's defaults.

    `estimate` decides (the second session's for a set confirmed, else the first's); `first` is
    the first session's, where the set was timed beside every other.
    """

    flags: RuntimeSet
    workers: int
    estimate: SpeedupEstimate | None
    verdict: str
    first: SpeedupEstimate | None = None
    confirmed: bool = False


@dataclass(frozen=True)
class RuntimeFlagResult:
    """The runtime flags to use (empty: the runtime's defaults) and every set tried."""

    flags: RuntimeSet = ()
    estimate: SpeedupEstimate | None = None
    trials: tuple[RuntimeTrial, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)


def propose_runtime_sets(options: Sequence[RuntimeOption]) -> list[RuntimeSet]:
    """Return each option's values alone (the set is small: no combinations)."""
    return [(f"{option.name}={value}",) for option in options for value in option.values]


def spell_runtime_defaults(options: Sequence[RuntimeOption]) -> RuntimeSet:
    """Return every option at the runtime's default (`--task_topology_favor=` for an empty
    one), parsed before each set so that a device never inherits another set's flags."""
    return tuple(f"{option.name}={option.default}" for option in options)


def choose_pause_s(sets: Sequence[RuntimeSet]) -> float:
    """Return the pause before each set's calls: several times the longest spin of `sets`."""
    spins_us = [float(f.removeprefix(_SPIN)) for s in sets for f in s if f.startswith(_SPIN)]
    return max(MIN_PAUSE_S, SPINS_PER_PAUSE * max(spins_us, default=0.0) / 1e6)


def search_runtime_flags(
    executor: Executor, search: ModelFlagSearch, binary: Path, work_dir: Path, budget: Budget
) -> RuntimeFlagResult:
    """Time `binary` under the runtime's defaults and every runtime set of the search's space
    side by side in one process, confirm the best in a second; return the best set whose
    confirmed interval clears the rule."""
    candidates = propose_runtime_sets(search.space.runtime)
    if not candidates:
        return RuntimeFlagResult()
    if budget.spent():
        return RuntimeFlagResult(notes=("time budget spent: runtime defaults kept",))
    work_dir.mkdir(parents=True, exist_ok=True)
    first = _time_side_by_side(
        executor, search, binary, work_dir / "session_1", candidates, search.rounds
    )
    trials = [_judge(flags, first[flags], first[()], search, False) for flags in candidates]
    contenders = sorted(
        (t for t in trials if t.first is not None and t.first.speedup > search.rule.threshold),
        key=lambda t: t.first.speedup if t.first else 0.0,
        reverse=True,
    )[: max(0, search.confirm_top)]
    notes: tuple[str, ...] = ()
    if contenders and budget.spent():
        notes = (f"time budget spent: {len(contenders)} runtime set(s) not confirmed",)
        trials = [
            RuntimeTrial(t.flags, t.workers, t.estimate, "not confirmed: time budget spent", t.first)
            if t in contenders
            else t
            for t in trials
        ]  # fmt: skip
    elif contenders:
        sets = [t.flags for t in contenders]
        second = _time_side_by_side(
            executor, search, binary, work_dir / "session_2", sets, max(2 * search.rounds, 10)
        )
        confirmed = {
            t.flags: replace(
                _judge(t.flags, second[t.flags], second[()], search, True),
                first=t.first,
                confirmed=True,
            )
            for t in contenders
        }
        trials = [confirmed.get(t.flags, t) for t in trials]
    best = best_kept(trials, search.rule)
    if best is None or best.estimate is None:
        return RuntimeFlagResult(trials=tuple(trials), notes=notes)
    return RuntimeFlagResult(
        best.flags, best.estimate, tuple(trials),
        (*notes, f"runtime flags {' '.join(best.flags)}: {best.estimate.describe()}"),
    )  # fmt: skip


def best_kept(trials: Sequence[RuntimeTrial], rule: DecisionRule) -> RuntimeTrial | None:
    """Return the kept set the rule ranks first (the flag phase's rule: the highest lower bound,
    `model_flag_rule`), or None when none was kept."""
    kept = [t for t in trials if t.verdict == "kept" and t.estimate is not None]
    return max(kept, key=lambda t: rank_value(t.estimate, rule), default=None)


def _judge(
    flags: RuntimeSet, run: ModelRun, default: ModelRun, search: ModelFlagSearch, confirm: bool
) -> RuntimeTrial:
    """Return a set's trial from one session: its paired estimate and the rule's verdict (a
    first session never keeps: only a confirmed interval does). The estimate compares medians,
    not the flag rule's faster halves: a runtime option changes how calls wait, which is what
    the slow calls are."""
    if not run.ok:
        dropped = run.reason.startswith(("skipped:", "outputs differ"))
        verdict = run.reason if dropped else f"failed to run: {run.reason}"
        return RuntimeTrial(flags, run.workers, None, verdict)
    repetitions = max(1, search.repetitions)
    estimate = estimate_speedup(
        split_rounds(default.times_ms, repetitions),
        split_rounds(run.times_ms, repetitions),
        Basis.MODEL,
    )
    clears = estimate is not None and estimate.low > search.rule.threshold
    verdict = "kept" if confirm and clears else "rejected"
    return RuntimeTrial(flags, run.workers, estimate, verdict, None if confirm else estimate)


def _time_side_by_side(
    executor: Executor,
    search: ModelFlagSearch,
    binary: Path,
    session_dir: Path,
    sets: Sequence[RuntimeSet],
    rounds: int,
) -> dict[RuntimeSet, ModelRun]:
    """Time the binary under the defaults and each set, each on a device of its own, side by
    side in one process, keeping the raw times in the session's folder; return each one's run
    by its set (the defaults': ())."""
    session_dir.mkdir(parents=True, exist_ok=True)
    ids = {_DEFAULTS: (), **{f"set_{index}": flags for index, flags in enumerate(sets, 1)}}
    only_workers = tuple(
        model_id
        for model_id, flags in ids.items()
        if flags and all(flag.startswith(_WORKER_COUNT) for flag in flags)
    )
    variants = RuntimeVariants(
        ids, spell_runtime_defaults(search.space.runtime), _DEFAULTS, only_workers,
        choose_pause_s(sets),
    )  # fmt: skip
    comparison = ModelComparison(
        [(model_id, binary) for model_id in ids], search.function, search.inputs_path,
        session_dir, search.device, rounds, max(1, search.repetitions), runtime_variants=variants,
    )  # fmt: skip
    runs = executor.run_models_side_by_side(comparison)
    write_session_times(comparison, runs)
    if not runs[_DEFAULTS].ok:
        raise IreetuneError(
            f"the model does not run for the runtime search: {runs[_DEFAULTS].reason}"
        )
    return {ids[model_id]: run for model_id, run in runs.items()}


def runtime_row(result: RuntimeFlagResult) -> dict[str, object]:
    """Render the runtime search as the JSON object of trials.json."""
    return {
        "winner": list(result.flags),
        "trials": [
            {
                "flags": list(t.flags),
                "workers": t.workers,
                "speedup": t.estimate.speedup if t.estimate else None,
                "low": t.estimate.low if t.estimate else None,
                "high": t.estimate.high if t.estimate else None,
                "verdict": t.verdict,
                "first_speedup": t.first.speedup if t.first else None,
                "first_low": t.first.low if t.first else None,
                "first_high": t.first.high if t.first else None,
                "confirmed": t.confirmed,
            }
            for t in result.trials
        ],
    }
