"""Measure the share of Vulkan (SPIR-V) candidates that compile, per Vulkan target and family.

For each (target, problem) pair, dumps the problem's one dispatch for that target, runs
`tune_dispatch` with `--stop-after compile` (compile only; no device needed) and counts the
candidates: compiled to a binary that differs from the default's (the config applied), compiled
but identical to the default ("not applied"), duplicates of an earlier candidate, and failures
with their first error line. Prints one Markdown row per pair, a JSON line per pair on stderr,
and a summary JSON line for docs/benchmarks.md (issue 24's goal: at least 99% compile).

    python bench/vulkan_compile_success.py --candidates 24 [--only rdna3] [--failures]
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from ireetune.core.errors import IreetuneError
from ireetune.core.records import CandidateStatus
from ireetune.flows.dispatch.options import StopAfter
from ireetune.flows.dispatch.tuner import TuneOptions, tune_dispatch
from ireetune.targets import parse_target

_MATMUL = """
func.func @main(%lhs: tensor<{m}x{k}x{t}>, %rhs: tensor<{k}x{n}x{t}>) -> tensor<{m}x{n}xf32> {{
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<{m}x{n}xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  %r = linalg.matmul ins(%lhs, %rhs : tensor<{m}x{k}x{t}>, tensor<{k}x{n}x{t}>)
                     outs(%init : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  return %r : tensor<{m}x{n}xf32>
}}
"""
_BATCH_MATMUL = """
func.func @main(%lhs: tensor<8x64x96x{t}>, %rhs: tensor<8x96x128x{t}>) -> tensor<8x64x128xf32> {{
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<8x64x128xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<8x64x128xf32>) -> tensor<8x64x128xf32>
  %r = linalg.batch_matmul ins(%lhs, %rhs : tensor<8x64x96x{t}>, tensor<8x96x128x{t}>)
                           outs(%init : tensor<8x64x128xf32>) -> tensor<8x64x128xf32>
  return %r : tensor<8x64x128xf32>
}}
"""
_CONV = """
func.func @main(%x: tensor<2x18x18x32xf32>, %w: tensor<3x3x32x64xf32>) -> tensor<2x16x16x64xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<2x16x16x64xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<2x16x16x64xf32>) -> tensor<2x16x16x64xf32>
  %r = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
      ins(%x, %w : tensor<2x18x18x32xf32>, tensor<3x3x32x64xf32>)
      outs(%init : tensor<2x16x16x64xf32>) -> tensor<2x16x16x64xf32>
  return %r : tensor<2x16x16x64xf32>
}
"""
_MMT = """
func.func @main(%lhs: tensor<128x256xf16>, %rhs: tensor<192x256xf16>) -> tensor<128x192xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<128x192xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<128x192xf32>) -> tensor<128x192xf32>
  %r = linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>,
                                      affine_map<(d0, d1, d2) -> (d1, d2)>,
                                      affine_map<(d0, d1, d2) -> (d0, d1)>]
      ins(%lhs, %rhs : tensor<128x256xf16>, tensor<192x256xf16>)
      outs(%init : tensor<128x192xf32>) -> tensor<128x192xf32>
  return %r : tensor<128x192xf32>
}
"""
_CONV_UNIT_STRIDED = """
func.func @main(%x: tensor<1x33x33x24xf32>, %w: tensor<3x3x24x48xf32>) -> tensor<1x16x16x48xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<1x16x16x48xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<1x16x16x48xf32>) -> tensor<1x16x16x48xf32>
  %r = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : tensor<2xi64>, strides = dense<2> : tensor<2xi64>}
      ins(%x, %w : tensor<1x33x33x24xf32>, tensor<3x3x24x48xf32>)
      outs(%init : tensor<1x16x16x48xf32>) -> tensor<1x16x16x48xf32>
  return %r : tensor<1x16x16x48xf32>
}
"""
MODELS = {
    "matmul_f32": _MATMUL.format(m=256, n=512, k=384, t="f32"),
    "matmul_odd_f32": _MATMUL.format(m=100, n=60, k=36, t="f32"),
    "mmt_f16": _MMT,
    "matmul_i8": _MATMUL.format(m=128, n=256, k=192, t="i8")
    .replace("arith.constant 0.0 : f32", "arith.constant 0 : i32")
    .replace("xf32", "xi32")
    .replace(": f32)", ": i32)"),
    "conv_unit_batch_strided_f32": _CONV_UNIT_STRIDED,
    "matmul_f16": _MATMUL.format(m=256, n=512, k=384, t="f16"),
    "batch_matmul_f32": _BATCH_MATMUL.format(t="f32"),
    "batch_matmul_f16": _BATCH_MATMUL.format(t="f16"),
    "conv_nhwc_f32": _CONV,
}
TARGETS = (
    "vulkan:lavapipe", "vulkan:valhall4", "vulkan:adreno", "vulkan:rdna3", "vulkan:ampere",
    "vulkan:gfx942",
)  # fmt: skip


def dump(model_text: str, target_name: str, folder: Path) -> Path:
    """Compile a one-op model with per-dispatch benchmark dumps; return its one dispatch."""
    folder.mkdir(parents=True, exist_ok=True)
    model = folder / "model.mlir"
    model.write_text(model_text)
    compiler = str(Path(sys.executable).parent / "iree-compile")
    subprocess.run(
        [compiler, str(model), *parse_target(target_name).compile_flags(),
         f"--iree-hal-dump-executable-benchmarks-to={folder / 'dumps'}",
         "--iree-codegen-add-tuner-attributes", "-o", str(folder / "model.vmfb")],
        check=True, capture_output=True,
    )  # fmt: skip
    (path,) = sorted((folder / "dumps").glob("*_benchmark.mlir"))
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=24)
    parser.add_argument("--only", default="", help="run only targets whose name contains this")
    parser.add_argument("--problems", default="", help="comma-separated problems (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--failures", action="store_true", help="print each failure's knobs")
    args = parser.parse_args()
    problems = [p for p in args.problems.split(",") if p] or list(MODELS)
    print("| target | problem | family | generated | compiled, applied | not applied | duplicates | failed | first failure |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    totals: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for target_name in TARGETS:
        if args.only not in target_name:
            continue
        for name in problems:
            with tempfile.TemporaryDirectory(prefix="ireetune_vk_") as scratch:
                folder = Path(scratch)
                try:
                    benchmark = dump(MODELS[name], target_name, folder / "dump")
                    result = tune_dispatch(
                        TuneOptions(
                            input_path=benchmark, target=target_name,
                            num_candidates=args.candidates, output_dir=folder / "runs",
                            stop_after=StopAfter.COMPILE, show_progress=False,
                            use_database=False, seed=args.seed,
                        )
                    )  # fmt: skip
                except IreetuneError as error:
                    print(f"| {target_name} | {name} | - | 0 | - | - | - | - | refused: {error} |")
                    continue
                except subprocess.CalledProcessError as error:
                    # IREE's own default does not compile (int8 on adreno, say): nothing to tune.
                    lines = error.stderr.decode(errors="replace").splitlines()
                    first = next((line for line in lines if "error:" in line), "failed")[:90]
                    print(f"| {target_name} | {name} | - | 0 | - | - | - | - | default: {first} |")
                    continue
            candidates = result.records[1:]
            statuses = collections.Counter(r.status for r in candidates)
            not_applied = statuses[CandidateStatus.NOT_APPLIED]
            failed = [r for r in candidates if not r.binary_hash]
            first = failed[0].reason.splitlines()[0][:90] if failed else ""
            family = result.problem.family
            applied = statuses[CandidateStatus.COMPILED]
            key = f"{target_name} {family}"
            totals[key][0] += len(candidates)
            totals[key][1] += len(candidates) - len(failed) - not_applied
            print(
                f"| {target_name} | {result.problem.signature} | {family} | {len(candidates)} "
                f"| {applied} | {not_applied} | {statuses[CandidateStatus.DUPLICATE]} "
                f"| {len(failed)} | {first} |",
                flush=True,
            )
            if args.failures:
                for record in failed:
                    print(f"    failed: {record.knobs} -- {record.reason.splitlines()[0][:160]}")
            print(json.dumps({
                "target": target_name, "problem": result.problem.signature, "family": family,
                "generated": len(candidates), "compiled_applied": applied,
                "not_applied": not_applied, "failed": len(failed),
            }), file=sys.stderr, flush=True)  # fmt: skip
    print(json.dumps({
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="minutes"),
        "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores",
        "compile_success": {key: f"{ok}/{total}" for key, (total, ok) in sorted(totals.items())},
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
