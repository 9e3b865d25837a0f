"""How long until the first 100 ordered candidates, on every target, cold and with a warm cache.

For each target (cpu, cuda:sm_80, rocm:gfx942: GPU targets compile here without a GPU) and each
problem, this times what the tuner does before the first compile: read the dispatch and its
space (`load_dispatch`, which asks the compiler for a GPU space), draw the pool of
max(4 x 100, 64) candidates and order it (`order_pool`, as `--order auto` does), twice: with an
empty cache folder (the first read) and again with the folder the first run filled
(`<database folder>/spaces/`, ireetune/database/space_cache.py). The dispatch benchmarks are
dumped beforehand and not timed. With `--spaces DIR`, a cost model trained on those recorded
spaces is kept beside each CPU database first (not timed), so the CPU pools are ordered by the
learned model, features and all, as `--order auto` would.

Usage: python bench/first_candidates.py [--candidates 100] [--spaces data/spaces/cpu]
           [--json out.json]
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from iree.compiler import ir

from ireetune.core.target import SpaceRequest
from ireetune.core.tools import find_tool
from ireetune.database.ranker_files import ranker_folder
from ireetune.database.store import TuningDatabase
from ireetune.frontend.load import load_dispatch
from ireetune.search.learned_order import order_pool
from ireetune.search.ranker_training import train_pinned_rankers
from ireetune.search.recorded import load_recorded_spaces
from ireetune.targets import parse_target

sys.path.insert(0, str(Path(__file__).parent))
from gpu_check import batch_matmul, mmt  # noqa: E402
from record_spaces import conv_model, matmul_model  # noqa: E402

TARGET_FLAGS = {
    "cpu": [
        "--iree-hal-target-device=local",
        "--iree-hal-local-target-device-backends=llvm-cpu",
        "--iree-llvmcpu-target-cpu=host",
    ],
    "cuda:sm_80": ["--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80"],
    "rocm:gfx942": ["--iree-hal-target-device=hip", "--iree-rocm-target=gfx942"],
}
CONV_8X56X56X128 = """
func.func @main(%x: tensor<8x58x58x128xf16>, %w: tensor<3x3x128x128xf16>) -> tensor<8x56x56x128xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<8x56x56x128xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<8x56x56x128xf32>) -> tensor<8x56x56x128xf32>
  %r = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
      ins(%x, %w : tensor<8x58x58x128xf16>, tensor<3x3x128x128xf16>)
      outs(%init : tensor<8x56x56x128xf32>) -> tensor<8x56x56x128xf32>
  return %r : tensor<8x56x56x128xf32>
}
"""
GPU_PROBLEMS = {
    "mmt_2048x1280x5120": mmt(2048, 1280, 5120, "f16", "f32").model,
    "bmm_16x1024x1024x128": batch_matmul(16, 1024, 1024, 128, "f16", "f32").model,
    "conv_8x56x56x128x3x3x128": CONV_8X56X56X128,
}
CPU_PROBLEMS = {
    "matmul_1024x1024x1024_f32": matmul_model(1024, 1024, 1024),
    "conv_nhwc_1x58x58x64_3x3x64_f32": conv_model(58, 58, 64, 64, 3, 1),
}


def dump_benchmark(model_text: str, flags: list[str], folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.mlir").write_text(model_text)
    subprocess.run(
        [find_tool("iree-compile"), str(folder / "model.mlir"), *flags,
         f"--iree-hal-dump-executable-benchmarks-to={folder / 'dumps'}",
         "--iree-codegen-add-tuner-attributes", "-o", str(folder / "model.vmfb")],
        check=True, capture_output=True,
    )  # fmt: skip
    (path,) = sorted((folder / "dumps").glob("*_benchmark.mlir"))
    return path


def time_first_candidates(
    target_name: str, benchmark: Path, database_path: Path, count: int
) -> tuple[float, int, str]:
    """Return the seconds until `count` ordered candidates exist, how many, and the ordering."""
    started = time.perf_counter()
    target = parse_target(target_name)
    target.cache_folder = database_path.parent / "spaces"
    context = ir.Context()
    with tempfile.TemporaryDirectory() as scratch:
        dispatch = load_dispatch(benchmark, None, target, Path(scratch), context)
    request = SpaceRequest(dispatch.problem, dispatch.variant_target, dispatch.default_knobs, 0)
    pool = list(itertools.islice(dispatch.space.generate(request), max(4 * count, 64)))
    with TuningDatabase(database_path) as database:
        ordered, ordering, _ = order_pool(
            target, dispatch.space, request, str(dispatch.variant_target), pool, database, "auto"
        )
    seconds = time.perf_counter() - started
    return seconds, len(ordered[:count]), ordering


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--candidates", type=int, default=100)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--spaces", type=Path, default=None, help="recorded CPU spaces")
    arguments = parser.parse_args()
    spaces = load_recorded_spaces(arguments.spaces) if arguments.spaces else []
    plan: list[tuple[str, str, str]] = [
        (target, name, text)
        for target in ("cuda:sm_80", "rocm:gfx942")
        for name, text in GPU_PROBLEMS.items()
    ]
    plan += [("cpu", name, text) for name, text in CPU_PROBLEMS.items()]
    rows = []
    with tempfile.TemporaryDirectory(prefix="first_candidates_") as work_name:
        work = Path(work_name)
        for target_name, name, model_text in plan:
            benchmark = dump_benchmark(
                model_text, TARGET_FLAGS[target_name], work / target_name.replace(":", "_") / name
            )
            database_path = work / target_name.replace(":", "_") / name / "db" / "tuning.sqlite"
            if spaces and target_name == "cpu":
                train_pinned_rankers([], ranker_folder(database_path), spaces)
            cold, produced, ordering = time_first_candidates(
                target_name, benchmark, database_path, arguments.candidates
            )
            warm, _, _ = time_first_candidates(
                target_name, benchmark, database_path, arguments.candidates
            )
            row = {
                "target": target_name, "problem": name, "candidates": produced,
                "first_read_s": round(cold, 2), "cached_s": round(warm, 2), "ordering": ordering,
                "load_average": [round(v, 2) for v in os.getloadavg()],
            }  # fmt: skip
            rows.append(row)
            print(json.dumps(row), flush=True)
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"\nfirst {arguments.candidates} ordered candidates, {date}")
    print("| target | problem | first read s | cached s | ordered by | load average |")
    print("|---|---|---:|---:|---|---|")
    for row in rows:
        ordering = str(row["ordering"]).split(":")[0]
        print(
            f"| {row['target']} | {row['problem']} | {row['first_read_s']:.2f} | "
            f"{row['cached_s']:.2f} | {ordering} | {row['load_average']} |"
        )
    if arguments.json is not None:
        arguments.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
