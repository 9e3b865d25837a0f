"""Record large measured samples of the CPU search space (data/spaces/), for ordering research.

For each problem below, this drives the real dispatch tuner with the RANDOM order (the z3 sampler's
own seeded walk over the space, no heuristic), a large `--num-candidates`, and many short
repetitions per candidate (replays rank by the fastest, the estimate other jobs on a shared
machine disturb least); `--confirm-rounds` re-times the leaders interleaved with the default. It
then reads every candidate's knobs, status, times and speedup back from the run folder
(results.json) and writes one compact `<problem>.json.gz` per problem with its provenance:
machine, date, compiler version, load average before and after, timing basis.

The files are read by `ireetune.search.recorded.load_recorded_space` and replayed by
`bench/ordering_eval.py` and the cost model's training (`ireetune ranker train --spaces`).

Usage:
    python bench/record_spaces.py [--problems NAME,NAME] [--num-candidates 220]
        [--repetitions 10] [--min-repetition-time 0.02] [--confirm-rounds 0]
        [--out data/spaces/cpu] [--keep-runs DIR]
    python bench/record_spaces.py --list
    python bench/record_spaces.py --table   (data/spaces/README.md's table of the spaces in --out)
    python bench/record_spaces.py --rebuild-from RUNS_DIR   (the run folders of --keep-runs)
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from iree.compiler import ir
from space_files import baseline_time, read_run_folder_rows, write_recorded_space

from ireetune.database.keys import describe_device, describe_target
from ireetune.database.store import compiler_version
from ireetune.flows.dispatch.options import TuneOptions
from ireetune.flows.dispatch.tuner import tune_dispatch
from ireetune.frontend.load import load_dispatch
from ireetune.search.recorded import RecordedSpace, load_recorded_spaces
from ireetune.targets import parse_target
from ireetune.targets.llvm_cpu.common import read_cpu_facts
from ireetune.targets.llvm_cpu.target import LlvmCpuTarget


@dataclass(frozen=True)
class RecordedProblem:
    """A problem to record: a short file name and the model (one op in `@main`) that holds it."""

    name: str
    model_text: str


def matmul_model(
    m: int, n: int, k: int, lhs: str = "f32", rhs: str = "f32", out: str = "f32"
) -> str:
    zero = "0" if out.startswith("i") else "0.0"
    return f"""
func.func @main(%lhs: tensor<{m}x{k}x{lhs}>, %rhs: tensor<{k}x{n}x{rhs}>) -> tensor<{m}x{n}x{out}> {{
  %zero = arith.constant {zero} : {out}
  %empty = tensor.empty() : tensor<{m}x{n}x{out}>
  %init = linalg.fill ins(%zero : {out}) outs(%empty : tensor<{m}x{n}x{out}>) -> tensor<{m}x{n}x{out}>
  %r = linalg.matmul ins(%lhs, %rhs : tensor<{m}x{k}x{lhs}>, tensor<{k}x{n}x{rhs}>)
                     outs(%init : tensor<{m}x{n}x{out}>) -> tensor<{m}x{n}x{out}>
  return %r : tensor<{m}x{n}x{out}>
}}
"""


def mmt_model(m: int, n: int, k: int) -> str:
    return f"""
func.func @main(%lhs: tensor<{m}x{k}xf32>, %rhs: tensor<{n}x{k}xf32>) -> tensor<{m}x{n}xf32> {{
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<{m}x{n}xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  %r = linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>,
                                      affine_map<(d0, d1, d2) -> (d1, d2)>,
                                      affine_map<(d0, d1, d2) -> (d0, d1)>]
       ins(%lhs, %rhs : tensor<{m}x{k}xf32>, tensor<{n}x{k}xf32>)
       outs(%init : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  return %r : tensor<{m}x{n}xf32>
}}
"""


def batch_matmul_model(b: int, m: int, n: int, k: int) -> str:
    return f"""
func.func @main(%lhs: tensor<{b}x{m}x{k}xf32>, %rhs: tensor<{b}x{k}x{n}xf32>) -> tensor<{b}x{m}x{n}xf32> {{
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<{b}x{m}x{n}xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<{b}x{m}x{n}xf32>) -> tensor<{b}x{m}x{n}xf32>
  %r = linalg.batch_matmul ins(%lhs, %rhs : tensor<{b}x{m}x{k}xf32>, tensor<{b}x{k}x{n}xf32>)
                           outs(%init : tensor<{b}x{m}x{n}xf32>) -> tensor<{b}x{m}x{n}xf32>
  return %r : tensor<{b}x{m}x{n}xf32>
}}
"""


def conv_model(h: int, w: int, c: int, f: int, kernel: int, stride: int) -> str:
    oh = (h - kernel) // stride + 1
    ow = (w - kernel) // stride + 1
    return f"""
func.func @main(%input: tensor<1x{h}x{w}x{c}xf32>, %filter: tensor<{kernel}x{kernel}x{c}x{f}xf32>) -> tensor<1x{oh}x{ow}x{f}xf32> {{
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<1x{oh}x{ow}x{f}xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<1x{oh}x{ow}x{f}xf32>) -> tensor<1x{oh}x{ow}x{f}xf32>
  %r = linalg.conv_2d_nhwc_hwcf {{dilations = dense<1> : tensor<2xi64>, strides = dense<{stride}> : tensor<2xi64>}}
       ins(%input, %filter : tensor<1x{h}x{w}x{c}xf32>, tensor<{kernel}x{kernel}x{c}x{f}xf32>)
       outs(%init : tensor<1x{oh}x{ow}x{f}xf32>) -> tensor<1x{oh}x{ow}x{f}xf32>
  return %r : tensor<1x{oh}x{ow}x{f}xf32>
}}
"""


PROBLEMS = (
    RecordedProblem("matmul_256x384x512_f32", matmul_model(256, 384, 512)),
    RecordedProblem("matmul_512x512x512_f32", matmul_model(512, 512, 512)),
    RecordedProblem("matmul_1024x256x1024_f32", matmul_model(1024, 256, 1024)),
    RecordedProblem("mmt_384x512x256_f32", mmt_model(384, 512, 256)),
    RecordedProblem("batch_matmul_8x128x192x256_f32", batch_matmul_model(8, 128, 192, 256)),
    RecordedProblem("matmul_256x512x384_f16_f32", matmul_model(256, 512, 384, "f16", "f16", "f32")),
    RecordedProblem("matmul_256x256x512_i8_i32", matmul_model(256, 256, 512, "i8", "i8", "i32")),
    RecordedProblem("conv_nhwc_1x18x18x64_3x3x64_f32", conv_model(18, 18, 64, 64, 3, 1)),
    RecordedProblem("conv_nhwc_1x34x34x32_3x3x64_f32", conv_model(34, 34, 32, 64, 3, 1)),
    RecordedProblem("conv_nhwc_1x29x29x64_3x3x128_s2_f32", conv_model(29, 29, 64, 128, 3, 2)),
    # Added on 2026-11-23 (second recording session): more shapes for leave-one-out training,
    # among them sizes that are not powers of two, skinny and wide contractions, a pointwise and
    # a deep-channel convolution.
    RecordedProblem("matmul_196x768x384_f32", matmul_model(196, 768, 384)),
    RecordedProblem("conv_nhwc_1x28x28x128_1x1x256_f32", conv_model(28, 28, 128, 256, 1, 1)),
    RecordedProblem("matmul_2048x64x256_f32", matmul_model(2048, 64, 256)),
    RecordedProblem("conv_nhwc_1x9x9x256_3x3x256_f32", conv_model(9, 9, 256, 256, 3, 1)),
    RecordedProblem("matmul_384x384x768_f16_f32", matmul_model(384, 384, 768, "f16", "f16", "f32")),
    RecordedProblem("conv_nhwc_1x57x57x32_3x3x64_s2_f32", conv_model(57, 57, 32, 64, 3, 2)),
    RecordedProblem("matmul_512x128x1024_i8_i32", matmul_model(512, 128, 1024, "i8", "i8", "i32")),
    RecordedProblem("batch_matmul_16x64x64x128_f32", batch_matmul_model(16, 64, 64, 128)),
    RecordedProblem("mmt_256x1024x512_f32", mmt_model(256, 1024, 512)),
    RecordedProblem("conv_nhwc_1x30x30x128_3x3x128_f32", conv_model(30, 30, 128, 128, 3, 1)),
    RecordedProblem("matmul_128x1024x256_f32", matmul_model(128, 1024, 256)),
)


def load_average() -> tuple[float, float, float]:
    one, five, fifteen = os.getloadavg()
    return (round(one, 2), round(five, 2), round(fifteen, 2))


def git_commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


NOTE = (
    "shared 2-core machine: other engineers' jobs ran during the recording; each candidate "
    "was timed in one pass of short repetitions (leaders again in interleaved rounds when "
    "confirm_rounds > 0); replays rank by each candidate's fastest repetition"
)


def rebuild_from_runs(runs_dir: Path, out: Path) -> list[Path]:
    """Write the spaces again from kept run folders (after a change of what is extracted),
    keeping each space's name and provenance from the file already in `out`."""
    existing = {}
    for path in sorted(out.glob("*.json.gz")):
        document = json.loads(gzip.decompress(path.read_bytes()))
        existing[json.dumps(document["problem"], sort_keys=True)] = document
    written = []
    for run_dir in sorted(p for p in runs_dir.iterdir() if (p / "results.json").is_file()):
        target = parse_target("cpu", ())
        assert isinstance(target, LlvmCpuTarget)
        context = ir.Context()
        with tempfile.TemporaryDirectory(prefix="record_") as scratch:
            dispatch = load_dispatch(
                run_dir / "inputs" / "original_benchmark.mlir", None, target, Path(scratch), context
            )
        document = existing.get(json.dumps(asdict(dispatch.problem), sort_keys=True))
        if document is None:
            print(f"{run_dir.name}: no recorded space of this problem in {out}; skipped")
            continue
        baseline, rows, _ = read_run_folder_rows(run_dir)
        provenance = {**document["provenance"], "note": NOTE, "run_folder": run_dir.name}
        space = RecordedSpace(
            name=document["name"], target=document["target"], device=document["device"],
            problem=dispatch.problem, facts=asdict(read_cpu_facts(dispatch.variant_target, target.threads)),
            provenance=provenance, rows=rows, baseline=baseline,
        )  # fmt: skip
        written.append(write_recorded_space(space, out))
    return written


def record_problem(
    problem: RecordedProblem, arguments: argparse.Namespace, work_dir: Path
) -> RecordedSpace:
    """Tune one problem with the random order and turn its run folder into a recorded space."""
    model_path = work_dir / f"{problem.name}.mlir"
    model_path.write_text(problem.model_text)
    target = parse_target("cpu", ())
    assert isinstance(target, LlvmCpuTarget)
    context = ir.Context()
    with tempfile.TemporaryDirectory(prefix="record_") as scratch:
        dispatch = load_dispatch(model_path, None, target, Path(scratch), context)
    facts = read_cpu_facts(dispatch.variant_target, target.threads)
    load_before = load_average()
    started = time.perf_counter()
    started_at = datetime.datetime.now(datetime.UTC)
    result = tune_dispatch(
        TuneOptions(
            input_path=model_path, target="cpu", num_candidates=arguments.num_candidates,
            output_dir=work_dir / "runs", seed=arguments.seed, repetitions=arguments.repetitions,
            confirm_top=arguments.confirm_top, confirm_rounds=arguments.confirm_rounds,
            min_repetition_s=arguments.min_repetition_time,
            verify_top=1, use_database=False, show_progress=False,
            order="random", jobs=arguments.jobs,
        )
    )  # fmt: skip
    seconds = time.perf_counter() - started
    baseline, rows, run_info = read_run_folder_rows(result.run_dir)
    provenance = {
        "machine": f"{cpu_model()}, {len(os.sched_getaffinity(0))} cores, {platform.machine()}",
        "host_cpu": facts.cpu,
        "date": started_at.isoformat(timespec="seconds"),
        "compiler_version": compiler_version(),
        "ireetune_commit": arguments.commit,
        "load_average_before": list(load_before),
        "load_average_after": list(load_average()),
        "timing_basis": run_info.get("timing_basis", ""),
        "baseline_noise": run_info.get("baseline_noise"),
        "baseline_drift": run_info.get("baseline_drift"),
        "repetitions": arguments.repetitions,
        "confirm_top": arguments.confirm_top,
        "confirm_rounds": arguments.confirm_rounds,
        "min_repetition_s": arguments.min_repetition_time,
        "order": "random",
        "seed": arguments.seed,
        "recording_seconds": round(seconds, 1),
        "command": "python bench/record_spaces.py " + " ".join(sys.argv[1:]),
        "note": NOTE,
        "run_folder": result.run_dir.name,
    }
    return RecordedSpace(
        name=problem.name,
        target=describe_target(target.name, str(dispatch.variant_target)),
        device=describe_device(target.runtime_device),
        problem=result.problem,
        facts=asdict(facts),
        provenance=provenance,
        rows=rows,
        baseline=baseline,
    )


def render_table(folder: Path) -> str:
    """Describe each recorded space in `folder` as a row of data/spaces/README.md's table."""
    lines = [
        "| problem | candidates | measured | basis | default min ms | best min ms | within 2% "
        "of best | re-measured | start (UTC) | load average before -> after | seconds |",
        "|---|---:|---:|---|---:|---:|---:|---:|---|---|---:|",
    ]
    for space in load_recorded_spaces(folder):
        times = [t for t in space.effective_times() if t is not None]
        best = min(times)
        provenance = space.provenance
        default_ms = baseline_time(space)
        lines.append(
            f"| {space.name} | {len(space.rows)} | {len(times)} | "
            f"{'real-input' if provenance.get('timing_basis') == 'real-input' else 'dispatch'} | "
            f"{'-' if default_ms is None else f'{default_ms:.3f}'} | {best:.3f} | "
            f"{sum(1 for t in times if t <= best * 1.02)} | {len(space.remeasured)} | "
            f"{str(provenance.get('date', ''))[11:16]} | "
            f"{provenance.get('load_average_before', ['?'])[0]} -> "  # type: ignore[index]
            f"{provenance.get('load_average_after', ['?'])[0]} | "  # type: ignore[index]
            f"{round(float(str(provenance.get('recording_seconds', 0))))} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--problems", default="", help="comma-separated names (default: all)")
    parser.add_argument("--num-candidates", type=int, default=220)
    # Many short repetitions: on a shared machine the fastest of them is the estimate other
    # jobs disturb least, and short ones have the best chance of running undisturbed.
    parser.add_argument("--repetitions", type=int, default=10)
    parser.add_argument("--min-repetition-time", type=float, default=0.02, help="seconds")
    parser.add_argument("--confirm-top", type=int, default=4, help="leaders re-timed")
    parser.add_argument("--confirm-rounds", type=int, default=0, help="interleaved rounds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=0, help="parallel compiles (default: cores)")
    parser.add_argument("--out", type=Path, default=Path("data/spaces/cpu"))
    parser.add_argument("--keep-runs", type=Path, default=None, help="keep the run folders here")
    parser.add_argument("--list", action="store_true", help="list the problems and exit")
    parser.add_argument(
        "--table", action="store_true", help="print a table of the spaces in --out and exit"
    )
    parser.add_argument(
        "--rebuild-from", type=Path, default=None,
        help="write the spaces in --out again from kept run folders, measuring nothing",
    )  # fmt: skip
    arguments = parser.parse_args()
    arguments.commit = git_commit()
    if arguments.table:
        print(render_table(arguments.out))
        return 0
    if arguments.list:
        for problem in PROBLEMS:
            print(problem.name)
        return 0
    if arguments.rebuild_from is not None:
        for path in rebuild_from_runs(arguments.rebuild_from, arguments.out):
            print(f"rebuilt {path}")
        return 0
    wanted = {name for name in arguments.problems.split(",") if name}
    unknown = wanted - {p.name for p in PROBLEMS}
    if unknown:
        parser.error(f"unknown problems: {', '.join(sorted(unknown))}")
    arguments.out.mkdir(parents=True, exist_ok=True)
    for problem in PROBLEMS:
        if wanted and problem.name not in wanted:
            continue
        with tempfile.TemporaryDirectory(prefix="record_spaces_") as work_name:
            work_dir = arguments.keep_runs or Path(work_name)
            work_dir.mkdir(parents=True, exist_ok=True)
            space = record_problem(problem, arguments, work_dir)
        path = write_recorded_space(space, arguments.out)
        measured = sum(1 for time in space.effective_times() if time is not None)
        print(
            f"{problem.name}: {len(space.rows)} candidates, {measured} measured, "
            f"{space.provenance['recording_seconds']} s, load {space.provenance['load_average_before']}"
            f" -> {space.provenance['load_average_after']}: {path}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
