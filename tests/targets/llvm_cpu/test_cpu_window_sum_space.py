"""The CPU space for a local response normalisation's window sum over channels: the default's
neighbours first, a real `tune-dispatch` that compiles distinct candidates, and a spec that lands
its configuration in a whole model."""

# ruff: noqa: E501  (MLIR text is data, kept verbatim)

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

from ireetune.core.target import SpaceRequest, space_for
from ireetune.problem.convolution import ConvolutionProblem
from ireetune.targets import parse_target
from ireetune.targets.llvm_cpu.common import CpuFacts
from ireetune.targets.llvm_cpu.elementwise_space import (
    CpuWindowSumSpace,
    compute_window_sum_sizes,
    parse_default_window_sum_knobs,
    window_sum_tile_lists,
)
from ireetune.targets.llvm_cpu.features import has_features
from ireetune.targets.z3_enumerate import distance_to
from tests.conftest import FAST_RUN_ARGS, TEST_CPU, TEST_TARGET
from tests.landing_support import compile_model_with_candidate, find_family_requests

AVX2 = CpuFacts("haswell", 32, 16, 32768, 1 << 20, threads=2, max_vector_bytes=32768)
# A local response normalisation over 16 channels of 17x17 images (its squares padded by two
# channels each side), the division fused after the window sum, and a transpose in a dispatch of
# its own: the window sum is not alone in the model.
LRN_AND_TRANSPOSE_MODEL = """
#c = affine_map<(d0, d1, d2, d3) -> (d0 + d3, d1, d2)>
#w = affine_map<(d0, d1, d2, d3) -> (d3)>
#o = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
func.func @main(%squares: tensor<20x17x17xf32>, %x: tensor<16x17x17xf32>, %y: tensor<64x32xf32>) -> (tensor<16x17x17xf32>, tensor<32x64xf32>) {
  %zero = arith.constant 0.0 : f32
  %window = tensor.empty() : tensor<5xf32>
  %e = tensor.empty() : tensor<16x17x17xf32>
  %i = linalg.fill ins(%zero : f32) outs(%e : tensor<16x17x17xf32>) -> tensor<16x17x17xf32>
  %sum = linalg.generic {indexing_maps = [#c, #w, #o], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%squares, %window : tensor<20x17x17xf32>, tensor<5xf32>) outs(%i : tensor<16x17x17xf32>) {
    ^bb0(%in: f32, %unused: f32, %acc: f32):
      %a = arith.addf %in, %acc : f32
      linalg.yield %a : f32
  } -> tensor<16x17x17xf32>
  %r = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%sum, %x : tensor<16x17x17xf32>, tensor<16x17x17xf32>) outs(%e : tensor<16x17x17xf32>) {
    ^bb0(%s: f32, %in: f32, %out: f32):
      %d = arith.divf %in, %s : f32
      linalg.yield %d : f32
  } -> tensor<16x17x17xf32>
  %et = tensor.empty() : tensor<32x64xf32>
  %t = linalg.transpose ins(%y : tensor<64x32xf32>) outs(%et : tensor<32x64xf32>) permutation = [1, 0]
  return %r, %t : tensor<16x17x17xf32>, tensor<32x64xf32>
}
"""


def _window_sum_request(
    folder: Path, cpu: str = TEST_CPU
) -> tuple[ConvolutionProblem, SpaceRequest]:
    (request,) = find_family_requests(LRN_AND_TRANSPOSE_MODEL, folder, "convolution", cpu)
    assert isinstance(request.problem, ConvolutionProblem)
    return request.problem, request


def test_the_space_starts_at_the_haswell_defaults_neighbours(tmp_path: Path) -> None:
    problem, request = _window_sum_request(tmp_path / "dump", "haswell")
    # IREE's default on haswell: distribution = [2, 1, 17, 0], vector_common_parallel =
    # [1, 1, 8, 0], vector_reduction = [0, 0, 0, 8] (loops c, h, w and the window).
    assert request.default_knobs == (
        ("dist_0", 2), ("dist_1", 1), ("dist_2", 17), ("vec_0", 1), ("vec_1", 1), ("vec_2", 8), ("vec_k", 8),
    )  # fmt: skip
    assert compute_window_sum_sizes(problem).window == 5
    default = request.default_knobs
    assert (
        parse_default_window_sum_knobs(problem, window_sum_tile_lists(problem, default)) == default
    )
    space = CpuWindowSumSpace(threads=2)
    generated = space.enumerate(
        SpaceRequest(problem, request.variant_target, default, 0, dataclasses.asdict(AVX2)), ()
    )
    first = [next(generated) for _ in range(6)]
    # Each of the first is one knob away from the default; none is the default.
    assert [len(set(knobs) - set(default)) for knobs in first] == [1] * 6, first
    assert default not in first
    # The learned cost model has no features for a window sum (its heuristic orders it).
    assert not has_features(problem)
    assert parse_target("cpu").features(request) is None
    ordered = [knobs for knobs, _ in space.order(request, first)]
    assert sorted(ordered) == sorted(first)
    assert distance_to(ordered[0], default) <= distance_to(ordered[-1], default)


def test_tune_a_window_sum_dispatch_on_the_cpu(tmp_path: Path) -> None:
    model = tmp_path / "lrn.mlir"
    model.write_text(LRN_AND_TRANSPOSE_MODEL)
    result = subprocess.run(
        [
            sys.executable, "-m", "ireetune.cli", "tune-dispatch", str(model), "--dispatch", "0",
            "--target", TEST_TARGET, "--num-candidates", "3", "--output-dir", str(tmp_path / "out"),
            "--no-db", *FAST_RUN_ARGS,
        ],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "problem: conv_16x17x17x5_f32_f32_f32" in result.stdout, result.stdout
    (run_dir,) = (tmp_path / "out").iterdir()
    candidates = json.loads((run_dir / "results.json").read_text())["candidates"]
    statuses = [c["status"] for c in candidates[1:]]
    # Every candidate compiled, landed (its binary is not the default's) and was timed.
    assert len(statuses) == 3 and set(statuses) <= {"measured", "verified"}, candidates
    hashes = [c["binary_hash"] for c in candidates]
    assert len(set(hashes)) == len(hashes), candidates
    assert "DoubleTilingExpert" in (run_dir / "specs" / "1_spec.mlir").read_text()


def test_a_window_sum_spec_lands_in_a_whole_model(tmp_path: Path) -> None:
    problem, request = _window_sum_request(tmp_path / "dump")
    space = space_for(parse_target(TEST_TARGET), problem)
    assert isinstance(space, CpuWindowSumSpace)
    knobs = next(space.generate(request))
    assert knobs != request.default_knobs
    report = compile_model_with_candidate(
        tmp_path / "dump" / "model.mlir", problem, knobs, tmp_path
    )
    # The configuration dump of the whole model shows the candidate's tiles on the window sum.
    (landed,) = report.checks
    tiles = window_sum_tile_lists(problem, knobs)
    assert landed.landed, landed
    assert f"vector_reduction = {tiles['vector_reduction']}" in landed.found, landed
    assert f"distribution = {tiles['distribution']}" in landed.found, landed
