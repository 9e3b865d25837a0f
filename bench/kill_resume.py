"""Kill a real tuning run with SIGKILL at a random moment, resume it, and check the result.

Each trial starts `tune-dispatch` on a small f32 matmul with a fresh database, SIGKILLs it at a
random moment (compiling, benchmarking, confirming or checking), runs the same command again,
and checks:
- the resumed run completes (exit 0);
- nothing measured before the kill was measured again (its row keeps session and timings);
- no process of the killed run survives (its children die with it);
- the verdict it reached, and whether it came from the killed run's finished campaign (then it
  is the verdict the killed run would have reached: the same facts through the same rule, which
  tests/flows/dispatch/test_resume.py checks exactly); after an earlier kill the rest is measured anew.

Usage: python bench/kill_resume.py [--trials 10] [--seed 1] [--out bench/results]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MATMUL = """
func.func @main(%lhs: tensor<256x384xf32>, %rhs: tensor<384x512xf32>) -> tensor<256x512xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<256x512xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<256x512xf32>) -> tensor<256x512xf32>
  %r = linalg.matmul ins(%lhs, %rhs : tensor<256x384xf32>, tensor<384x512xf32>)
                     outs(%init : tensor<256x512xf32>) -> tensor<256x512xf32>
  return %r : tensor<256x512xf32>
}
"""


def _command(model: Path, output: Path, database: Path) -> list[str]:
    return [
        sys.executable, "-m", "ireetune.cli", "tune-dispatch", str(model), "--num-candidates", "8",
        "--output-dir", str(output), "--db", str(database), "--repetitions", "3",
        "--confirm-rounds", "3", "--min-repetition-time", "0.01", "--jobs", "2", "--no-progress",
    ]  # fmt: skip


def _rows(database: Path) -> dict[str, tuple[str, str, str, str]]:
    if not database.exists():
        return {}
    connection = sqlite3.connect(database, timeout=30)
    try:
        rows = connection.execute("SELECT config, status, session, times_ms, verdict FROM results")
        return {c: (s, session, t, v) for c, s, session, t, v in rows}
    except sqlite3.OperationalError:
        return {}
    finally:
        connection.close()


def _descendants(pid: int) -> set[int]:
    """Return every process whose ancestry includes `pid` (read from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                parents[int(entry.name)] = int(fields[1])
            except (OSError, IndexError, ValueError):
                continue
    found = {pid}
    changed = True
    while changed:
        changed = False
        for child, parent in parents.items():
            if parent in found and child not in found:
                found.add(child)
                changed = True
    return found - {pid}


def _command_line(pid: int) -> str | None:
    """Return a live (non-zombie) process's command line, or None."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    if state == "Z":
        return None
    return " ".join(w.decode(errors="replace") for w in words if w)[:120]


def run_trial(
    index: int, model: Path, work: Path, generator: random.Random, window: tuple[float, float]
) -> dict[str, object]:
    database = work / f"t{index}.sqlite"
    killed_at = generator.uniform(*window)
    process = subprocess.Popen(
        _command(model, work / f"t{index}a", database),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    started = time.monotonic()
    children: set[int] = set()
    while time.monotonic() - started < killed_at and process.poll() is None:
        children |= _descendants(process.pid)
        time.sleep(0.05)
    finished_before_kill = process.poll() is not None
    process.send_signal(signal.SIGKILL)
    process.wait()
    time.sleep(0.5)
    orphans = sorted(
        _command_line(pid)
        for pid in children
        if Path(f"/proc/{pid}").exists() and _command_line(pid) is not None
    )
    before = {c: r for c, r in _rows(database).items() if r[0] in ("measured", "verified", "wrong")}
    resumed = subprocess.run(
        _command(model, work / f"t{index}b", database), capture_output=True, text=True, check=False
    )
    after = _rows(database)
    measured_again = sorted(c for c, r in before.items() if after.get(c, r)[1:3] != r[1:3])
    verdict: dict[str, object] = {}
    if resumed.returncode == 0:
        (run_dir,) = (work / f"t{index}b").iterdir()
        results = json.loads((run_dir / "results.json").read_text())
        decision = results.get("decision") or {}
        verdict = {
            "winner": decision.get("winner"),
            "speedup": decision.get("speedup"),
            "resumed_from_stored_campaign": any("resumed" in n for n in results.get("notes", [])),
            "outcome": results.get("outcome"),
        }
    return {
        "trial": index,
        "killed_after_s": round(killed_at, 1),
        "finished_before_kill": finished_before_kill,
        "rows_before_kill": len(before),
        "resumed_exit": resumed.returncode,
        "resumed_error": resumed.stderr.strip().splitlines()[-1:] if resumed.returncode else [],
        "measured_again": measured_again,
        "orphans": orphans,
        **verdict,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument(
        "--window", type=float, nargs=2, default=(2.0, 25.0), metavar=("FROM_S", "TO_S"),
        help="seconds after the start between which each kill lands (default: 2 25)",
    )  # fmt: skip
    arguments = parser.parse_args()
    arguments.out.mkdir(parents=True, exist_ok=True)
    generator = random.Random(arguments.seed)
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="kill_resume_") as scratch:
        work = Path(scratch)
        model = work / "matmul.mlir"
        model.write_text(MATMUL)
        window = (arguments.window[0], arguments.window[1])
        trials = [run_trial(i, model, work, generator, window) for i in range(arguments.trials)]
    good = [
        t for t in trials if t["resumed_exit"] == 0 and not t["measured_again"] and not t["orphans"]
    ]
    report = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "load_average_before": load,
        "trials": trials,
        "completed_clean": len(good),
    }
    (arguments.out / f"kill_resume_{window[0]:g}-{window[1]:g}s.json").write_text(
        json.dumps(report, indent=2) + "\n"
    )
    print(
        "| trial | killed after s | rows before | resumed | measured again | orphans | winner | from stored campaign |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for t in trials:
        print(
            f"| {t['trial']} | {t['killed_after_s']} | {t['rows_before_kill']} | exit {t['resumed_exit']} | "
            f"{len(t['measured_again'])} | {len(t['orphans'])} | {t.get('winner')} | "
            f"{t.get('resumed_from_stored_campaign')} |"
        )
    print(
        f"{len(good)}/{len(trials)} trials resumed cleanly (completed, nothing measured twice, no orphans)"
    )
    return 0 if len(good) == len(trials) else 1


if __name__ == "__main__":
    sys.exit(main())
