"""Measure goal P6: the share of generated candidates that compile, per target and op family.

For each (target, problem) pair, dumps the problem's one dispatch, runs `tune_dispatch` with
`--stop-after compile` (compile only; no GPU needed) and counts the candidates: compiled to a
binary that differs from the default's (the config applied), compiled but identical to the
default ("not applied"), duplicates of an earlier candidate, and failures with their first error
line. Prints one Markdown row per pair and a JSON line per pair for docs/benchmarks.md.

    python bench/compile_success.py --candidates 24 [--only cuda]
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
import time
from pathlib import Path

from ireetune.core.errors import IreetuneError
from ireetune.core.records import CandidateStatus
from ireetune.flows.dispatch.options import StopAfter
from ireetune.flows.dispatch.tuner import TuneOptions, tune_dispatch
from ireetune.targets import parse_target

MODELS = {
    "mmt_f16": """
func.func @main(%lhs: tensor<256x512xf16>, %rhs: tensor<384x512xf16>) -> tensor<256x384xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<256x384xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<256x384xf32>) -> tensor<256x384xf32>
  %r = linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>,
                                      affine_map<(d0, d1, d2) -> (d1, d2)>,
                                      affine_map<(d0, d1, d2) -> (d0, d1)>]
      ins(%lhs, %rhs : tensor<256x512xf16>, tensor<384x512xf16>)
      outs(%init : tensor<256x384xf32>) -> tensor<256x384xf32>
  return %r : tensor<256x384xf32>
}
""",
    "matmul_f32": """
func.func @main(%lhs: tensor<256x384xf32>, %rhs: tensor<384x512xf32>) -> tensor<256x512xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<256x512xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<256x512xf32>) -> tensor<256x512xf32>
  %r = linalg.matmul ins(%lhs, %rhs : tensor<256x384xf32>, tensor<384x512xf32>)
                     outs(%init : tensor<256x512xf32>) -> tensor<256x512xf32>
  return %r : tensor<256x512xf32>
}
""",
    "batch_matmul_f16": """
func.func @main(%lhs: tensor<8x128x256xf16>, %rhs: tensor<8x256x128xf16>) -> tensor<8x128x128xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<8x128x128xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<8x128x128xf32>) -> tensor<8x128x128xf32>
  %r = linalg.batch_matmul ins(%lhs, %rhs : tensor<8x128x256xf16>, tensor<8x256x128xf16>)
                           outs(%init : tensor<8x128x128xf32>) -> tensor<8x128x128xf32>
  return %r : tensor<8x128x128xf32>
}
""",
    "batch_matmul_f32": """
func.func @main(%lhs: tensor<8x64x96xf32>, %rhs: tensor<8x96x128xf32>) -> tensor<8x64x128xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<8x64x128xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<8x64x128xf32>) -> tensor<8x64x128xf32>
  %r = linalg.batch_matmul ins(%lhs, %rhs : tensor<8x64x96xf32>, tensor<8x96x128xf32>)
                           outs(%init : tensor<8x64x128xf32>) -> tensor<8x64x128xf32>
  return %r : tensor<8x64x128xf32>
}
""",
    "conv_nhwc_f16": """
func.func @main(%x: tensor<1x18x18x64xf16>, %w: tensor<3x3x64x128xf16>) -> tensor<1x16x16x128xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<1x16x16x128xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<1x16x16x128xf32>) -> tensor<1x16x16x128xf32>
  %r = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
      ins(%x, %w : tensor<1x18x18x64xf16>, tensor<3x3x64x128xf16>)
      outs(%init : tensor<1x16x16x128xf32>) -> tensor<1x16x16x128xf32>
  return %r : tensor<1x16x16x128xf32>
}
""",
    "conv_nchw_f32": """
func.func @main(%x: tensor<1x64x30x30xf32>, %w: tensor<64x64x3x3xf32>) -> tensor<1x64x28x28xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<1x64x28x28xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<1x64x28x28xf32>) -> tensor<1x64x28x28xf32>
  %r = linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
      ins(%x, %w : tensor<1x64x30x30xf32>, tensor<64x64x3x3xf32>)
      outs(%init : tensor<1x64x28x28xf32>) -> tensor<1x64x28x28xf32>
  return %r : tensor<1x64x28x28xf32>
}
""",
    "attention_f16": """
#q = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>
#k = affine_map<(d0, d1, d2, d3, d4) -> (d0, d3, d2)>
#v = affine_map<(d0, d1, d2, d3, d4) -> (d0, d3, d4)>
#s = affine_map<(d0, d1, d2, d3, d4) -> ()>
#o = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d4)>
func.func @main(%q: tensor<8x256x64xf16>, %k: tensor<8x512x64xf16>, %v: tensor<8x512x64xf16>) -> tensor<8x256x64xf16> {
  %scale = arith.constant 0.125 : f16
  %empty = tensor.empty() : tensor<8x256x64xf16>
  %r = iree_linalg_ext.attention <{indexing_maps = [#q, #k, #v, #s, #o]}>
      ins(%q, %k, %v, %scale : tensor<8x256x64xf16>, tensor<8x512x64xf16>, tensor<8x512x64xf16>, f16)
      outs(%empty : tensor<8x256x64xf16>) {
    ^bb0(%score: f32):
      iree_linalg_ext.yield %score : f32
  } -> tensor<8x256x64xf16>
  return %r : tensor<8x256x64xf16>
}
""",
    "softmax_f32": """
func.func @main(%x: tensor<64x1024xf32>) -> tensor<64x1024xf32> {
  %empty = tensor.empty() : tensor<64x1024xf32>
  %r = linalg.softmax dimension(1) ins(%x : tensor<64x1024xf32>) outs(%empty : tensor<64x1024xf32>) -> tensor<64x1024xf32>
  return %r : tensor<64x1024xf32>
}
""",
    "row_sum_f32": """
func.func @main(%x: tensor<64x4096xf32>) -> tensor<64xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<64xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<64xf32>) -> tensor<64xf32>
  %r = linalg.reduce ins(%x : tensor<64x4096xf32>) outs(%init : tensor<64xf32>) dimensions = [1]
    (%in: f32, %acc: f32) { %s = arith.addf %in, %acc : f32
      linalg.yield %s : f32 }
  return %r : tensor<64xf32>
}
""",
}
PLAN = {
    "cpu": ["matmul_f32", "batch_matmul_f32", "conv_nchw_f32", "conv_nhwc_f32_cpu", "softmax_f32", "row_sum_f32", "attention_f16"],
    "cuda:sm_80": ["mmt_f16", "matmul_f32", "batch_matmul_f16", "conv_nhwc_f16", "attention_f16", "softmax_f32", "row_sum_f32"],
    "rocm:gfx942": ["mmt_f16", "matmul_f32", "batch_matmul_f16", "conv_nhwc_f16", "attention_f16", "softmax_f32", "row_sum_f32"],
}  # fmt: skip
MODELS["conv_nhwc_f32_cpu"] = MODELS["conv_nhwc_f16"].replace("xf16>", "xf32>")


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
    args = parser.parse_args()
    print(
        "| target | problem | family | generated | compiled, applied | not applied | duplicates | failed | first failure |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    totals: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for target_name, problems in PLAN.items():
        if args.only not in target_name:
            continue
        for name in problems:
            with tempfile.TemporaryDirectory(prefix="ireetune_p6_") as scratch:
                folder = Path(scratch)
                started = time.monotonic()
                try:
                    benchmark = dump(MODELS[name], target_name, folder / "dump")
                    result = tune_dispatch(
                        TuneOptions(
                            input_path=benchmark, target=target_name,
                            num_candidates=args.candidates, output_dir=folder / "runs",
                            stop_after=StopAfter.COMPILE, show_progress=False, use_database=False,
                        )
                    )  # fmt: skip
                except IreetuneError as error:
                    print(f"| {target_name} | {name} | - | 0 | - | - | - | - | refused: {error} |")
                    continue
                candidates = result.records[1:]
                statuses = collections.Counter(r.status for r in candidates)
                failed = [r for r in candidates if not r.binary_hash]
                first = failed[0].reason.splitlines()[0][:90] if failed else ""
                family = result.problem.family
                applied = statuses[CandidateStatus.COMPILED]
                not_applied = statuses[CandidateStatus.NOT_APPLIED]
                duplicates = statuses[CandidateStatus.DUPLICATE]
                totals[f"{target_name} {family}"][0] += len(candidates)
                totals[f"{target_name} {family}"][1] += len(candidates) - len(failed)
                print(
                    f"| {target_name} | {result.problem.signature} | {family} | {len(candidates)} "
                    f"| {applied} | {not_applied} | {duplicates} | {len(failed)} | {first} |",
                    flush=True,
                )
                print(json.dumps({
                    "target": target_name, "problem": result.problem.signature, "family": family,
                    "generated": len(candidates), "compiled_applied": applied,
                    "not_applied": not_applied, "duplicates": duplicates, "failed": len(failed),
                    "seconds": round(time.monotonic() - started, 1), "notes": list(result.notes),
                }), file=sys.stderr, flush=True)  # fmt: skip
    print(json.dumps({
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="minutes"),
        "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores",
        "load_average": os.getloadavg()[0],
        "compile_success": {key: f"{ok}/{total}" for key, (total, ok) in sorted(totals.items())},
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
