"""Time reference programs side by side on real inputs (runtime only: no compiler import)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ireetune.decision.stats import Basis, SpeedupEstimate, estimate_speedup, split_rounds
from ireetune.model.timing import ModelComparison

if TYPE_CHECKING:
    from ireetune.executor.base import Executor

# Repetitions per round when the reference programs are timed side by side.
REAL_INPUT_REPETITIONS = 3


def time_on_real_inputs(
    executor: Executor,
    binaries: Mapping[int, Path],
    inputs_path: Path,
    work_dir: Path,
    device: str,
    rounds: int,
) -> tuple[dict[int, SpeedupEstimate | None], dict[str, object]]:
    """Time the default's (id 0) and the candidates' programs interleaved on real inputs, on
    `executor`.

    Return each candidate's paired speedup (None when it failed to run) and the raw rounds,
    which the split flow stores so that `finish` reaches the same estimate.
    """
    models = [(str(cid), path) for cid, path in sorted(binaries.items())]
    runs = executor.run_models_side_by_side(
        ModelComparison(
            models, "main", inputs_path, work_dir, device, rounds, REAL_INPUT_REPETITIONS
        )
    )
    raw = {
        "repetitions": REAL_INPUT_REPETITIONS,
        "times_ms": {model_id: list(run.times_ms) for model_id, run in runs.items()},
        "errors": {model_id: run.reason for model_id, run in runs.items() if not run.ok},
    }
    return estimates_from_rounds(raw), raw


def estimates_from_rounds(raw: Mapping[str, object]) -> dict[int, SpeedupEstimate | None]:
    """Turn stored side-by-side timings (see `time_on_real_inputs`) into paired speedups."""
    repetitions = int(raw["repetitions"])  # type: ignore[call-overload]
    times = raw["times_ms"]
    assert isinstance(times, dict)
    baseline = split_rounds(times.get("0", []), repetitions)
    estimates: dict[int, SpeedupEstimate | None] = {}
    for model_id, samples in times.items():
        if model_id == "0":
            continue
        candidate = split_rounds(samples, repetitions) if samples else ()
        estimates[int(model_id)] = (
            estimate_speedup(baseline, candidate, Basis.REAL_INPUT)
            if baseline and candidate
            else None
        )
    return estimates
