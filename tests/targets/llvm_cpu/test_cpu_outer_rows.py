"""A contraction with two M loops (a channels-last 1x1 convolution) tiles the outer one as the
compiler's default does: the knob `dist_o` starts at the default's tile, the space counts the
workgroups it makes, and its configs land in a whole model."""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

from ireetune.core.candidate import make_knobs
from ireetune.core.target import space_for
from ireetune.problem.contraction import ContractionProblem
from ireetune.problem.family import narrow
from ireetune.targets import parse_target
from ireetune.targets.llvm_cpu.common import CpuSpace
from ireetune.targets.llvm_cpu.space import tile_lists
from tests.conftest import dump_benchmarks
from tests.landing_support import compile_model_with_candidate, find_family_requests

# densenet121's 1x1 convolution over 480 channels at 28x28, channels-last, as its dispatch holds
# it: out[28, 28, 128] = in[480, 28, 28] x W[128, 480] over the 480 channels. Its input is a
# slice of a wider buffer (densenet121's is one of its concatenations), so the compiler keeps the
# two row loops apart instead of folding them into one of 784.
CHANNELS_LAST_1X1 = """
func.func @main(%full: tensor<480x28x32xf32>, %w: tensor<128x480xf32>) -> tensor<28x28x128xf32> {
  %zero = arith.constant 0.0 : f32
  %in = tensor.extract_slice %full[0, 0, 0] [480, 28, 28] [1, 1, 1]
      : tensor<480x28x32xf32> to tensor<480x28x28xf32>
  %empty = tensor.empty() : tensor<28x28x128xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<28x28x128xf32>) -> tensor<28x28x128xf32>
  %out = linalg.generic {
      indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d3, d0, d1)>,
                       affine_map<(d0, d1, d2, d3) -> (d2, d3)>,
                       affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>],
      iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%in, %w : tensor<480x28x28xf32>, tensor<128x480xf32>)
      outs(%init : tensor<28x28x128xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %product = arith.mulf %a, %b : f32
    %sum = arith.addf %acc, %product : f32
    linalg.yield %sum : f32
  } -> tensor<28x28x128xf32>
  return %out : tensor<28x28x128xf32>
}
"""


def _workgroups(loop_sizes: tuple[int, ...], distribution: list[int]) -> int:
    """Count the workgroups a distribution tiling makes (tile 0: the loop is not distributed)."""
    return math.prod(
        math.ceil(size / tile) for size, tile in zip(loop_sizes, distribution, strict=True) if tile
    )


def test_the_outer_rows_start_at_the_default_s_tile_and_every_candidate_fills_the_threads(
    tmp_path: Path,
) -> None:
    # The default for znver4 (cross-compiled, so on any host) tiles the 28 rows by 4: 14
    # workgroups. Candidates that kept the rows whole made 2 and ran at half its speed on two
    # threads (densenet121, 2026-12-05).
    (request,) = find_family_requests(
        CHANNELS_LAST_1X1, tmp_path / "requests", "contraction", "znver4"
    )
    (benchmark,) = [
        path
        for path in dump_benchmarks(CHANNELS_LAST_1X1, tmp_path / "dump", "znver4")
        if "distribution = [" in path.read_text()
    ]
    found = re.search(r"distribution = \[([0-9, ]+)\]", benchmark.read_text())
    assert found is not None
    default_distribution = [int(tile) for tile in found.group(1).split(",")]
    problem = narrow(request.problem, ContractionProblem)
    assert problem.m_dims == (0, 1) and default_distribution[0] < 28
    assert request.default_knobs is not None
    assert dict(request.default_knobs)["dist_o"] == default_distribution[0]
    assert tile_lists(problem, request.default_knobs)["distribution"] == default_distribution

    space = space_for(parse_target("cpu:znver4"), problem)
    assert isinstance(space, CpuSpace)
    threads = space.facts(request).threads
    candidates = list(itertools.islice(space.generate(request), 24))
    assert any(dict(knobs)["dist_o"] != default_distribution[0] for knobs in candidates)
    for knobs in candidates:
        distribution = tile_lists(problem, knobs)["distribution"]
        assert _workgroups(problem.loop_sizes, distribution) >= threads, dict(knobs)


def test_a_config_that_tiles_the_outer_rows_lands_in_a_whole_model(tmp_path: Path) -> None:
    (request,) = find_family_requests(CHANNELS_LAST_1X1, tmp_path / "requests", "contraction")
    assert request.default_knobs is not None
    knobs = dict(request.default_knobs)
    other = 7 if knobs["dist_o"] != 7 else 14
    candidate = make_knobs({**knobs, "dist_o": other})
    model = tmp_path / "model.mlir"
    model.write_text(CHANNELS_LAST_1X1)
    report = compile_model_with_candidate(model, request.problem, candidate, tmp_path)
    assert report.landed, report
