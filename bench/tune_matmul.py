"""Benchmark the dispatch tuner on this machine: generation rate, tuning wall time, speedup.

Measures, for a 1024x1024x1024 f32 matmul on the llvm-cpu target:
1. candidate generation rate: valid configurations per second from the lazy z3 space;
2. the wall time of `tune-dispatch` with 32 candidates (no database reuse);
3. the default-vs-tuned speedup, measured side by side in this same run: the model is compiled
   without and with the winning spec (the binaries must differ), then both are timed in one
   process on the same random inputs, alternating, several rounds.

Prints a Markdown block for docs/benchmarks.md and writes the figures as JSON.
Usage: python bench/tune_matmul.py [--size 1024] [--candidates 32] [--out bench/results]
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import itertools
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import iree.runtime as runtime
import numpy as np

from ireetune.flows.dispatch.tuner import TuneOptions, tune_dispatch
from ireetune.targets.llvm_cpu.common import read_cpu_facts
from ireetune.targets.llvm_cpu.space import CpuProblemSizes, enumerate_space

CPU_FLAGS = [
    "--iree-hal-target-device=local",
    "--iree-hal-local-target-device-backends=llvm-cpu",
    "--iree-llvmcpu-target-cpu=host",
]


def matmul_model(size: int) -> str:
    return f"""
func.func @main(%lhs: tensor<{size}x{size}xf32>, %rhs: tensor<{size}x{size}xf32>) -> tensor<{size}x{size}xf32> {{
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<{size}x{size}xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<{size}x{size}xf32>) -> tensor<{size}x{size}xf32>
  %r = linalg.matmul ins(%lhs, %rhs : tensor<{size}x{size}xf32>, tensor<{size}x{size}xf32>)
                     outs(%init : tensor<{size}x{size}xf32>) -> tensor<{size}x{size}xf32>
  return %r : tensor<{size}x{size}xf32>
}}
"""


def measure_generation_rate(size: int, count: int) -> float:
    """Return valid configurations per second, drawing `count` from the lazy space."""
    facts = read_cpu_facts(None, threads=2)
    facts = type(facts)(
        facts.cpu, 64, 32, facts.l1_bytes, facts.l2_bytes, facts.threads, facts.max_vector_bytes
    )
    sizes = CpuProblemSizes(size, size, size, 1, 4, 4)
    start = time.perf_counter()
    produced = sum(1 for _ in itertools.islice(enumerate_space(sizes, facts, seed=0), count))
    return produced / (time.perf_counter() - start)


def time_models_side_by_side(
    default_vmfb: Path, tuned_vmfb: Path, size: int, rounds: int
) -> tuple[list[float], list[float]]:
    """Time both binaries' `main` alternately in one process on the same inputs."""
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((size, size)).astype(np.float32) for _ in range(2)]
    device = runtime.get_device("local-task")
    functions = []
    for path in (default_vmfb, tuned_vmfb):
        config = runtime.Config(device=device)
        context = runtime.SystemContext(config=config)
        module = runtime.VmModule.mmap(config.vm_instance, str(path))
        context.add_vm_module(module)
        functions.append(context.modules[module.name]["main"])
    outputs = [np.asarray(f(*inputs).to_host()) for f in functions]
    assert np.allclose(outputs[0], outputs[1], rtol=1e-3, atol=1e-2), "tuned model's outputs differ"
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(rounds):
        for index, function in enumerate(functions):
            start = time.perf_counter()
            for _ in range(5):
                function(*inputs).to_host()
            times[index].append((time.perf_counter() - start) / 5 * 1000)
    return times


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--candidates", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    rate = measure_generation_rate(args.size, 200)
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        model = scratch / "matmul.mlir"
        model.write_text(matmul_model(args.size))
        start = time.perf_counter()
        result = tune_dispatch(
            TuneOptions(
                input_path=model,
                num_candidates=args.candidates,
                output_dir=scratch / "runs",
                use_database=False,
                show_progress=False,
            )
        )
        wall_s = time.perf_counter() - start
        compiled = {}
        for name, extra in (
            ("default", []),
            (
                "tuned",
                [f"--iree-codegen-tuning-spec-path={result.best_spec_path}"]
                if result.best_spec_path
                else [],
            ),
        ):
            output = scratch / f"{name}.vmfb"
            subprocess.run(
                ["iree-compile", str(model), *CPU_FLAGS, *extra, "-o", str(output)], check=True
            )
            compiled[name] = output
        digests = {k: hashlib.sha256(v.read_bytes()).hexdigest() for k, v in compiled.items()}
        binaries_differ = digests["default"] != digests["tuned"]
        default_ms, tuned_ms = time_models_side_by_side(
            compiled["default"], compiled["tuned"], args.size, args.rounds
        )

    statuses: dict[str, int] = {}
    for record in result.records:
        if not record.is_baseline:
            statuses[record.status.value] = statuses.get(record.status.value, 0) + 1
    figures = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.processor() or platform.machine()}, {len(__import__('os').sched_getaffinity(0))} cores",
        "problem": result.problem.signature,
        "candidates": args.candidates,
        "generation_rate_per_s": rate,
        "tuning_wall_s": wall_s,
        "compile_success_rate": result.compile_success_rate,
        "statuses": statuses,
        "dispatch_baseline_ms": result.baseline_ms,
        "dispatch_best_ms": result.best.median_ms if result.best else None,
        "dispatch_speedup": result.best.speedup if result.best else None,
        "binaries_differ": binaries_differ,
        "model_default_ms_median": statistics.median(default_ms),
        "model_tuned_ms_median": statistics.median(tuned_ms),
        "model_speedup": statistics.median(default_ms) / statistics.median(tuned_ms),
        "best_knobs": dict(result.best.knobs) if result.best and result.best.knobs else None,
    }
    (args.out / "tune_matmul.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))
    print(
        f"\n| {figures['date'][:10]} | {figures['problem']} | {args.candidates} | {rate:.0f}/s | {wall_s:.1f} s | "
        f"{result.compile_success_rate:.0%} | {figures['dispatch_speedup'] or 1:.3f}x | "
        f"{figures['model_default_ms_median']:.2f} -> {figures['model_tuned_ms_median']:.2f} ms ({figures['model_speedup']:.3f}x) | "
        f"{'yes' if binaries_differ else 'no'} |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
