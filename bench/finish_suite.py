"""The GPU benchmark suite, last step: read the device's results back and print the table.

    python bench/finish_suite.py SUITE_DIR SUITE_RESULTS_JSON

For every folder of the suite it writes the device's `benchmark_results.json` into the local run
folder, runs `ireetune finish` on it (winner, verification verdicts, proof that the config
lands, best_spec.mlir), and prints the docs/benchmarks.md table in Markdown.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from ireetune.handoff.finish import finish_run
from ireetune.handoff.manifest import RESULTS_NAME


def _best_first_pass(results: dict[str, Any]) -> float:
    """Return the best speedup of the first, unconfirmed pass (what a random pick would see)."""
    speedups = [
        c["speedup"] or 0.0 for c in results["campaign"]["candidates"] if c["status"] == "measured"
    ]
    return max(speedups, default=0.0)


def main() -> int:
    suite_dir, results_path = Path(sys.argv[1]), Path(sys.argv[2])
    plan = json.loads((suite_dir / "plan.json").read_text())
    device_report = json.loads(results_path.read_text())
    rows: dict[str, dict[str, Any]] = {}
    for entry in plan:
        results = device_report["runs"][entry["folder"]]
        if "error" in results:
            sys.stderr.write(f"{entry['folder']}: {results['error']}\n")
            continue
        run_dir = Path(entry["local_run_dir"])
        (run_dir / RESULTS_NAME).write_text(json.dumps(results, indent=2) + "\n")
        start = time.perf_counter()
        outcome = finish_run(run_dir)
        finish_seconds = time.perf_counter() - start
        campaign = results["campaign"]
        measured = sum(1 for c in campaign["candidates"] if c["status"] == "measured")
        best_speedup = outcome.best.speedup if outcome.best is not None else 1.0
        row = rows.setdefault(entry["name"], {})
        row[entry["order"]] = {
            "default_ms": outcome.baseline_ms,
            "tuned_ms": outcome.best.median_ms if outcome.best is not None else outcome.baseline_ms,
            "speedup": best_speedup,
            "first_pass_best": _best_first_pass(results),
            "tried": len(outcome.records) - 1,
            "measured": measured,
            "compile_s": entry["compile_seconds"],
            "device_s": results["wall_seconds"],
            "finish_s": finish_seconds,
            "throughput": campaign["measured_per_second"],
            "compile_rate": entry["compile_success_rate"],
            "winner": outcome.best.candidate_id if outcome.best is not None else None,
        }
        row["torch_ms"] = device_report["torch"].get(entry["name"])
    print(f"device: {device_report['gpu']}; measured {device_report['date']}")
    print()
    print(
        "| dispatch | default ms | tuned ms | speedup | torch (cuBLAS/cuDNN) ms | candidates tried (compiled %) "
        "| tuning wall s (compile + GPU + finish) | benchmark cand/s | random picks, same budget |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    heuristic_speedups, random_speedups = [], []
    for name, row in rows.items():
        h, r = row.get("heuristic"), row.get("random")
        if h is None:
            continue
        torch_ms = row["torch_ms"]
        torch_text = f"{torch_ms:.4f}" if isinstance(torch_ms, float) else "n/a"
        wall = h["compile_s"] + h["device_s"] + h["finish_s"]
        random_text = (
            f"{r['speedup']:.2f}x (first pass best {r['first_pass_best']:.2f}x)" if r else "n/a"
        )
        print(
            f"| {name} | {h['default_ms']:.4f} | {h['tuned_ms']:.4f} | {h['speedup']:.2f}x | {torch_text} "
            f"| {h['tried']} ({h['compile_rate']:.0%}) | {wall:.0f} ({h['compile_s']:.0f} + {h['device_s']:.0f} + "
            f"{h['finish_s']:.0f}) | {h['throughput']:.2f} | {random_text} |"
        )
        heuristic_speedups.append(h["speedup"])
        if r:
            random_speedups.append(r["speedup"])

    def geomean(values: list[float]) -> float:
        return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")

    print()
    print(f"geomean speedup over default: tuned {geomean(heuristic_speedups):.3f}x, "
          f"random picks at the same budget {geomean(random_speedups):.3f}x")  # fmt: skip
    (suite_dir / "table.json").write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
