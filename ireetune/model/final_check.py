"""The final check of a model run: the kept specs linked, timed against the default, harm dropped."""

from __future__ import annotations

import shutil
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ireetune.core.errors import IreetuneError
from ireetune.decision.rules import clears_threshold
from ireetune.decision.stats import SpeedupEstimate
from ireetune.model.outputs import outputs_match
from ireetune.model.prepare import ModelUnderTuning
from ireetune.model.select import (
    MODEL_RULE,
    find_harmful,
    is_faster,
    model_speedup,
    time_pair_until_decided,
)
from ireetune.model.timing import ModelComparison, ModelRun, write_session_times
from ireetune.spec.link import link_spec_files

if TYPE_CHECKING:
    from ireetune.executor.base import Executor

DROPPED_NOTE = "dropped specs that slowed the linked model: "


@dataclass(frozen=True)
class FinalTiming:
    """How the final check times: each comparison's first batch is twice `rounds` rounds, and the
    search for harmful specs tries no more removals once one more trial and the last
    comparison would end past `ends_at` (on `time.monotonic()`; None: no limit). An undecided
    comparison may add batches beyond the usual few while they end by `extend_until`
    (`time_pair_until_decided`; None: the usual few)."""

    rounds: int
    ends_at: float | None = None
    extend_until: float | None = None


@dataclass(frozen=True)
class FinalCheck:
    """What the final check found: the tuned spec (None when none is kept), the figures of one
    fresh side-by-side session, and the dispatches whose specs it dropped."""

    tuned_spec: Path | None
    default_ms: float
    tuned_ms: float
    estimate: SpeedupEstimate | None
    dropped: tuple[str, ...] = ()


def check_final_set(
    executor: Executor,
    model: ModelUnderTuning,
    run_dir: Path,
    accepted: dict[str, Path],
    default_vmfb: Path,
    timing: FinalTiming,
    notes: list[str],
) -> FinalCheck:
    """Link the kept specs, check the tuned model against the default side by side, drop harm.

    Every subset that is kept has been measured: each trial (the current set less one spec,
    or the default model when one spec is left) is timed side by side with the current set.
    """
    final_dir = run_dir / "final"
    # A decide phase cut short is run again by `ireetune continue`.
    final_dir.mkdir(exist_ok=True)
    counter = iter(range(10_000))
    binaries: dict[tuple[str, ...], Path | None] = {(): default_vmfb}

    def binary_of(names: Sequence[str]) -> Path | None:
        key = tuple(names)
        if key not in binaries:
            label = f"set{next(counter)}"
            spec = final_dir / f"{label}_spec.mlir"
            link_spec_files([accepted[n] for n in names], spec)
            binary = final_dir / f"{label}.vmfb"
            binaries[key] = None if model.compile(spec, binary) else binary
        return binaries[key]

    def compare(first: Path, second: Path) -> dict[str, ModelRun]:
        # Each comparison's times replace the last's in the folder: the figures reported are
        # the last comparison's.
        comparison = ModelComparison(
            [("default", first), ("tuned", second)], model.function, model.inputs_path,
            final_dir, model.device, 2 * timing.rounds,
        )  # fmt: skip
        runs = time_pair_until_decided(executor, comparison, timing.extend_until)
        write_session_times(comparison, runs)
        return runs

    names = list(accepted)
    started = time.monotonic()
    dropped: list[str] = []
    if names:
        full = binary_of(names)
        full_runs = compare(default_vmfb, full) if full is not None else None
        # A trial costs about what the full set's compile and comparison did.
        trial_s = time.monotonic() - started
        tried: list[str] = []

        def may_try() -> bool:
            ends_at = timing.ends_at
            return ends_at is None or time.monotonic() + 2 * trial_s <= ends_at

        if (
            full_runs is None
            or not full_runs["tuned"].ok
            or not is_faster(full_runs["default"].times_ms, full_runs["tuned"].times_ms, MODEL_RULE)
        ):

            def better_without(current: Sequence[str], trial: Sequence[str]) -> bool:
                tried.append(next(name for name in current if name not in trial))
                current_binary = binary_of(current)
                if current_binary is None:
                    return True
                trial_binary = binary_of(trial)
                if trial_binary is None:
                    return False
                runs = compare(current_binary, trial_binary)
                if not runs["tuned"].ok:
                    return False
                if not runs["default"].ok:
                    return True
                return is_faster(runs["default"].times_ms, runs["tuned"].times_ms, MODEL_RULE)

            dropped = find_harmful(names, better_without, may_try)
            if dropped:
                notes.append(DROPPED_NOTE + ", ".join(dropped))
            if len(tried) < len(names):
                notes.append(
                    f"the search for harmful specs stopped at the time budget: {len(tried)} of "
                    f"{len(names)} specs tried, the rest kept for the last comparison"
                )
            names = [n for n in names if n not in dropped]
    final = binary_of(names) if names else None
    if final is None:
        alone = ModelComparison(
            [("default", default_vmfb)], model.function, model.inputs_path, final_dir,
            model.device, 2 * timing.rounds,
        )  # fmt: skip
        runs = executor.run_models_side_by_side(alone)
        write_session_times(alone, runs)
        default_ms = statistics.median(runs["default"].times_ms)
        notes.append("no dispatch spec made the model faster; no tuned spec written")
        return FinalCheck(None, default_ms, default_ms, None, tuple(dropped))
    # The figures reported are one fresh side-by-side session of default and the final set.
    runs = compare(default_vmfb, final)
    matches, why = outputs_match(runs["default"].outputs, runs["tuned"].outputs)
    if not matches:
        raise IreetuneError(
            f"the tuned model's outputs differ from the default's ({why}); no spec written"
        )
    estimate = model_speedup(runs["default"].times_ms, runs["tuned"].times_ms)
    if not clears_threshold(estimate, MODEL_RULE):
        default_ms = statistics.median(runs["default"].times_ms)
        notes.append(
            "the linked spec did not make the model faster in the final side-by-side check "
            f"({estimate.describe() if estimate else 'no timing'}); no tuned spec written"
        )
        return FinalCheck(None, default_ms, default_ms, estimate, tuple(dropped))
    tuned_spec = run_dir / "tuned_spec.mlir"
    shutil.copyfile(final.with_name(final.name.removesuffix(".vmfb") + "_spec.mlir"), tuned_spec)
    return FinalCheck(
        tuned_spec,
        statistics.median(runs["default"].times_ms),
        statistics.median(runs["tuned"].times_ms),
        estimate,
        tuple(dropped),
    )
