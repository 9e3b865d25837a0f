"""The llvm-cpu convolution space (pure, no compiler)."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
from iree.compiler import ir

from ireetune.core.candidate import Knobs
from ireetune.core.errors import IreetuneError
from ireetune.core.target import space_for, spec_flags
from ireetune.problem.convolution import ConvolutionProblem
from ireetune.problem.root_op import find_root_op, parse_problem
from ireetune.spec.apply import compile_with_spec, resolve_compile_target
from ireetune.spec.builder import build_configuration_spec
from ireetune.spec.inspect import list_matchers
from ireetune.spec.source import read_spec
from ireetune.targets import parse_target
from ireetune.targets.llvm_cpu.common import CpuFacts, order_pool, score_near_default
from ireetune.targets.llvm_cpu.conv_space import (
    compute_conv_sizes,
    conv_tile_lists,
    describe_conv_refusal,
    enumerate_conv_space,
    parse_default_conv_knobs,
    score_conv_candidate,
)
from ireetune.targets.vulkan.space import compute_conv_sizes as spirv_conv_sizes
from ireetune.targets.z3_enumerate import distance_to
from tests.conftest import FAST_RUN_ARGS, TEST_TARGET, dump_benchmarks, nchw_conv_problem

# Sort a pool by descending score, the heuristic's less the distance to the compiler's default.
order_conv_candidates = partial(order_pool, score_near_default(score_conv_candidate))
AVX512 = CpuFacts("znver4", 64, 32, 32768, 1 << 20, threads=2, max_vector_bytes=32768)
# ResNet-50's 3x3 convolution on 56x56 images in NCHW: loops (n, f, oh, ow, c, kh, kw).
CONV = nchw_conv_problem(1, 64, 64, 56, 3)


def test_conv_candidates_obey_register_vector_and_nesting_rules() -> None:
    sizes = compute_conv_sizes(CONV)
    candidates = [
        dict(k) for k in itertools.islice(enumerate_conv_space(sizes, AVX512, seed=0), 60)
    ]
    assert len(candidates) == 60
    for c in candidates:
        assert -(-c["vec_f"] * c["vec_ow"] // 16) + 2 <= 32
        assert c["vec_f"] * c["vec_ow"] * c["vec_c"] * 4 < 32768
        assert c["dist_f"] % c["vec_f"] == 0 and c["dist_ow"] % c["vec_ow"] == 0
        assert 64 % c["vec_c"] == 0 and 56 % c["dist_oh"] == 0


def test_conv_tiles_follow_the_decomposition_rules_and_round_trip() -> None:
    knobs = (
        ("dist_f", 32),
        ("dist_oh", 8),
        ("dist_ow", 56),
        ("vec_c", 8),
        ("vec_f", 16),
        ("vec_ow", 8),
    )
    tiles = conv_tile_lists(CONV, knobs)
    assert tiles == {
        "distribution": [1, 32, 8, 56, 0, 0, 0],
        "vector_common_parallel": [1, 16, 1, 8, 0, 0, 0],
        "vector_reduction": [0, 0, 0, 0, 8, 1, 1],
    }
    assert parse_default_conv_knobs(CONV, tiles) == knobs
    # An untiled loop (0) is one tile of the whole loop, and the ordering scores it; a vector
    # tile of 0 has no form here. Read as a tile of 0, scoring divided by zero.
    untiled = {**tiles, "distribution": [1, 32, 0, 0, 0, 0, 0]}
    default = parse_default_conv_knobs(CONV, untiled)
    assert default == tuple(sorted({**dict(knobs), "dist_oh": 56, "dist_ow": 56}.items()))
    sizes = compute_conv_sizes(CONV)
    pool = list(itertools.islice(enumerate_conv_space(sizes, AVX512, 1, default), 8))
    assert default not in pool
    assert len(order_conv_candidates(sizes, AVX512, pool, seed=1, default=default)) == 8
    no_vector = {**tiles, "vector_reduction": [0, 0, 0, 0, 0, 1, 1]}
    assert parse_default_conv_knobs(CONV, no_vector) is None


def test_conv_ordering_prefers_small_blocks_and_is_reproducible() -> None:
    sizes = compute_conv_sizes(CONV)
    pool = list(itertools.islice(enumerate_conv_space(sizes, AVX512, seed=1), 40))
    ordered = order_conv_candidates(sizes, AVX512, pool, seed=1)
    assert ordered == order_conv_candidates(sizes, AVX512, list(reversed(pool)), seed=1)
    small = (
        ("dist_f", 32),
        ("dist_oh", 8),
        ("dist_ow", 56),
        ("vec_c", 8),
        ("vec_f", 8),
        ("vec_ow", 8),
    )
    large = (
        ("dist_f", 64),
        ("dist_oh", 8),
        ("dist_ow", 56),
        ("vec_c", 8),
        ("vec_f", 64),
        ("vec_ow", 7),
    )
    tiny_c = (
        ("dist_f", 32),
        ("dist_oh", 8),
        ("dist_ow", 56),
        ("vec_c", 1),
        ("vec_f", 8),
        ("vec_ow", 8),
    )
    ranked = order_conv_candidates(sizes, AVX512, [large, tiny_c, small], seed=0)
    assert [knobs for knobs, _ in ranked] == [small, large, tiny_c]


def test_tune_a_real_nchw_convolution_on_the_cpu(conv_model: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ireetune.cli",
            "tune-dispatch",
            str(conv_model),
            "--num-candidates",
            "4",
            "--output-dir",
            str(tmp_path),
            "--no-db",
            *FAST_RUN_ARGS,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    assert "problem: conv_1x32x16x16x16x3x3_f32_f32_f32   target: cpu" in result.stdout
    (run_dir,) = tmp_path.iterdir()
    candidates = json.loads((run_dir / "results.json").read_text())["candidates"]
    statuses = [c["status"] for c in candidates[1:]]
    assert statuses.count("compile-failed") == 0, candidates
    assert "not-applied" not in statuses
    spec = (run_dir / "specs" / "1_spec.mlir").read_text()
    assert "transform.iree.match.convolution" in spec and "ConvTileAndDecomposeExpert" in spec


# A batch-1 NHWC 3x3 convolution, as in every image model run on one image.
BATCH_1_NHWC_MODEL = """
func.func @main(%x: tensor<1x10x10x8xf32>, %w: tensor<3x3x8x16xf32>) -> tensor<1x8x8x16xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<1x8x8x16xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<1x8x8x16xf32>) -> tensor<1x8x8x16xf32>
  %r = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
      ins(%x, %w : tensor<1x10x10x8xf32>, tensor<3x3x8x16xf32>)
      outs(%init : tensor<1x8x8x16xf32>) -> tensor<1x8x8x16xf32>
  return %r : tensor<1x8x8x16xf32>
}
"""


def test_a_conv_spec_lands_in_a_batch_1_model(tmp_path: Path) -> None:
    # In a model the unit batch is folded away before the tuning spec runs, and IREE's CPU
    # pipeline puts it back only afterwards (dropping the op's attributes): a matcher for the
    # dispatch's 7 loops misses the 6-loop op the spec sees, unless the spec's prologue
    # restores the batch first. The configuration dump of the whole-model compile is the proof.
    (benchmark,) = dump_benchmarks(BATCH_1_NHWC_MODEL, tmp_path / "dump")
    model = tmp_path / "dump" / "model.mlir"
    target = parse_target(TEST_TARGET)
    context = ir.Context()
    with context:
        module = ir.Module.parse(benchmark.read_text())
        root_op = find_root_op(module)
        problem = parse_problem(root_op)
        default = space_for(target, problem).parse_default_knobs(problem, root_op)
    assert problem.loop_sizes == (1, 8, 8, 16, 3, 3, 8) and default is not None
    knobs = tuple(
        (name, 4 if name == "dist_oh" and value != 4 else value) for name, value in default
    )
    assert knobs != default
    configuration = space_for(target, problem).configuration(problem, knobs, context)
    compile_target = resolve_compile_target(TEST_TARGET)
    reports = {}
    for label, prologue in (("with", target.spec_prologue(problem)), ("without", ())):
        spec = tmp_path / f"{label}.mlir"
        spec.write_text(build_configuration_spec(problem, configuration, prologue, context))
        reports[label] = compile_with_spec(
            model, compile_target, spec, tmp_path / f"{label}.vmfb", 120
        )
    assert target.spec_prologue(problem) == ("iree-codegen-insert-batch-dim-for-batchless-conv",)
    (matcher,) = list_matchers(read_spec(tmp_path / "with.mlir", context))
    assert matcher.prologue == target.spec_prologue(problem)
    (landed,) = reports["with"].checks
    assert landed.landed and "distribution = [1, 4, 8, 16, 0, 0, 0]" in landed.found, landed
    (missed,) = reports["without"].checks
    assert not missed.landed and missed.found != landed.found


def test_the_conv_reference_program_carries_the_config(tmp_path: Path) -> None:
    # The reference program (the root op alone) is folded like a model: with the prologue, a
    # candidate's reference binary differs from the default's.
    from ireetune.flows.dispatch.stages import BASELINE_SPEC_TEXT
    from ireetune.verify.reference import build_reference_module

    (benchmark,) = dump_benchmarks(BATCH_1_NHWC_MODEL, tmp_path / "dump")
    target = parse_target(TEST_TARGET)
    context = ir.Context()
    with context:
        module = ir.Module.parse(benchmark.read_text())
        root_op = find_root_op(module)
        problem = parse_problem(root_op)
        default = space_for(target, problem).parse_default_knobs(problem, root_op)
        reference = tmp_path / "reference.mlir"
        reference.write_text(str(build_reference_module(root_op, context, problem)))
    assert problem.reference_carries_config and default is not None
    knobs = tuple(
        (name, 4 if name == "dist_oh" and value != 4 else value) for name, value in default
    )
    spec = tmp_path / "spec.mlir"
    spec.write_text(
        build_configuration_spec(
            problem,
            space_for(target, problem).configuration(problem, knobs, context),
            target.spec_prologue(problem),
            context,
        )
    )
    baseline = tmp_path / "baseline.mlir"
    baseline.write_text(BASELINE_SPEC_TEXT)
    binaries = []
    for path in (baseline, spec):
        output = tmp_path / f"{path.stem}.vmfb"
        subprocess.run(
            [str(Path(sys.executable).parent / "iree-compile"), str(reference),
             *target.compile_flags(), *spec_flags(target, path), "-o", str(output)],
            check=True, capture_output=True,
        )  # fmt: skip
        binaries.append(output.read_bytes())
    assert binaries[0] != binaries[1]


# ResNet-50's 7x7 stem convolution (3 input channels, stride 2) and IREE's default for it on
# znver4, whose channel tile 3 is in no power-of-two list.
STEM = nchw_conv_problem(1, 64, 3, 112, 7, stride=2)
STEM_DEFAULT = (
    ("dist_f", 64),
    ("dist_oh", 56),
    ("dist_ow", 16),
    ("vec_c", 3),
    ("vec_f", 16),
    ("vec_ow", 8),
)


def test_the_default_neighbours_come_first_and_keep_its_odd_channel_tile() -> None:
    sizes = compute_conv_sizes(STEM)
    first = list(itertools.islice(enumerate_conv_space(sizes, AVX512, 0, STEM_DEFAULT), 7))
    # One knob moved one step along its domain each (knobs in name order), the default's
    # vec_c = 3 kept where it is not the one moved.
    moved = [{n: v for n, v in k if dict(STEM_DEFAULT)[n] != v} for k in first]
    assert moved == [
        {"dist_f": 32}, {"dist_f": 96}, {"dist_oh": 28}, {"dist_oh": 112}, {"vec_c": 1},
        {"vec_f": 8}, {"vec_f": 32},
    ]  # fmt: skip
    assert STEM_DEFAULT not in list(
        itertools.islice(enumerate_conv_space(sizes, AVX512, 0, STEM_DEFAULT), 80)
    )


def test_ordering_puts_near_default_configurations_first() -> None:
    sizes = compute_conv_sizes(STEM)
    # A random pool (no neighbours proposed): the ordering alone must find the near ones.
    pool = list(itertools.islice(enumerate_conv_space(sizes, AVX512, 3), 80))
    with_default = order_conv_candidates(sizes, AVX512, pool, 3, STEM_DEFAULT)
    without = order_conv_candidates(sizes, AVX512, pool, 3)

    def mean_distance(ordered: list[tuple[Knobs, float]]) -> float:
        return sum(distance_to(k, STEM_DEFAULT) for k, _ in ordered[:8]) / 8

    nearest = min(distance_to(k, STEM_DEFAULT) for k in pool)
    assert distance_to(with_default[0][0], STEM_DEFAULT) <= nearest + 1.0
    assert mean_distance(with_default) < mean_distance(without) - 1.0


GROUPED_AND_MULTIPLIED = """
func.func @grouped(%i: tensor<1x2x4x6x6xf32>, %f: tensor<2x8x4x3x3xf32>, %o: tensor<1x2x8x4x4xf32>)
    -> tensor<1x2x8x4x4xf32> {
  %r = linalg.generic {indexing_maps = [
      affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d5, d3 + d6, d4 + d7)>,
      affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d1, d2, d5, d6, d7)>,
      affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d2, d3, d4)>],
    iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "reduction",
                      "reduction", "reduction"]}
    ins(%i, %f : tensor<1x2x4x6x6xf32>, tensor<2x8x4x3x3xf32>) outs(%o : tensor<1x2x8x4x4xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %c, %m : f32
    linalg.yield %s : f32
  } -> tensor<1x2x8x4x4xf32>
  return %r : tensor<1x2x8x4x4xf32>
}
func.func @multiplied(%i: tensor<1x6x6x4xf32>, %f: tensor<3x3x4x2xf32>, %o: tensor<1x4x4x4x2xf32>)
    -> tensor<1x4x4x4x2xf32> {
  %r = linalg.generic {indexing_maps = [
      affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1 + d5, d2 + d6, d3)>,
      affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d5, d6, d3, d4)>,
      affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3, d4)>],
    iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "reduction",
                      "reduction"]}
    ins(%i, %f : tensor<1x6x6x4xf32>, tensor<3x3x4x2xf32>) outs(%o : tensor<1x4x4x4x2xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %c, %m : f32
    linalg.yield %s : f32
  } -> tensor<1x4x4x4x2xf32>
  return %r : tensor<1x4x4x4x2xf32>
}
"""


def test_a_grouped_convolution_is_refused_as_one_not_as_a_depthwise_one() -> None:
    """A grouped convolution (AlexNet's, groups of 48 input channels) has group loops and input
    channels; a depthwise one with a channel multiplier has no input channel loop. Each is named
    for what it is."""
    context = ir.Context()
    module = ir.Module.parse(GROUPED_AND_MULTIPLIED, context)
    reasons, spirv = [], []
    for function in module.body.operations:
        (op, _) = function.regions[0].blocks[0].operations
        problem = parse_problem(op)
        assert isinstance(problem, ConvolutionProblem)
        reasons.append(describe_conv_refusal(problem))
        with pytest.raises(IreetuneError) as refused:
            spirv_conv_sizes(problem)
        spirv.append(str(refused.value))
    assert reasons == [
        "a grouped convolution (2 groups) is not tuned on the CPU",
        "a depthwise convolution with a channel multiplier is not tuned on the CPU",
    ]
    assert spirv == [
        "grouped convolutions have no SPIR-V space yet",
        "depthwise convolutions have no SPIR-V space yet",
    ]
