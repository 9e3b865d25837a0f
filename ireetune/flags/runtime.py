"""The device's runtime options: searched on the flag phase's winning binary, written beside the
compile flags (`runtime_flags.txt`), and handed to every timing process that runs the model.

The runtime reads its options when the device is created, so one timing process runs under one
set: the sets cannot be interleaved call by call like compiled binaries. Instead the runtime's
defaults and each set get their own process in turn, `passes` times over, each timing the same
binary for the same rounds; a set's speedup pairs its rounds with the defaults' rounds of the
same pass. A set whose process ran with as many task workers as the defaults' (a worker count
at or above the core count) and changes nothing else is skipped. A set is kept when its
interval lies above the rule's threshold; the best kept set wins.

The result is written as `runtime_flags.txt` (`flags/file.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ireetune.core.flag_space import RuntimeOption
from ireetune.decision.stats import Basis, SpeedupEstimate, estimate_speedup, split_rounds
from ireetune.errors import IreetuneError
from ireetune.model.timing import ModelComparison, ModelRun

if TYPE_CHECKING:
    from ireetune.executor.base import Executor
    from ireetune.flags.model_search import ModelFlagSearch
    from ireetune.flags.strategy import Budget

# Each set is timed in this many processes, alternating with the runtime's defaults.
PASSES = 2


@dataclass(frozen=True)
class RuntimeTrial:
    """One runtime flag set on the winning binary: its speedup over the runtime's defaults."""

    flags: tuple[str, ...]
    workers: int
    estimate: SpeedupEstimate | None
    verdict: str


@dataclass(frozen=True)
class RuntimeFlagResult:
    """The runtime flags to use (empty: the runtime's defaults) and every set tried."""

    flags: tuple[str, ...] = ()
    estimate: SpeedupEstimate | None = None
    trials: tuple[RuntimeTrial, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)


def propose_runtime_sets(options: Sequence[RuntimeOption]) -> list[tuple[str, ...]]:
    """Return each option's values alone (the set is small: no combinations)."""
    return [(f"{option.name}={value}",) for option in options for value in option.values]


def search_runtime_flags(
    executor: Executor, search: ModelFlagSearch, binary: Path, work_dir: Path, budget: Budget
) -> RuntimeFlagResult:
    """Time `binary` under the runtime's defaults and under each runtime set of the search's
    space, process by process; return the best set whose interval clears the rule."""
    candidates = propose_runtime_sets(search.space.runtime)
    if not candidates:
        return RuntimeFlagResult()
    work_dir.mkdir(parents=True, exist_ok=True)
    times: dict[tuple[str, ...], list[float]] = {}
    workers: dict[tuple[str, ...], int] = {}
    dropped: dict[tuple[str, ...], str] = {}
    sessions = 0
    for _ in range(PASSES):
        for flags in [(), *candidates]:
            if flags in dropped:
                continue
            if budget.spent():
                return RuntimeFlagResult(notes=("time budget spent: runtime defaults kept",))
            sessions += 1
            run = _time_under(executor, search, binary, work_dir / f"session_{sessions}", flags)
            if not run.ok and not flags:
                raise IreetuneError(f"the model does not run for the runtime search: {run.reason}")
            workers[flags] = run.workers
            if not run.ok:
                dropped[flags] = f"failed to run: {run.reason}"
            elif flags and _changes_nothing(flags, run.workers, workers[()]):
                dropped[flags] = f"skipped: {run.workers} workers, as with the defaults"
            else:
                times.setdefault(flags, []).extend(run.times_ms)
    trials = []
    for flags in candidates:
        estimate = None
        if flags in times:
            estimate = estimate_speedup(
                split_rounds(times[()], max(1, search.repetitions)),
                split_rounds(times[flags], max(1, search.repetitions)),
                Basis.MODEL,
            )
        verdict = dropped.get(flags) or (
            "kept" if estimate is not None and estimate.low > search.rule.threshold else "rejected"
        )
        trials.append(RuntimeTrial(flags, workers.get(flags, 0), estimate, verdict))
    kept = [t for t in trials if t.verdict == "kept" and t.estimate is not None]
    best = max(kept, key=lambda t: t.estimate.speedup if t.estimate else 0.0, default=None)
    if best is None:
        return RuntimeFlagResult(trials=tuple(trials))
    return RuntimeFlagResult(
        best.flags, best.estimate, tuple(trials),
        (f"runtime flags {' '.join(best.flags)}: {best.estimate.describe() if best.estimate else ''}",),
    )  # fmt: skip


def _changes_nothing(flags: Sequence[str], workers: int, default_workers: int) -> bool:
    """A worker-count set that ran with the defaults' workers changes nothing (unknown counts,
    0, prove nothing)."""
    return all(flag.startswith("--task_topology_max_group_count=") for flag in flags) and (
        workers == default_workers != 0
    )


def _time_under(
    executor: Executor,
    search: ModelFlagSearch,
    binary: Path,
    work_dir: Path,
    runtime_flags: Sequence[str],
) -> ModelRun:
    """Time the binary alone in one process under the runtime flags."""
    work_dir.mkdir(parents=True, exist_ok=True)
    runs = executor.run_models_side_by_side(
        ModelComparison(
            [("model", binary)], search.function, search.inputs_path, work_dir, search.device,
            search.rounds, max(1, search.repetitions), runtime_flags=tuple(runtime_flags),
        )
    )  # fmt: skip
    return runs["model"]


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
            }
            for t in result.trials
        ],
    }
