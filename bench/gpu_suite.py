"""The GPU benchmark suite, compile side: six f16 dispatches tuned for cuda:sm_80.

    python bench/gpu_suite.py OUT_DIR [--num-candidates 24]

For each problem it dumps the dispatch benchmark, then compiles two run folders with
`tune-dispatch --stop-after compile`: the heuristic's best candidates and, as the baseline the
heuristic must beat, as many random ones from the same space. `bench/device_suite.py` measures
the folders on the GPU (runtime only); `ireetune finish` then reads them back here. The numbers
go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ireetune.dispatch_options import CandidateOrder, References, StopAfter, TuneOptions
from ireetune.dispatch_tuner import tune_dispatch
from ireetune.tools import find_tool

TARGET = "cuda:sm_80"
TARGET_FLAGS = ["--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80"]


@dataclass(frozen=True)
class SuiteProblem:
    """One dispatch of the suite: its name, its model, and how torch computes the same thing."""

    name: str
    model: str
    torch: dict[str, object]


def _mmt(m: int, n: int, k: int) -> SuiteProblem:
    model = f"""
func.func @main(%lhs: tensor<{m}x{k}xf16>, %rhs: tensor<{n}x{k}xf16>) -> tensor<{m}x{n}xf32> {{
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<{m}x{n}xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  %r = linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>,
                                      affine_map<(d0, d1, d2) -> (d1, d2)>,
                                      affine_map<(d0, d1, d2) -> (d0, d1)>]
      ins(%lhs, %rhs : tensor<{m}x{k}xf16>, tensor<{n}x{k}xf16>)
      outs(%init : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  return %r : tensor<{m}x{n}xf32>
}}
"""
    return SuiteProblem(f"mmt_{m}x{n}x{k}", model, {"op": "mmt", "m": m, "n": n, "k": k})


def _batch_matmul(b: int, m: int, n: int, k: int) -> SuiteProblem:
    model = f"""
func.func @main(%lhs: tensor<{b}x{m}x{k}xf16>, %rhs: tensor<{b}x{k}x{n}xf16>) -> tensor<{b}x{m}x{n}xf32> {{
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<{b}x{m}x{n}xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<{b}x{m}x{n}xf32>) -> tensor<{b}x{m}x{n}xf32>
  %r = linalg.batch_matmul ins(%lhs, %rhs : tensor<{b}x{m}x{k}xf16>, tensor<{b}x{k}x{n}xf16>)
                           outs(%init : tensor<{b}x{m}x{n}xf32>) -> tensor<{b}x{m}x{n}xf32>
  return %r : tensor<{b}x{m}x{n}xf32>
}}
"""
    return SuiteProblem(
        f"bmm_{b}x{m}x{n}x{k}", model, {"op": "bmm", "b": b, "m": m, "n": n, "k": k}
    )


def _conv(n: int, hw: int, c: int, f: int) -> SuiteProblem:
    i = hw + 2
    model = f"""
func.func @main(%x: tensor<{n}x{i}x{i}x{c}xf16>, %w: tensor<3x3x{c}x{f}xf16>) -> tensor<{n}x{hw}x{hw}x{f}xf32> {{
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<{n}x{hw}x{hw}x{f}xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<{n}x{hw}x{hw}x{f}xf32>) -> tensor<{n}x{hw}x{hw}x{f}xf32>
  %r = linalg.conv_2d_nhwc_hwcf {{dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}}
      ins(%x, %w : tensor<{n}x{i}x{i}x{c}xf16>, tensor<3x3x{c}x{f}xf16>)
      outs(%init : tensor<{n}x{hw}x{hw}x{f}xf32>) -> tensor<{n}x{hw}x{hw}x{f}xf32>
  return %r : tensor<{n}x{hw}x{hw}x{f}xf32>
}}
"""
    return SuiteProblem(
        f"conv_{n}x{hw}x{hw}x{f}x3x3x{c}", model, {"op": "conv", "n": n, "hw": hw, "c": c, "f": f}
    )


SUITE = (
    _mmt(2048, 1280, 5120),
    _mmt(4096, 4096, 4096),
    _mmt(32, 4096, 4096),
    _batch_matmul(16, 1024, 1024, 128),
    _conv(8, 56, 128, 128),
    _mmt(1024, 8192, 1024),
)


def dump_benchmark(problem: SuiteProblem, folder: Path) -> Path:
    """Compile the problem's model for the target, dumping its one dispatch benchmark."""
    folder.mkdir(parents=True, exist_ok=True)
    model = folder / "model.mlir"
    model.write_text(problem.model)
    dumps = folder / "dumps"
    subprocess.run(
        [find_tool("iree-compile"), str(model), *TARGET_FLAGS, f"--iree-hal-dump-executable-benchmarks-to={dumps}",
         "--iree-codegen-add-tuner-attributes", "-o", str(folder / "model.vmfb")],
        check=True, capture_output=True,
    )  # fmt: skip
    (path,) = sorted(dumps.glob("*_benchmark.mlir"))
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--num-candidates", type=int, default=24)
    parser.add_argument("--only", default="", help="comma-separated problem names")
    arguments = parser.parse_args()
    out: Path = arguments.out_dir
    out.mkdir(parents=True, exist_ok=True)
    plan = []
    for problem in SUITE:
        if arguments.only and problem.name not in arguments.only.split(","):
            continue
        benchmark = dump_benchmark(problem, out / "work" / problem.name)
        for order in (CandidateOrder.HEURISTIC, CandidateOrder.RANDOM):
            start = time.perf_counter()
            result = tune_dispatch(
                TuneOptions(
                    input_path=benchmark, target=TARGET, num_candidates=arguments.num_candidates,
                    output_dir=out / "work" / problem.name / order.value, devices=("cuda://0",),
                    min_repetition_s=0.02, stop_after=StopAfter.COMPILE, order=order, show_progress=False,
                    use_database=False, references=References.ALL,
                )
            )  # fmt: skip
            seconds = time.perf_counter() - start
            folder_name = f"{problem.name}__{order.value}"
            shutil.copytree(result.run_dir, out / "runs" / folder_name, dirs_exist_ok=True)
            entry = {
                "name": problem.name, "order": order.value, "folder": folder_name,
                "compile_seconds": seconds, "compile_success_rate": result.compile_success_rate,
                "torch": problem.torch, "local_run_dir": str(result.run_dir),
            }  # fmt: skip
            plan.append(entry)
            sys.stdout.write(json.dumps(entry) + "\n")
            sys.stdout.flush()
    (out / "plan.json").write_text(json.dumps(plan, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
