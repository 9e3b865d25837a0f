"""The GPU benchmark suite, device side: measure compiled folders, and torch's time for each.

    PYTHONPATH=<iree-base-runtime>:<dir holding ireetune> python device_suite.py SUITE_DIR OUT_DIR

Runs on the GPU machine with only the IREE runtime, NumPy and (for the cuBLAS/cuDNN reference)
torch: `ireetune.handoff.benchmark_folder` measures and verifies every folder of `SUITE_DIR/plan.json`;
the results come back as one JSON file for `bench/finish_suite.py`.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ireetune.handoff.benchmark_folder import benchmark_folder


def time_torch(spec: dict[str, Any], repetitions: int = 7) -> float:
    """Return torch's median milliseconds for the problem (cuBLAS for matmuls, cuDNN for convs)."""
    import torch

    device = torch.device("cuda")
    half = torch.float16
    if spec["op"] == "mmt":
        lhs = torch.randn(spec["m"], spec["k"], device=device, dtype=half)
        rhs = torch.randn(spec["n"], spec["k"], device=device, dtype=half)

        def run() -> object:
            return lhs @ rhs.t()
    elif spec["op"] == "bmm":
        lhs = torch.randn(spec["b"], spec["m"], spec["k"], device=device, dtype=half)
        rhs = torch.randn(spec["b"], spec["k"], spec["n"], device=device, dtype=half)

        def run() -> object:
            return torch.bmm(lhs, rhs)
    else:
        size = spec["hw"] + 2
        image = torch.randn(spec["n"], spec["c"], size, size, device=device, dtype=half)
        image = image.to(memory_format=torch.channels_last)
        weight = torch.randn(spec["f"], spec["c"], 3, 3, device=device, dtype=half)
        weight = weight.to(memory_format=torch.channels_last)

        def run() -> object:
            return torch.nn.functional.conv2d(image, weight)

    for _ in range(20):
        run()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        run()
    end.record()
    torch.cuda.synchronize()
    iterations = max(10, int(50.0 / max(start.elapsed_time(end) / 10, 1e-3)))
    times = []
    for _ in range(repetitions):
        start.record()
        for _ in range(iterations):
            run()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / iterations)
    return float(statistics.median(times))


def main() -> int:
    suite_dir, out_dir = Path(sys.argv[1]), Path(sys.argv[2])
    out_dir.mkdir(parents=True, exist_ok=True)
    plan = json.loads((suite_dir / "plan.json").read_text())
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm", "--format=csv,noheader"],
                         capture_output=True, text=True, check=False).stdout.strip()  # fmt: skip
    report: dict[str, Any] = {
        "gpu": smi,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "runs": {},
        "torch": {},
    }
    # torch first (seconds), then the heuristic's folders, then the random baselines: if the
    # machine's time runs out, what is left is the least important.
    for entry in plan:
        if entry["name"] in report["torch"]:
            continue
        try:
            report["torch"][entry["name"]] = time_torch(entry["torch"])
        except Exception as error:  # torch is only the reference; keep going without it.
            report["torch"][entry["name"]] = f"{type(error).__name__}: {error}"
        print(f"torch {entry['name']}: {report['torch'][entry['name']]}", flush=True)
    for entry in sorted(plan, key=lambda e: e["order"] != "heuristic"):
        run_dir = suite_dir / "runs" / entry["folder"]
        start = time.perf_counter()
        try:
            path = benchmark_folder(run_dir, ["cuda://0"])
            results = json.loads(path.read_text())
        except Exception as error:  # One broken folder must not lose the others' numbers.
            results = {"error": f"{type(error).__name__}: {error}"}
        results["wall_seconds"] = time.perf_counter() - start
        report["runs"][entry["folder"]] = results
        print(f"{entry['folder']}: {results['wall_seconds']:.1f} s", flush=True)
        (out_dir / "suite_results.json").write_text(json.dumps(report, indent=2) + "\n")
    (out_dir / "suite_results.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
