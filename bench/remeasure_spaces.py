"""Re-measure the leaders of recorded spaces, so that "the best" of a sample is not one lucky timing.

A recording (bench/record_spaces.py) times each candidate in one pass of short repetitions; on a
shared machine the fastest of a sample is then often a candidate whose one pass happened to run
undisturbed. This script takes the kept run folders of a recording (`record_spaces.py
--keep-runs DIR`: they hold every candidate's binary, so nothing is compiled again), chooses the
leading binaries of each space (`select_leaders`: the fastest distinct binaries of the first
pass, with every one near the best, and the default's), and times them again in `--rounds`
rounds, each round one worker process running all of them in a fresh seeded shuffle, with the
first pass's repetitions, repetition length and batch. Each binary's fastest repetition of each
round is stored in the space (`remeasured`, format version 2, see ireetune/search/recorded.py)
with the provenance of the re-measurement; replays and training then use the fastest repetition
of the rounds for those binaries.

Under heavy load a re-measurement makes labels worse, not better (on the 2-core development
machine at a load average of 16, one binary's rounds spread over 60-150%): the script waits for
the 1-minute load average to fall to `--max-load` before each space, and gives up on the rest
after `--wait` seconds.

Usage:
    python bench/remeasure_spaces.py --runs DIR [DIR ...] [--spaces data/spaces/cpu] [--problems A,B]
        [--top 20] [--near 0.25] [--most 30] [--rounds 5] [--seed 0]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from space_files import select_leaders, write_recorded_space

from ireetune.benchmark.runner import BenchmarkJob, BenchmarkSession, BenchmarkStatus
from ireetune.executor import LocalExecutor
from ireetune.search.recorded import RecordedSpace, load_recorded_space

DEVICE = "local-task"
# One timing of a leader (load, warm-up, repetitions) never takes this long on the CPU.
JOB_TIMEOUT_S = 120.0


def binary_paths(run_dir: Path) -> dict[str, Path]:
    """Map each binary's short hash (as a recorded space keeps it) to a file of that binary."""
    data = json.loads((run_dir / "results.json").read_text())
    paths: dict[str, Path] = {}
    for candidate in sorted(data["candidates"], key=lambda c: int(c["candidate_id"])):
        binary = str(candidate.get("binary_hash") or "")[:16]
        relative = candidate.get("binary_path")
        if binary and relative and (run_dir / relative).is_file():
            paths.setdefault(binary, run_dir / relative)
    return paths


def find_run_folder(runs: list[Path], name: str) -> Path | None:
    for root in runs:
        for candidate in root.rglob(name):
            if (candidate / "results.json").is_file():
                return candidate
    return None


def load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def git_commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, check=True, cwd=Path(__file__).parent,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def remeasure(space: RecordedSpace, run_dir: Path, arguments: argparse.Namespace) -> RecordedSpace:
    """Time the space's leaders in interleaved rounds; return the space with their rounds."""
    leaders = select_leaders(space, arguments.top, arguments.near, arguments.most)
    paths = binary_paths(run_dir)
    missing = [binary for binary in leaders if binary not in paths]
    if missing:
        raise SystemExit(f"{space.name}: {len(missing)} leaders have no binary in {run_dir}")
    real_input = space.provenance.get("timing_basis") == "real-input"
    inputs = run_dir / "verify" / "inputs.npz" if real_input else None
    if inputs is not None and not inputs.is_file():
        raise SystemExit(f"{space.name}: {inputs} is missing (the real inputs the pass used)")
    repetitions = int(str(space.provenance.get("repetitions", 10)))
    min_repetition_s = float(str(space.provenance.get("min_repetition_s", 0.02)))
    jobs = {
        binary: BenchmarkJob(index, paths[binary], inputs, "main" if inputs else "")
        for index, binary in enumerate(leaders)
    }
    # One batch for every binary, fixed by the default as the first pass fixed it.
    baseline_binary = space.baseline.binary if space.baseline is not None else leaders[0]
    executor = LocalExecutor()
    (calibration,) = executor.run_benchmarks(
        BenchmarkSession(
            [jobs[baseline_binary]], DEVICE, 1, 0, JOB_TIMEOUT_S, min_repetition_s=min_repetition_s
        )
    )
    assert calibration.status is BenchmarkStatus.MEASURED, calibration.reason
    batch = calibration.batch
    rounds: dict[str, list[float]] = {binary: [] for binary in leaders}
    load_before = load_average()
    started_at = datetime.datetime.now(datetime.UTC)
    started = time.perf_counter()
    for round_index in range(arguments.rounds):
        order = list(leaders)
        random.Random(f"{arguments.seed}:{space.name}:{round_index}").shuffle(order)
        outcomes = executor.run_benchmarks(
            BenchmarkSession(
                [jobs[binary] for binary in order], DEVICE, repetitions, batch, JOB_TIMEOUT_S,
                min_repetition_s=min_repetition_s,
            )
        )  # fmt: skip
        for binary, outcome in zip(order, outcomes, strict=True):
            if outcome.status is BenchmarkStatus.MEASURED and outcome.times_ms:
                rounds[binary].append(round(min(outcome.times_ms), 6))
    seconds = time.perf_counter() - started
    remeasured = {binary: tuple(times) for binary, times in rounds.items() if times}
    provenance = {
        **space.provenance,
        "remeasure": {
            "date": started_at.isoformat(timespec="seconds"),
            "rounds": arguments.rounds,
            "repetitions": repetitions,
            "min_repetition_s": min_repetition_s,
            "batch": batch,
            "binaries": len(leaders),
            "selection": (
                f"the {arguments.top} fastest distinct binaries of the first pass, every other "
                f"within {arguments.near:.0%} of its fastest, at most {arguments.most}, and the "
                "default's"
            ),
            "statistic": "the fastest repetition over all rounds",
            "order": f"each round a seeded shuffle (seed {arguments.seed}), one worker process",
            "load_average_before": load_before,
            "load_average_after": load_average(),
            "seconds": round(seconds, 1),
            "ireetune_commit": git_commit(),
            "command": "python bench/remeasure_spaces.py " + " ".join(sys.argv[1:]),
        },
    }
    return replace(space, remeasured=remeasured, provenance=provenance)


def describe(space: RecordedSpace) -> str:
    first = [t for t in space.effective_times(use_remeasured=False) if t is not None]
    again = [t for t in space.effective_times() if t is not None]
    best_first, best_again = min(first), min(again)
    within = sum(1 for t in again if t <= best_again * 1.02)
    spreads = [
        (max(r) - min(r)) / statistics.median(r) for r in space.remeasured.values() if len(r) > 1
    ]
    return (
        f"best {best_first:.4f} -> {best_again:.4f} ms, {within} rows within 2% of the best "
        f"(was {sum(1 for t in first if t <= best_first * 1.02)}), median round spread "
        f"{statistics.median(spreads) if spreads else 0:.1%}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--runs", type=Path, nargs="+", required=True, help="folders of kept run folders"
    )
    parser.add_argument("--spaces", type=Path, default=Path("data/spaces/cpu"))
    parser.add_argument("--problems", default="", help="comma-separated names (default: all)")
    parser.add_argument("--top", type=int, default=20, help="fastest distinct binaries taken")
    parser.add_argument("--near", type=float, default=0.25, help="and any this near the fastest")
    parser.add_argument("--most", type=int, default=30, help="at most this many (and the default)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--seed", type=int, default=0, help="seed of each round's shuffle")
    parser.add_argument("--skip-done", action="store_true", help="skip spaces re-measured before")
    parser.add_argument("--max-load", type=float, default=4.0, help="start a space only below")
    parser.add_argument("--wait", type=float, default=3600.0, help="seconds to wait for it")
    arguments = parser.parse_args()
    wanted = {name for name in arguments.problems.split(",") if name}
    for path in sorted(arguments.spaces.glob("*.json.gz")):
        space = load_recorded_space(path)
        if (wanted and space.name not in wanted) or (arguments.skip_done and space.remeasured):
            continue
        run_name = str(space.provenance.get("run_folder", ""))
        run_dir = find_run_folder(arguments.runs, run_name) if run_name else None
        if run_dir is None:
            print(f"{space.name}: run folder {run_name!r} not under {arguments.runs}; skipped")
            continue
        waited_since = time.monotonic()
        while os.getloadavg()[0] > arguments.max_load:
            if time.monotonic() - waited_since > arguments.wait:
                print(f"load average {os.getloadavg()[0]:.1f} > {arguments.max_load}: stopped")
                return 1
            time.sleep(15)
        space = remeasure(space, run_dir, arguments)
        write_recorded_space(space, arguments.spaces)
        print(f"{space.name}: {describe(space)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
