"""Measure how well a candidate's speedup alone predicts its speedup in the whole model.

Reads finished model runs (`ireetune tune` folders): each kept candidate's speedup in its own
dispatch's tuning session (model_run.json: default and candidate ms, side by side) and the
speedup of the model variant that holds that candidate alone (selection/trials.json, timed
beside the default model). Prints, per run and pooled, the pairs, their Spearman rank
correlation and the share of candidates "faster alone, not in the model" (above 1x alone, at or
under 1x in the model), then one JSON line for docs/benchmarks.md.

    python bench/dispatch_model_agreement.py runs/zoo/*/model_*
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

from scipy.stats import spearmanr


@dataclass(frozen=True)
class Pair:
    """One candidate: its speedup alone (dispatch session) and in the model (its variant)."""

    run: str
    spec: str
    alone: float
    in_model: float


def read_pairs(run_dir: Path) -> list[Pair]:
    """Return the pairs of one model run (none when it tried no candidate in the model)."""
    state = json.loads((run_dir / "model_run.json").read_text())
    trials_path = run_dir / "selection" / "trials.json"
    trials = json.loads(trials_path.read_text()) if trials_path.is_file() else []
    alone: dict[str, float] = {}
    for dispatch in state.get("dispatches", {}).values():
        for kept in dispatch.get("candidates", []):
            if kept.get("default_ms") and kept.get("candidate_ms"):
                alone[kept["spec"]] = kept["default_ms"] / kept["candidate_ms"]
    pairs = []
    for trial in trials:
        # Single-candidate variants only: `dXcY` (the joint `best`, `rankN` and `combined` hold
        # several; `best` of one tuned dispatch holds one, its first candidate's, tried again).
        joint = trial["variant"] in ("best", "combined") or len(trial["specs"]) != 1
        if joint or trial.get("speedup") is None:
            continue
        (spec,) = trial["specs"]
        inside = spec_inside_run(spec, run_dir)
        if inside in alone:
            pairs.append(Pair(run_dir.name, inside, alone[inside], trial["speedup"]))
    return pairs


def spec_inside_run(spec: str, run_dir: Path) -> str:
    """Return a variant's spec path relative to its run folder. A run given a relative
    `--output-dir` records its paths relative to where it ran, which is not known here: such a
    path is cut after a part that names the run folder, where the rest lies in the folder."""
    path = Path(spec)
    if not path.is_absolute():
        parts = path.parts
        for cut in range(len(parts) - 1, -1, -1):
            rest = Path(*parts[cut + 1 :]) if cut + 1 < len(parts) else None
            if parts[cut] == run_dir.name and rest is not None and (run_dir / rest).exists():
                return str(rest)
    return str(path.resolve().relative_to(run_dir.resolve()))


def summarise(pairs: list[Pair]) -> dict[str, float | int | None]:
    """Return the pairs' count, rank correlation and share faster alone, not in the model."""
    faster_alone = [p for p in pairs if p.alone > 1.0]
    correlation = None
    if len(pairs) > 2:
        rho = spearmanr([p.alone for p in pairs], [p.in_model for p in pairs]).statistic
        correlation = None if rho != rho else round(float(rho), 3)
    return {
        "pairs": len(pairs),
        "spearman": correlation,
        "faster_alone": len(faster_alone),
        "faster_alone_not_in_model": sum(1 for p in faster_alone if p.in_model <= 1.0),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+", help="finished `ireetune tune` folders")
    arguments = parser.parse_args()
    everything: list[Pair] = []
    for run_dir in arguments.runs:
        if not (run_dir / "model_run.json").is_file():
            print(
                f"error: {run_dir} is not a model run folder (no model_run.json)", file=sys.stderr
            )
            return 2
        pairs = read_pairs(run_dir)
        everything += pairs
        print(f"{run_dir.name}: {summarise(pairs)}")
    pooled = summarise(everything)
    print(f"pooled: {pooled}")
    print(
        json.dumps(
            {
                "date": datetime.date.today().isoformat(),
                "machine": platform.processor() or platform.machine(),
                **pooled,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
