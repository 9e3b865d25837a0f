"""Benchmark whole-model tuning on ResNet-50 from the onnx package, on this machine's CPU.

Runs `ireetune tune` on light_resnet50.onnx (opset upgraded, imported with iree-import-onnx), then
measures default and tuned end to end side by side in one process (the tuner's own final check),
and prints the figures: default and tuned model time, speedup, tuning wall time, dispatches tuned,
coverage. Usage: python bench/tune_resnet50.py [--max-dispatches 6] [--num-candidates 16]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import onnx

from ireetune.flows.model.tuner import ModelTuneOptions, tune_model


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="light_resnet50.onnx")
    parser.add_argument("--max-dispatches", type=int, default=6)
    parser.add_argument("--num-candidates", type=int, default=16)
    parser.add_argument("--candidates-per-dispatch", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--time-budget", type=float, default=None)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args()
    model = Path(onnx.__file__).parent / "backend/test/data/light" / args.model
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        result = tune_model(
            ModelTuneOptions(
                model_path=model,
                target="cpu",
                max_dispatches=args.max_dispatches,
                num_candidates=args.num_candidates,
                candidates_per_dispatch=args.candidates_per_dispatch,
                rounds=args.rounds,
                time_budget_s=args.time_budget,
                output_dir=Path(scratch),
                use_database=False,
                show_progress=False,
            )
        )
        wall_s = time.perf_counter() - start
        report = json.loads((result.run_dir / "report.json").read_text())
        report_text = (result.run_dir / "report.txt").read_text()
    tuned = [d for d in result.dispatches if d.kept_spec]
    figures = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores",
        "model": args.model,
        "default_ms": result.default_ms,
        "tuned_ms": result.tuned_ms,
        "speedup": result.speedup,
        "wall_s": wall_s,
        "dispatches_selected": sum(1 for d in result.dispatches if d.note != "not selected"),
        "dispatches_with_kept_spec": len(tuned),
        "notes": list(result.notes),
        "report": report,
    }
    (args.out / "tune_resnet50.json").write_text(json.dumps(figures, indent=2, default=str) + "\n")
    print(report_text)
    print(json.dumps({k: v for k, v in figures.items() if k != "report"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
