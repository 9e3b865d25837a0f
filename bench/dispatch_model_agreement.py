"""Measure how well a candidate's speedup alone predicts its speedup in the whole model.

Reads finished model runs (`ireetune tune` folders): each kept candidate's speedup in its own
dispatch's tuning session (model_run.json: default and candidate ms, side by side) and the
speedup of the model variant that holds that candidate alone (selection/trials.json, timed
beside the default model). Prints, per run and pooled, the pairs, their Spearman rank
correlation and the share of candidates "faster alone, not in the model" (above 1x alone, at or
under 1x in the model), then one JSON line for docs/benchmarks.md.

Where the selection profiled its variants (`in_model_ratios` in trials.json: the candidate's
dispatch time inside the variant over the default's, model/variant_profiles.py), the same
figures are printed for that in-model dispatch speedup (1 / ratio) against the model's
(`profiled`): how well a dispatch's time measured inside the model predicts the model.

And, per tuned dispatch, how far it ran from the model's fastest dispatches
(model/headroom.py: its efficiency against the ceilings they set) against its best candidate's
speedup alone (`headroom`): how well the hot set's weight predicts what tuning finds. A
profile.json written before it kept each dispatch's work has it measured from the dispatch's
benchmark in the run folder.

And what the selection could have reached with the candidates it had (`ceiling`): each tuned
dispatch's share of the profiled model time times the cut of its fastest candidate inside the
model (the lowest `in_model_ratios` of any variant), summed. It bounds what any choice among
those candidates gives the model; a run far under the 1.15x goal there is limited by its
candidates, not by the selection.

With the machine's measured peaks (`--peak-gflops`, `--peak-gbs`: a loop of independent FMAs and
a copy on every core, outside IREE), the `roofline` bound: the share of the profiled model time
that would go if every dispatch whose work is known ran at the larger of its compute and
bandwidth bounds, and the model's speedup that gives. No configuration reaches it; a goal above
it is out of reach for dispatch tuning on that machine.

    python bench/dispatch_model_agreement.py runs/zoo/*/model_* [--peak-gflops G --peak-gbs B]
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
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
    # The candidate's dispatch speedup inside its variant's profile (None: not profiled).
    profiled: float | None = None


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
        ratios = list((trial.get("in_model_ratios") or {}).values())
        profiled = 1.0 / ratios[0] if len(ratios) == 1 and ratios[0] > 0 else None
        if inside in alone:
            pairs.append(Pair(run_dir.name, inside, alone[inside], trial["speedup"], profiled))
    return pairs


def read_headroom(run_dir: Path) -> list[tuple[float, float]]:
    """Return each tuned dispatch's efficiency in its profile and its best kept candidate's
    speedup alone (model_run.json), for the dispatches whose efficiency is known."""
    from dataclasses import replace

    from ireetune.core.errors import IreetuneError
    from ireetune.flows.model.state import read_hot_set
    from ireetune.model.headroom import efficiencies
    from ireetune.model.kin import read_problem
    from ireetune.model.static_rank import problem_work

    profiles = []
    for profile in read_hot_set(run_dir).ranked:
        if profile.tunable and not (profile.flops or profile.bytes):
            try:
                flops, moved = problem_work(read_problem(profile.benchmark_path))
            except (IreetuneError, OSError):
                continue
            profile = replace(profile, flops=flops, bytes=moved)
        profiles.append(profile)
    found = efficiencies(profiles)
    state = json.loads((run_dir / "model_run.json").read_text())
    pairs = []
    for name, dispatch in state.get("dispatches", {}).items():
        speedups = [
            kept["default_ms"] / kept["candidate_ms"]
            for kept in dispatch.get("candidates", [])
            if kept.get("default_ms") and kept.get("candidate_ms")
        ]
        if speedups and name in found:
            pairs.append((found[name], max(speedups)))
    return pairs


def headroom_agreement(pairs: list[tuple[float, float]]) -> dict[str, object]:
    """Return the pairs' count, the rank correlation of efficiency and best speedup alone
    (negative where the slow dispatches gain most), and the median best speedup of the dispatches
    under 0.3 and over 0.7."""
    low = sorted(s for e, s in pairs if e < 0.3)
    high = sorted(s for e, s in pairs if e > 0.7)
    rho = (
        spearmanr([e for e, _ in pairs], [s for _, s in pairs]).statistic
        if len(pairs) > 2
        else None
    )
    return {
        "pairs": len(pairs),
        "spearman": None if rho is None or rho != rho else round(float(rho), 3),
        "median_below_0.3": round(statistics.median(low), 3) if low else None,
        "median_above_0.7": round(statistics.median(high), 3) if high else None,
    }


def read_ceiling(run_dir: Path) -> dict[str, object] | None:
    """Return the share of the profiled model time the fastest in-model candidate of each
    profiled dispatch would cut, all together, and how many dispatches have one faster; None
    where the selection profiled no variant."""
    trials_path = run_dir / "selection" / "trials.json"
    profile_path = run_dir / "profile.json"
    if not trials_path.is_file() or not profile_path.is_file():
        return None
    fastest: dict[str, float] = {}
    for trial in json.loads(trials_path.read_text()):
        for name, ratio in (trial.get("in_model_ratios") or {}).items():
            fastest[name] = min(fastest.get(name, ratio), ratio)
    if not fastest:
        return None
    profile = json.loads(profile_path.read_text())
    model_ms = profile["model_ms"]
    time_of = {d["name"]: d["total_ms"] for d in profile["dispatches"]}
    cut = sum(time_of.get(name, 0.0) * (1.0 - r) for name, r in fastest.items() if r < 1.0)
    return {
        "profiled": len(fastest),
        "faster": sum(1 for r in fastest.values() if r < 1.0),
        "cut": round(cut / model_ms, 4) if model_ms else None,
    }


def read_roofline(run_dir: Path, peak_gflops: float, peak_gbs: float) -> dict[str, object]:
    """Return the share of the profiled model time over each known dispatch's roofline time
    (its FLOPs at `peak_gflops`, or its operand bytes at `peak_gbs`, whichever is longer), and
    the model's speedup were that time gone."""
    profile = json.loads((run_dir / "profile.json").read_text())
    model_ms = profile["model_ms"]
    over = 0.0
    for dispatch in profile["dispatches"]:
        flops, moved = dispatch.get("flops", 0), dispatch.get("bytes", 0)
        if not dispatch.get("dispatch_ms") or not (flops or moved):
            continue
        bound_ms = max(flops / (peak_gflops * 1e6), moved / (peak_gbs * 1e6))
        over += max(0.0, dispatch["total_ms"] - bound_ms * dispatch["invocations"])
    share = over / model_ms if model_ms else 0.0
    return {
        "over": round(share, 4),
        "at_most": round(1.0 / (1.0 - share), 3) if share < 1 else None,
    }


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


def agreement(
    predicted: list[float], in_model: list[float], faster: str = "faster_alone"
) -> dict[str, float | int | None]:
    """Return the pairs' count, rank correlation, how many are faster by the prediction, and
    how many of those are not faster in the model (keys named after `faster`)."""
    faster_ones = [m for p, m in zip(predicted, in_model, strict=True) if p > 1.0]
    correlation = None
    if len(predicted) > 2:
        rho = spearmanr(predicted, in_model).statistic
        correlation = None if rho != rho else round(float(rho), 3)
    return {
        "pairs": len(predicted),
        "spearman": correlation,
        faster: len(faster_ones),
        f"{faster}_not_in_model": sum(1 for m in faster_ones if m <= 1.0),
    }


def summarise(pairs: list[Pair]) -> dict[str, object]:
    """Return the agreement of the speedups alone with the model's and, where variants were
    profiled, of the in-model dispatch speedups with the model's (`profiled`)."""
    summary: dict[str, object] = dict(
        agreement([p.alone for p in pairs], [p.in_model for p in pairs])
    )
    profiled = [p for p in pairs if p.profiled is not None]
    if profiled:
        summary["profiled"] = agreement(
            [p.profiled for p in profiled if p.profiled is not None],
            [p.in_model for p in profiled],
            "faster_profiled",
        )
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+", help="finished `ireetune tune` folders")
    parser.add_argument("--peak-gflops", type=float, help="the machine's measured FP32 peak")
    parser.add_argument("--peak-gbs", type=float, help="its measured copy bandwidth, GB/s")
    arguments = parser.parse_args()
    peaks = (arguments.peak_gflops, arguments.peak_gbs)
    if (peaks[0] is None) != (peaks[1] is None) or any(p is not None and p <= 0 for p in peaks):
        print("error: give both --peak-gflops and --peak-gbs, each above 0", file=sys.stderr)
        return 2
    everything: list[Pair] = []
    headroom: list[tuple[float, float]] = []
    for run_dir in arguments.runs:
        if not (run_dir / "model_run.json").is_file():
            print(
                f"error: {run_dir} is not a model run folder (no model_run.json)", file=sys.stderr
            )
            return 2
        pairs = read_pairs(run_dir)
        everything += pairs
        headroom += read_headroom(run_dir) if (run_dir / "profile.json").is_file() else []
        ceiling = read_ceiling(run_dir)
        roofline = (
            read_roofline(run_dir, *peaks)
            if peaks[0] and peaks[1] and (run_dir / "profile.json").is_file()
            else None
        )
        print(
            f"{run_dir.name}: {summarise(pairs)}"
            + (f"; ceiling {ceiling}" if ceiling is not None else "")
            + (f"; roofline {roofline}" if roofline is not None else "")
        )
    pooled = summarise(everything)
    if headroom:
        pooled["headroom"] = headroom_agreement(headroom)
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
