"""A/A check of the model-level timing session: the default model against a byte copy of itself.

Reads a finished model run (`ireetune tune` folder), copies its default binary (the flag phase's
winner, the one model-level selection compares against) and times the default, the copy and
any variants named (`selection/<label>.vmfb`) side by side in one process, as the selection does
(rounds of `--calls` calls each, the order rotating from round to round), for `--sessions`
sessions. Prints each session's paired estimate of the copy (and of the variants) by the model
rule's statistic, and how many of the copy's sessions the model rule would have called faster
(an A/A "win" is a false positive), then one JSON line for docs/benchmarks.md.

    python bench/model_aa.py runs/zoo/mobilenet_v2/model_* --sessions 6 --rounds 30 d0c0 d6c0
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import tempfile
from pathlib import Path

from ireetune.model.select import MODEL_RULE
from ireetune.model.timing import ModelComparison, run_models_side_by_side_here
from ireetune.model.variant_sessions import estimate_against_default


def one_session(
    run_dir: Path, labels: list[str], rounds: int, calls: int, work: Path
) -> dict[str, list[float] | float]:
    """Time the default, its copy and the named variants once; return each one's estimate
    ([speedup, low, high]) and the default's median ms."""
    state = json.loads((run_dir / "model_run.json").read_text())
    default = run_dir / state["default_vmfb"]
    copy = work / "copy.vmfb"
    shutil.copyfile(default, copy)
    models = [("default", default), ("copy", copy)]
    models += [(label, run_dir / "selection" / f"{label}.vmfb") for label in labels]
    runs = run_models_side_by_side_here(
        ModelComparison(
            models, state["model"]["function"], run_dir / state["model"]["inputs"], work,
            state["model"]["device"], rounds, calls,
        )
    )  # fmt: skip
    result: dict[str, list[float] | float] = {
        "default_ms": statistics.median(runs["default"].times_ms)
    }
    for label, _ in models[1:]:
        estimate = estimate_against_default(runs, label, calls)
        if estimate is not None:
            result[label] = [estimate.speedup, estimate.low, estimate.high]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("labels", nargs="*", help="variants of selection/ to time beside them")
    parser.add_argument("--sessions", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--calls", type=int, default=4)
    args = parser.parse_intermixed_args()
    sessions = []
    for index in range(args.sessions):
        with tempfile.TemporaryDirectory() as work:
            session = one_session(args.run_dir, args.labels, args.rounds, args.calls, Path(work))
        sessions.append(session)
        figures = "  ".join(
            f"{label} {value[0]:.3f}x [{value[1]:.3f}, {value[2]:.3f}]"
            for label, value in session.items()
            if isinstance(value, list)
        )
        print(f"session {index + 1}: default {session['default_ms']:.3f} ms  {figures}")
    copies = [s["copy"] for s in sessions if isinstance(s.get("copy"), list)]
    wins = sum(1 for c in copies if isinstance(c, list) and c[1] > MODEL_RULE.threshold)
    outside = sum(1 for c in copies if isinstance(c, list) and not c[1] <= 1.0 <= c[2])
    print(
        f"copy: {wins} of {len(copies)} sessions would clear the model rule "
        f"(low above {MODEL_RULE.threshold}x); {outside} intervals exclude 1"
    )
    print(
        json.dumps(
            {
                "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "machine": platform.processor() or platform.machine(),
                "load": os.getloadavg()[0],
                "run": str(args.run_dir),
                "rounds": args.rounds,
                "calls": args.calls,
                "sessions": sessions,
                "false_wins": wins,
                "intervals_excluding_1": outside,
            }
        )
    )


if __name__ == "__main__":
    main()
