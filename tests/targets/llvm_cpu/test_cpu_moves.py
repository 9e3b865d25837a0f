"""Copies, transposes and broadcasts on the CPU: a transpose is searched by the element-wise space
(the default's neighbours first), `tune-dispatch` compiles distinct candidates for it, and a spec
built for it lands its configuration in a whole model."""

# ruff: noqa: E501  (MLIR text is data, kept verbatim)

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ireetune.core.target import SpaceRequest, space_for
from ireetune.problem.elementwise import ElementwiseProblem
from ireetune.problem.generic import NEUTRAL_BODY_OPS
from ireetune.targets import parse_target
from ireetune.targets.llvm_cpu.elementwise_space import (
    CpuElementwiseSpace,
    elementwise_tile_lists,
)
from tests.conftest import FAST_RUN_ARGS, TEST_TARGET
from tests.landing_support import compile_model_with_candidate, find_family_requests

# A transpose returned as it is (a transpose a matmul reads folds into the matmul), a matmul and
# a broadcast of a bias: three dispatches, of which the transpose is one.
TRANSPOSE_MODEL = """
func.func @main(%x: tensor<96x64xf32>, %a: tensor<64x96xf32>, %w: tensor<96x128xf32>, %b: tensor<128xf32>) -> (tensor<64x96xf32>, tensor<64x128xf32>, tensor<64x32x128xf32>) {
  %zero = arith.constant 0.0 : f32
  %et = tensor.empty() : tensor<64x96xf32>
  %t = linalg.transpose ins(%x : tensor<96x64xf32>) outs(%et : tensor<64x96xf32>) permutation = [1, 0]
  %e = tensor.empty() : tensor<64x128xf32>
  %i = linalg.fill ins(%zero : f32) outs(%e : tensor<64x128xf32>) -> tensor<64x128xf32>
  %m = linalg.matmul ins(%a, %w : tensor<64x96xf32>, tensor<96x128xf32>) outs(%i : tensor<64x128xf32>) -> tensor<64x128xf32>
  %eb = tensor.empty() : tensor<64x32x128xf32>
  %bb = linalg.broadcast ins(%b : tensor<128xf32>) outs(%eb : tensor<64x32x128xf32>) dimensions = [0, 1]
  return %t, %m, %bb : tensor<64x96xf32>, tensor<64x128xf32>, tensor<64x32x128xf32>
}
"""


def _move_request(folder: Path, loop_sizes: tuple[int, ...]) -> SpaceRequest:
    """Return the model's copy-like problem of these loop sizes (IREE collapses the broadcast's
    64x32 rows into one loop)."""
    requests = find_family_requests(TRANSPOSE_MODEL, folder, "elementwise")
    (request,) = [r for r in requests if r.problem.loop_sizes == loop_sizes]
    assert isinstance(request.problem, ElementwiseProblem) and all(
        op in NEUTRAL_BODY_OPS for op in request.problem.body
    )
    return request


@pytest.mark.parametrize("loop_sizes", [(96, 64), (2048, 128)], ids=["transpose", "broadcast"])
def test_a_move_spec_lands_in_a_whole_model(loop_sizes: tuple[int, ...], tmp_path: Path) -> None:
    request = _move_request(tmp_path / "dump", loop_sizes)
    problem = request.problem
    space = space_for(parse_target(TEST_TARGET), problem)
    assert isinstance(space, CpuElementwiseSpace) and request.default_knobs is not None
    knobs = next(space.generate(request))
    # The first candidate is a neighbour of the default: one knob moved.
    assert len(set(knobs) - set(request.default_knobs)) == 1, (knobs, request.default_knobs)
    report = compile_model_with_candidate(
        tmp_path / "dump" / "model.mlir", problem, knobs, tmp_path
    )
    # The configuration dump of the whole model (transpose, matmul, broadcast) shows the
    # candidate's tiles on that op, and the spec configured nothing else.
    (landed,) = report.checks
    tiles = elementwise_tile_lists(problem, knobs)  # type: ignore[arg-type]
    assert landed.landed, landed
    assert landed.found == (
        f"#iree_cpu.lowering_config<distribution = {tiles['distribution']}, "
        f"vector_common_parallel = {tiles['vector_common_parallel']}>"
    )


def test_tune_a_transpose_dispatch_on_the_cpu(tmp_path: Path) -> None:
    request = _move_request(tmp_path / "dump", (96, 64))
    model = tmp_path / "dump" / "model.mlir"
    result = subprocess.run(
        [
            sys.executable, "-m", "ireetune.cli", "tune-dispatch", str(model), "--dispatch", "0",
            "--target", TEST_TARGET, "--num-candidates", "3", "--output-dir", str(tmp_path / "out"),
            "--no-db", *FAST_RUN_ARGS,
        ],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"problem: {request.problem.signature}" in result.stdout, result.stdout
    (run_dir,) = (tmp_path / "out").iterdir()
    candidates = json.loads((run_dir / "results.json").read_text())["candidates"]
    statuses = [c["status"] for c in candidates[1:]]
    # Every candidate compiled, landed (its binary is not the default's) and was timed.
    assert len(statuses) == 3 and set(statuses) <= {"measured", "verified"}, candidates
    hashes = [c["binary_hash"] for c in candidates]
    assert len(set(hashes)) == len(hashes), candidates
