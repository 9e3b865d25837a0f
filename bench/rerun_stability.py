"""Do verdicts hold? Run the README example several times and compare the verdicts.

Each run is the README's command (`tune-dispatch examples/matmul.mlir --target cpu
--num-candidates 32`) with its own fresh database, so nothing is reused between runs. The
verdicts agree when every run names the same winner, or winners whose deciding speedups are
within 2% of each other, or consistently no winner. Run it on an idle machine: the load average
is printed beside the figures.

Usage: python bench/rerun_stability.py [--runs 5] [--candidates 32] [--out bench/results]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_once(index: int, candidates: int, work: Path) -> dict[str, object]:
    """Run the README example once with a fresh database; return its verdict."""
    out = work / f"run{index}"
    started = time.monotonic()
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "ireetune.cli",
            "tune-dispatch",
            str(ROOT / "examples" / "matmul.mlir"),
            "--target",
            "cpu",
            "--num-candidates",
            str(candidates),
            "--no-progress",
            "--db",
            str(work / f"run{index}.sqlite"),
            "--output-dir",
            str(out),
        ],  # fmt: skip
        capture_output=True,
        text=True,
        check=False,
    )
    if completed.returncode != 0:
        return {"error": completed.stderr.strip().splitlines()[-1:] or ["failed"]}
    (run_dir,) = out.iterdir()
    results = json.loads((run_dir / "results.json").read_text())
    decision = results.get("decision", {})
    winner = decision.get("winner")
    knobs = None
    if winner is not None:
        knobs = next(c["knobs"] for c in results["candidates"] if c["candidate_id"] == winner)
    return {
        "winner": winner,
        "knobs": knobs,
        "speedup": decision.get("speedup"),
        "low": decision.get("low"),
        "high": decision.get("high"),
        "basis": decision.get("basis"),
        "seconds": round(time.monotonic() - started, 1),
        "load_average": os.getloadavg()[0],
    }


def verdicts_agree(verdicts: list[dict[str, object]]) -> bool:
    """Same winner configuration, winners within 2% of each other, or consistently none."""
    if any("error" in v for v in verdicts):
        return False
    winners = [v for v in verdicts if v["winner"] is not None]
    if not winners:
        return True
    if len(winners) != len(verdicts):
        return False
    if all(v["knobs"] == winners[0]["knobs"] for v in winners):
        return True
    speedups = [float(v["speedup"]) for v in winners]  # type: ignore[arg-type]
    return max(speedups) / min(speedups) <= 1.02


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--candidates", type=int, default=32)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    arguments = parser.parse_args()
    arguments.out.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="rerun_") as scratch:
        verdicts = [run_once(i, arguments.candidates, Path(scratch)) for i in range(arguments.runs)]
    agree = verdicts_agree(verdicts)
    report = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "load_average_before": load_before,
        "runs": verdicts,
        "agree": agree,
    }
    (arguments.out / "rerun_stability.json").write_text(json.dumps(report, indent=2) + "\n")
    print("| run | winner | speedup [95% interval] | basis | seconds | load avg |")
    print("|---|---|---|---|---|---|")
    for index, verdict in enumerate(verdicts):
        if "error" in verdict:
            print(f"| {index} | error: {verdict['error']} | | | | |")
            continue
        interval = (
            f"{verdict['speedup']:.3f}x [{verdict['low']:.3f}, {verdict['high']:.3f}]"
            if verdict["winner"] is not None
            else "no winner"
        )
        print(
            f"| {index} | {verdict['winner']} {verdict['knobs'] or ''} | {interval} | "
            f"{verdict['basis'] or ''} | {verdict['seconds']} | {verdict['load_average']:.2f} |"
        )
    print(f"verdicts agree: {'yes' if agree else 'no'} ({arguments.runs} runs)")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
