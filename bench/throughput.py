"""Measurement throughput before and after, side by side, interleaved in one run.

On the CPU (this machine), the README example end to end:

    python bench/throughput.py cpu [--rounds 3] [--num-candidates 32]

runs `ireetune tune-dispatch examples/matmul.mlir --target cpu --num-candidates 32` with the
code of main at eb7a0dc ("before", exported with `git archive` and put first on PYTHONPATH, so
its benchmark worker is the old one too), with this checkout ("after") and with this checkout
and `--overlap` ("after+overlap"), in rotating order, and prints for each: the tuning wall time,
the first pass's candidates per second (measured / benchmark seconds, as results.json records)
and measured candidates per second of wall time, each as a mean with its 95% t-interval.

What a hanging candidate costs, before and after (the measuring phase alone, real runtime, one
candidate whose kernel never returns, injected by tests/fault_worker.py):

    python bench/throughput.py cpu-hang [--rounds 3]

On a GPU host (P4: 100 candidates of a sub-ms dispatch), in two steps:

    python bench/throughput.py prepare-gpu OUT [--num-candidates 100]     # compile host
    PYTHONPATH=<iree-base-runtime dir> python OUT/throughput.py gpu OUT --devices cuda://0

`prepare-gpu` dumps the f16 mmt 2048x1280x5120 dispatch (0.26 ms with IREE's default on an
H100), compiles its candidates for cuda:sm_80 into a run folder (`--stop-after compile`), and
puts beside it both packages (before: eb7a0dc, after: this checkout) and this script. `gpu` runs
on the GPU host with the runtime alone: it times `python -m ireetune.cli benchmark-folder` of each
package on a fresh copy of the folder, interleaved, and prints candidates per second and the
leaders' confirmed speedups (the accuracy check: the same leaders, the same speedups).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
BEFORE_COMMIT = "eb7a0dc"
# Two-sided 95% Student t quantiles by degrees of freedom.
T_QUANTILE = {1: 12.71, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306}

MMT_MODEL = """
func.func @main(%lhs: tensor<2048x5120xf16>, %rhs: tensor<1280x5120xf16>) -> tensor<2048x1280xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<2048x1280xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<2048x1280xf32>) -> tensor<2048x1280xf32>
  %r = linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>,
                                      affine_map<(d0, d1, d2) -> (d1, d2)>,
                                      affine_map<(d0, d1, d2) -> (d0, d1)>]
      ins(%lhs, %rhs : tensor<2048x5120xf16>, tensor<1280x5120xf16>)
      outs(%init : tensor<2048x1280xf32>) -> tensor<2048x1280xf32>
  return %r : tensor<2048x1280xf32>
}
"""


@dataclass(frozen=True)
class Run:
    """One timed run of one variant."""

    variant: str
    wall_s: float
    benchmark_s: float
    measured: int
    per_second: float
    leaders: dict[int, float]


def interval(values: Sequence[float]) -> str:
    """Return "mean [low, high]" with a 95% t-interval (just the value for one sample)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return f"{mean:.3g}"
    half = T_QUANTILE.get(len(values) - 1, 1.96) * statistics.stdev(values) / math.sqrt(len(values))
    return f"{mean:.3g} [{mean - half:.3g}, {mean + half:.3g}]"


def export_package(commit: str, folder: Path) -> Path:
    """Write the `ireetune` package of `commit` under `folder`; return the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(REPOSITORY), "archive", commit, "ireetune"],
        check=True, capture_output=True,
    )  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder


def environment_for(package_root: Path) -> dict[str, str]:
    """The environment that makes `package_root/ireetune` the one every child imports."""
    paths = [str(package_root), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def load_summary() -> str:
    """Return the machine's load averages (written beside every figure)."""
    return "load average " + " ".join(f"{value:.2f}" for value in os.getloadavg())


def run_cpu_variant(
    variant: str, package_root: Path, extra: list[str], args: argparse.Namespace, out: Path
) -> Run:
    output_dir = out / f"{variant}_{time.monotonic_ns()}"
    command = [
        sys.executable, "-m", "ireetune.cli", "tune-dispatch", str(REPOSITORY / "examples" / "matmul.mlir"),
        "--target", "cpu", "--num-candidates", str(args.num_candidates), "--no-db", "--no-progress",
        "--output-dir", str(output_dir), *extra,
    ]  # fmt: skip
    start = time.perf_counter()
    result = subprocess.run(
        command, capture_output=True, text=True, env=environment_for(package_root), cwd=out
    )
    wall_s = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"{variant} failed: {result.stderr.strip()[-400:]}")
    (run_dir,) = output_dir.iterdir()
    data = json.loads((run_dir / "results.json").read_text())
    measured = sum(1 for c in data["candidates"] if c["candidate_id"] and c["times_ms"])
    leaders = {
        c["candidate_id"]: c["speedup"]
        for c in data["candidates"]
        if c.get("confirmed") and c["candidate_id"]
    }
    return Run(
        variant,
        wall_s,
        data["benchmark_seconds"],
        measured,
        data["benchmark_candidates_per_second"],
        leaders,
    )


def report(runs: Sequence[Run], variants: Sequence[str]) -> None:
    print(f"{'variant':<15} {'wall s':>26} {'first pass cand/s':>26} {'measured/wall s':>26}")
    for variant in variants:
        mine = [r for r in runs if r.variant == variant]
        print(
            f"{variant:<15} {interval([r.wall_s for r in mine]):>26} "
            f"{interval([r.per_second for r in mine]):>26} "
            f"{interval([r.measured / r.wall_s for r in mine]):>26}"
        )
    for run in runs:
        leaders = ", ".join(
            f"{cid}: {speedup:.3f}x" for cid, speedup in sorted(run.leaders.items())
        )
        print(f"  {run.variant:<15} wall {run.wall_s:6.1f} s, benchmark {run.benchmark_s:6.1f} s, "
              f"{run.measured} measured; confirmed leaders {leaders}")  # fmt: skip


def cpu(args: argparse.Namespace) -> None:
    out = Path(tempfile.mkdtemp(prefix="throughput_"))
    before = export_package(BEFORE_COMMIT, out / "before")
    # A copy of this checkout's package: edits made while the benchmark runs do not leak in.
    after = out / "after"
    shutil.copytree(REPOSITORY / "ireetune", after / "ireetune")
    variants = [
        ("before", before, []),
        ("after", after, []),
        ("after+overlap", after, ["--overlap"]),
    ]
    print(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, {load_summary()}"
    )
    runs = []
    for round_index in range(args.rounds):
        # Rotate the order so no variant always runs first (or after the same neighbour).
        shift = round_index % len(variants)
        for name, root, extra in variants[shift:] + variants[:shift]:
            run = run_cpu_variant(name, root, extra, args, out)
            runs.append(run)
            print(
                f"round {round_index + 1}: {name:<14} wall {run.wall_s:6.1f} s  ({load_summary()})",
                flush=True,
            )
    report(runs, [name for name, _, _ in variants])
    print(f"done {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {load_summary()}")
    shutil.rmtree(out, ignore_errors=True)


HANG_SCRIPT = """
import sys, time
from pathlib import Path
from ireetune.benchmark.campaign import CampaignSettings, run_campaign
from ireetune.benchmark.runner import BenchmarkJob
from ireetune.executor import LocalExecutor
folder = Path(sys.argv[1])
inputs = folder / "inputs.npz"
jobs = [BenchmarkJob(i, folder / f"{i}.vmfb", inputs, "main") for i in range(1, 7)]
start = time.perf_counter()
result = run_campaign(LocalExecutor(), BenchmarkJob(0, folder / "0.vmfb", inputs, "main"), jobs, ["local-task"],
                      CampaignSettings(repetitions=3, confirm_rounds=1, confirm_top=2))
hung = result.candidates[3]
print(f"{time.perf_counter() - start:.2f} {hung.status.value} {hung.reason}")
"""

SMALL_MATMUL = """
func.func @main(%lhs: tensor<256x256xf32>, %rhs: tensor<256x256xf32>) -> tensor<256x256xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<256x256xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<256x256xf32>) -> tensor<256x256xf32>
  %r = linalg.matmul ins(%lhs, %rhs : tensor<256x256xf32>, tensor<256x256xf32>)
                     outs(%init : tensor<256x256xf32>) -> tensor<256x256xf32>
  return %r : tensor<256x256xf32>
}
"""


def cpu_hang(args: argparse.Namespace) -> None:
    import numpy as np

    out = Path(tempfile.mkdtemp(prefix="throughput_hang_"))
    before = export_package(BEFORE_COMMIT, out / "before")
    after = out / "after"
    shutil.copytree(REPOSITORY / "ireetune", after / "ireetune")
    folder = out / "binaries"
    folder.mkdir()
    source = folder / "matmul.mlir"
    source.write_text(SMALL_MATMUL)
    compiler = str(Path(sys.executable).parent / "iree-compile")
    flags = ["--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
             "--iree-llvmcpu-target-cpu=host"]  # fmt: skip
    subprocess.run([compiler, str(source), *flags, "-o", str(folder / "0.vmfb")], check=True)
    for index in range(1, 7):
        shutil.copyfile(folder / "0.vmfb", folder / f"{index}.vmfb")
    generator = np.random.default_rng(0)
    arrays = {f"arg{i}": generator.standard_normal((256, 256), dtype=np.float32) for i in range(2)}
    np.savez(folder / "inputs.npz", **arrays)  # type: ignore[arg-type]
    worker = [sys.executable, str(REPOSITORY / "tests" / "fault_worker.py")]
    print(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, {load_summary()}"
    )
    seconds: dict[str, list[float]] = {"before": [], "after": []}
    for round_index in range(args.rounds):
        order = [("before", before), ("after", after)]
        for name, root in order if round_index % 2 == 0 else order[::-1]:
            environment = {
                **environment_for(root), "IREETUNE_BENCHMARK_WORKER": json.dumps(worker),
                "IREETUNE_FAULT_SLOW": "3",
            }  # fmt: skip
            try:
                result = subprocess.run(
                    [sys.executable, "-c", HANG_SCRIPT, str(folder)], capture_output=True,
                    text=True, env=environment, check=True, timeout=300,
                )  # fmt: skip
            except subprocess.TimeoutExpired:
                print(f"round {round_index + 1}: {name:<7} no result within 300 s", flush=True)
                continue
            taken, _, what = result.stdout.strip().partition(" ")
            seconds[name].append(float(taken))
            print(
                f"round {round_index + 1}: {name:<7} {float(taken):6.2f} s; candidate 3: {what}  ({load_summary()})",
                flush=True,
            )
    for name, values in seconds.items():
        print(f"{name:<7} campaign of 6 candidates, one hanging: {interval(values)} s")
    shutil.rmtree(out, ignore_errors=True)


def prepare_gpu(args: argparse.Namespace) -> None:
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    model = out / "mmt_2048x1280x5120.mlir"
    model.write_text(MMT_MODEL)
    runs = out / "folder"
    subprocess.run(
        [
            sys.executable, "-m", "ireetune.cli", "tune-dispatch", str(model), "--target", "cuda:sm_80",
            "--num-candidates", str(args.num_candidates), "--stop-after", "compile", "--references", "all", "--no-db",
            "--output-dir", str(runs), "--order", "random",
        ],
        check=True,
    )  # fmt: skip
    # The benchmarking side draws the random inputs from the manifest's seed: do not carry them.
    for inputs in runs.glob("*/verify/inputs.npz"):
        inputs.unlink()
    export_package(BEFORE_COMMIT, out / "before")
    after = out / "after"
    shutil.rmtree(after, ignore_errors=True)
    shutil.copytree(REPOSITORY / "ireetune", after / "ireetune")
    shutil.copyfile(__file__, out / "throughput.py")
    print(f"ready: carry {out} to the GPU host and run python {out / 'throughput.py'} gpu {out}")


def gpu(args: argparse.Namespace) -> None:
    out = args.out.resolve()
    (folder,) = (out / "folder").iterdir()
    variants = [("before", out / "before"), ("after", out / "after")]
    print(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, devices {args.devices}, {load_summary()}"
    )
    runs = []
    for round_index in range(args.rounds):
        shift = round_index % len(variants)
        for name, root in variants[shift:] + variants[:shift]:
            copy = out / f"copy_{name}_{round_index}"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(folder, copy)
            start = time.perf_counter()
            result = subprocess.run(
                [sys.executable, "-m", "ireetune.cli", "benchmark-folder", str(copy), "--devices", args.devices],
                capture_output=True, text=True, env=environment_for(root), cwd=out,
            )  # fmt: skip
            wall_s = time.perf_counter() - start
            if result.returncode != 0:
                raise SystemExit(f"{name} failed: {result.stderr.strip()[-400:]}")
            data = json.loads((copy / "benchmark_results.json").read_text())["campaign"]
            measured = sum(1 for c in data["candidates"] if c["status"] == "measured")
            leaders = {
                c["candidate_id"]: c["speedup"] for c in data["candidates"] if c["confirmed"]
            }
            runs.append(
                Run(name, wall_s, data["seconds"], measured, data["measured_per_second"], leaders)
            )
            print(f"round {round_index + 1}: {name:<7} {measured} measured in {data['seconds']:.1f} s "
                  f"({data['measured_per_second']:.2f}/s), wall {wall_s:.1f} s", flush=True)  # fmt: skip
            shutil.rmtree(copy, ignore_errors=True)
    report(runs, [name for name, _ in variants])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    on_cpu = commands.add_parser("cpu", help="README example before/after on this machine's CPU")
    on_cpu.add_argument("--rounds", type=int, default=3, help="interleaved rounds per variant")
    on_cpu.add_argument("--num-candidates", type=int, default=32, help="candidates per run")
    hang = commands.add_parser("cpu-hang", help="what one hanging candidate costs, before/after")
    hang.add_argument("--rounds", type=int, default=3, help="interleaved rounds per variant")
    prepare = commands.add_parser("prepare-gpu", help="compile the P4 folder (compile host)")
    prepare.add_argument("out", type=Path, help="folder to carry to the GPU host")
    prepare.add_argument("--num-candidates", type=int, default=100, help="candidates to compile")
    on_gpu = commands.add_parser("gpu", help="P4 before/after on the GPU host (runtime only)")
    on_gpu.add_argument("out", type=Path, help="the folder prepare-gpu wrote")
    on_gpu.add_argument("--devices", default="cuda://0", help="runtime device(s), comma-separated")
    on_gpu.add_argument("--rounds", type=int, default=3, help="interleaved rounds per variant")
    args = parser.parse_args()
    commands_by_name = {"cpu": cpu, "cpu-hang": cpu_hang, "prepare-gpu": prepare_gpu, "gpu": gpu}
    commands_by_name[args.command](args)


if __name__ == "__main__":
    main()
