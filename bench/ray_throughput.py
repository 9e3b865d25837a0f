"""Compile throughput (candidates compiled per minute), local executor against Ray, side by side.

Builds the candidates of one CPU dispatch once (a `tune-dispatch --stop-after compile` run: its
stripped dispatch benchmark and one spec per candidate), then compiles that same batch of
candidates again and again, alternating the local executor (thread pool) and the Ray executor
(tasks on a private local Ray cluster), so both see the same machine load. Prints one line per
round and a JSON summary for docs/benchmarks.md. Ray's own start-up is timed apart: it is paid
once per run, not per candidate.

    python bench/ray_throughput.py --candidates 16 --rounds 3 --cpus 2
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from ireetune.compile.driver import CompileStatus, build_request
from ireetune.compile.pool import CompileBatch, CompileJob
from ireetune.executor import LocalExecutor, RaySettings
from ireetune.executor.base import Executor
from ireetune.executor.ray_executor import RayExecutor
from ireetune.flows.dispatch.options import StopAfter
from ireetune.flows.dispatch.tuner import TuneOptions, tune_dispatch
from ireetune.targets import parse_target

# A 256x512x384 f32 matmul: big enough that a compile is mostly the compiler's work.
MODEL = """
func.func @main(%lhs: tensor<256x384xf32>, %rhs: tensor<384x512xf32>) -> tensor<256x512xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<256x512xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<256x512xf32>) -> tensor<256x512xf32>
  %r = linalg.matmul ins(%lhs, %rhs : tensor<256x384xf32>, tensor<384x512xf32>)
                     outs(%init : tensor<256x512xf32>) -> tensor<256x512xf32>
  return %r : tensor<256x512xf32>
}
"""


def _jobs(run_dir: Path, output_dir: Path) -> list[CompileJob]:
    target = parse_target("cpu")
    source = run_dir / "inputs" / "stripped_benchmark.mlir"
    output_dir.mkdir(parents=True, exist_ok=True)
    return [
        CompileJob(
            int(spec.name.split("_")[0]),
            build_request(
                target,
                source,
                output_dir / f"{spec.name}.vmfb",
                phase_flags=("--compile-from=executable-sources",),
                spec_path=spec,
                reproducer_path=output_dir / f"{spec.name}_reproducer.mlir",
            ),
            output_dir / f"{spec.name}.log",
        )  # fmt: skip
        for spec in sorted((run_dir / "specs").glob("*_spec.mlir"))
    ]


def _time(executor: Executor, jobs: list[CompileJob], workers: int) -> tuple[float, int]:
    start = time.perf_counter()
    outcomes = list(executor.compile(CompileBatch(jobs, workers, 300.0)))
    seconds = time.perf_counter() - start
    compiled = sum(1 for o in outcomes if o.status is CompileStatus.COMPILED)
    assert len(outcomes) == len(jobs)
    return seconds, compiled


def _load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cpus", type=int, default=len(os.sched_getaffinity(0)))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ireetune_ray_bench_") as scratch:
        folder = Path(scratch)
        (folder / "matmul.mlir").write_text(MODEL)
        run = tune_dispatch(
            TuneOptions(
                input_path=folder / "matmul.mlir", target="cpu", output_dir=folder / "runs",
                num_candidates=args.candidates, use_database=False, show_progress=False,
                stop_after=StopAfter.COMPILE,
            )
        )  # fmt: skip
        jobs = {
            name: _jobs(run.run_dir, folder / name) for name in ("local", "ray")
        }  # fmt: skip
        start = time.perf_counter()
        ray_executor = RayExecutor(RaySettings(num_cpus=args.cpus))
        startup_s = time.perf_counter() - start
        executors: dict[str, Executor] = {"local": LocalExecutor(), "ray": ray_executor}
        rates: dict[str, list[float]] = {"local": [], "ray": []}
        loads: list[str] = [_load()]
        try:
            # One warm-up compile each (Ray starts its worker processes on first use).
            for name, executor in executors.items():
                _time(executor, jobs[name][:1], args.cpus)
            for round_index in range(args.rounds):
                for name in ("local", "ray") if round_index % 2 == 0 else ("ray", "local"):
                    seconds, compiled = _time(executors[name], jobs[name], args.cpus)
                    rate = 60.0 * len(jobs[name]) / seconds
                    rates[name].append(rate)
                    print(
                        f"round {round_index} {name:>5}: {len(jobs[name])} candidates "
                        f"({compiled} compiled) in {seconds:.1f} s = {rate:.1f}/min, "
                        f"load {_load()}",
                        flush=True,
                    )
                loads.append(_load())
        finally:
            ray_executor.close()
    summary = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores",
        "candidates": len(jobs["local"]),
        "workers": args.cpus,
        "ray_startup_s": round(startup_s, 1),
        "local_per_min": [round(r, 1) for r in rates["local"]],
        "ray_per_min": [round(r, 1) for r in rates["ray"]],
        "local_median": round(statistics.median(rates["local"]), 1),
        "ray_median": round(statistics.median(rates["ray"]), 1),
        "load_averages": loads,
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
