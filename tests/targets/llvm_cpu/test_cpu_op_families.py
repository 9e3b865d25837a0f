"""The CPU's op families as a model meets them: their candidate configurations land (a candidate's
binary differs from the default's) under the flags the flag phase picks, data tiling included."""

# ruff: noqa: E501  (MLIR text is data, kept verbatim)

from __future__ import annotations

import hashlib
import itertools
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from iree.compiler import ir

from ireetune.core.candidate import Knobs
from ireetune.core.errors import IreetuneError
from ireetune.core.target import (
    FamilySpace,
    OpConfiguration,
    SpaceRequest,
    space_for,
    spec_flags,
    target_refusal,
)
from ireetune.flows.dispatch.stages import BASELINE_SPEC_TEXT
from ireetune.problem.convolution import ConvolutionProblem
from ireetune.problem.family import Problem
from ireetune.problem.registry import parse_problem
from ireetune.problem.root_op import find_root_op
from ireetune.spec.builder import build_configuration_spec
from ireetune.targets import parse_target
from ireetune.targets.llvm_cpu.conv_space import CpuWindowSpace
from ireetune.targets.llvm_cpu.elementwise_space import CpuElementwiseSpace
from ireetune.targets.llvm_cpu.reduction_space import CpuReductionSpace
from ireetune.verify.reference import build_reference_module
from tests.conftest import ARGMAX_OPS, IREE_COMPILE
from tests.targets.llvm_cpu.test_cpu_spec_reach import (
    CONSTANT_BODIES_MODEL,
    PAD_MODEL,
    SUM_OF_RELU_MODEL,
)

# The CPU whose compiler choices these tests assert: AVX2 without AVX-512, on any x86-64 host.
CPU = "haswell"
DATA_TILING_FLAGS = ("--iree-opt-data-tiling", "--iree-llvmcpu-enable-ukernels=mmt4d")
# A 3-D softmax, as an encoder's attention has it (heads x tokens x tokens).
SOFTMAX_3D_MODEL = """
func.func @main(%x: tensor<4x16x64xf32>) -> tensor<4x16x64xf32> {
  %empty = tensor.empty() : tensor<4x16x64xf32>
  %r = linalg.softmax dimension(2) ins(%x : tensor<4x16x64xf32>) outs(%empty : tensor<4x16x64xf32>) -> tensor<4x16x64xf32>
  return %r : tensor<4x16x64xf32>
}
"""
# A layer norm over the last dim of a 2x16x64 tensor, as ONNX's LayerNormalization imports.
LAYER_NORM_MODEL = """
#x = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#row = affine_map<(d0, d1, d2) -> (d0, d1)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
func.func @main(%x: tensor<2x16x64xf32>) -> tensor<2x16x64xf32> {
  %zero = arith.constant 0.0 : f32
  %n = arith.constant 64.0 : f32
  %eps = arith.constant 1.0e-5 : f32
  %e2 = tensor.empty() : tensor<2x16xf32>
  %z2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<2x16xf32>) -> tensor<2x16xf32>
  %sum = linalg.generic {indexing_maps = [#x, #row], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x : tensor<2x16x64xf32>) outs(%z2 : tensor<2x16xf32>) {
    ^bb0(%in: f32, %acc: f32):
      %a = arith.addf %in, %acc : f32
      linalg.yield %a : f32
  } -> tensor<2x16xf32>
  %mean = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%sum : tensor<2x16xf32>) outs(%e2 : tensor<2x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %d = arith.divf %in, %n : f32
      linalg.yield %d : f32
  } -> tensor<2x16xf32>
  %squares = linalg.generic {indexing_maps = [#x, #row, #row], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %mean : tensor<2x16x64xf32>, tensor<2x16xf32>) outs(%z2 : tensor<2x16xf32>) {
    ^bb0(%in: f32, %m: f32, %acc: f32):
      %c = arith.subf %in, %m : f32
      %s = arith.mulf %c, %c : f32
      %a = arith.addf %s, %acc : f32
      linalg.yield %a : f32
  } -> tensor<2x16xf32>
  %e3 = tensor.empty() : tensor<2x16x64xf32>
  %r = linalg.generic {indexing_maps = [#x, #row, #row, #x], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x, %mean, %squares : tensor<2x16x64xf32>, tensor<2x16xf32>, tensor<2x16xf32>) outs(%e3 : tensor<2x16x64xf32>) {
    ^bb0(%in: f32, %m: f32, %sq: f32, %out: f32):
      %v = arith.divf %sq, %n : f32
      %ve = arith.addf %v, %eps : f32
      %rs = math.rsqrt %ve : f32
      %c = arith.subf %in, %m : f32
      %o = arith.mulf %c, %rs : f32
      linalg.yield %o : f32
  } -> tensor<2x16x64xf32>
  return %r : tensor<2x16x64xf32>
}
"""


def dump_with_flags(model_text: str, folder: Path, flags: tuple[str, ...]) -> list[Path]:
    """Compile a model for CPU with extra flags, dumping its dispatch benchmarks."""
    folder.mkdir(parents=True, exist_ok=True)
    model_path = folder / "model.mlir"
    model_path.write_text(model_text)
    target = parse_target(f"cpu:{CPU}")
    subprocess.run(
        [IREE_COMPILE, str(model_path), *target.compile_flags(), *flags,
         f"--iree-hal-dump-executable-benchmarks-to={folder / 'dumps'}",
         "--iree-codegen-add-tuner-attributes", "-o", str(folder / "model.vmfb")],
        check=True, capture_output=True,
    )  # fmt: skip
    return sorted((folder / "dumps").glob("*_benchmark.mlir"))


def compile_hash(source: Path, flags: list[str], output: Path) -> str:
    """Compile and return the binary's hash."""
    subprocess.run(
        [IREE_COMPILE, str(source), *flags, "-o", str(output)], check=True, capture_output=True
    )
    return hashlib.sha256(output.read_bytes()).hexdigest()


def hash_data_tiled_model(
    folder: Path, problem: Problem, configuration: OpConfiguration, context: ir.Context
) -> tuple[str, str]:
    """Compile the model dumped in `folder` under data tiling, without and with a spec of
    `configuration` for `problem`; return the two binaries' hashes."""
    target = parse_target(f"cpu:{CPU}")
    spec = folder / "spec.mlir"
    spec.write_text(build_configuration_spec(problem, configuration, (), context))
    model = folder / "dump" / "model.mlir"
    flags = [*target.compile_flags(), *DATA_TILING_FLAGS]
    default = compile_hash(model, flags, folder / "default.vmfb")
    return default, compile_hash(model, [*flags, *spec_flags(target, spec)], folder / "spec.vmfb")


def tunable_problems(
    benchmarks: list[Path], context: ir.Context
) -> list[tuple[ir.Module, Problem]]:
    found = []
    with context:
        for benchmark in benchmarks:
            module = ir.Module.parse(benchmark.read_text())
            try:
                found.append((module, parse_problem(find_root_op(module))))
            except IreetuneError:
                continue
    return found


# A max pool (NCHW), a sum pool (NHWC) and a depthwise convolution, as ONNX's MaxPool,
# AveragePool and grouped Conv import.
POOLING_MODEL = """
func.func @main(%x: tensor<1x16x18x18xf32>, %y: tensor<1x18x18x16xf32>, %w: tensor<3x3x16xf32>) -> (tensor<1x16x8x8xf32>, tensor<1x8x8x16xf32>, tensor<1x16x16x16xf32>) {
  %low = arith.constant -3.0e+38 : f32
  %zero = arith.constant 0.0 : f32
  %window = tensor.empty() : tensor<3x3xf32>
  %e = tensor.empty() : tensor<1x16x8x8xf32>
  %i = linalg.fill ins(%low : f32) outs(%e : tensor<1x16x8x8xf32>) -> tensor<1x16x8x8xf32>
  %max = linalg.pooling_nchw_max {dilations = dense<1> : tensor<2xi64>, strides = dense<2> : tensor<2xi64>}
      ins(%x, %window : tensor<1x16x18x18xf32>, tensor<3x3xf32>) outs(%i : tensor<1x16x8x8xf32>) -> tensor<1x16x8x8xf32>
  %e2 = tensor.empty() : tensor<1x8x8x16xf32>
  %i2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<1x8x8x16xf32>) -> tensor<1x8x8x16xf32>
  %sum = linalg.pooling_nhwc_sum {dilations = dense<1> : tensor<2xi64>, strides = dense<2> : tensor<2xi64>}
      ins(%y, %window : tensor<1x18x18x16xf32>, tensor<3x3xf32>) outs(%i2 : tensor<1x8x8x16xf32>) -> tensor<1x8x8x16xf32>
  %e3 = tensor.empty() : tensor<1x16x16x16xf32>
  %i3 = linalg.fill ins(%zero : f32) outs(%e3 : tensor<1x16x16x16xf32>) -> tensor<1x16x16x16xf32>
  %dw = linalg.depthwise_conv_2d_nhwc_hwc {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
      ins(%y, %w : tensor<1x18x18x16xf32>, tensor<3x3x16xf32>) outs(%i3 : tensor<1x16x16x16xf32>) -> tensor<1x16x16x16xf32>
  return %max, %sum, %dw : tensor<1x16x8x8xf32>, tensor<1x8x8x16xf32>, tensor<1x16x16x16xf32>
}
"""


# A local response normalisation, a max pool, an element-wise ReLU: what a 2012-era CNN holds.
LRN_MODEL = """
#c = affine_map<(d0, d1, d2, d3) -> (d0 + d3, d1, d2)>
#w = affine_map<(d0, d1, d2, d3) -> (d3)>
#o = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
func.func @main(%squares: tensor<20x17x17xf32>, %x: tensor<16x17x17xf32>) -> tensor<16x17x17xf32> {
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
  return %r : tensor<16x17x17xf32>
}
"""
# A ReLU: its body reads the constant 0 from outside it. IREE collapses its loops into one.
RELU_MODEL = """
func.func @main(%a: tensor<4x8x16xf32>) -> tensor<4x8x16xf32> {
  %zero = arith.constant dense<0.0> : tensor<4x8x16xf32>
  %r = arith.maximumf %a, %zero : tensor<4x8x16xf32>
  return %r : tensor<4x8x16xf32>
}
"""
# A transpose (element-wise: tunable) and an arg-max (a generic with no family).
TRANSPOSE_AND_ARGMAX_MODEL = f"""
func.func @main(%x: tensor<64x32xf32>) -> (tensor<32x64xf32>, tensor<64xi32>) {{
  %e = tensor.empty() : tensor<32x64xf32>
  %t = linalg.transpose ins(%x : tensor<64x32xf32>) outs(%e : tensor<32x64xf32>) permutation = [1, 0]{ARGMAX_OPS}
  return %t, %r#1 : tensor<32x64xf32>, tensor<64xi32>
}}
"""
MATMUL_FOR_DATA_TILING = """
func.func @main(%lhs: tensor<64x96xf32>, %rhs: tensor<96x128xf32>) -> tensor<64x128xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<64x128xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<64x128xf32>) -> tensor<64x128xf32>
  %r = linalg.matmul ins(%lhs, %rhs : tensor<64x96xf32>, tensor<96x128xf32>) outs(%init : tensor<64x128xf32>) -> tensor<64x128xf32>
  return %r : tensor<64x128xf32>
}
"""


@pytest.mark.parametrize(
    ("model_text", "flags", "expected"),
    [
        # A local response normalisation's window sum has a space (CpuWindowSumSpace in elementwise_space.py).
        (LRN_MODEL, (), []),
        # A ReLU's body reads the constant 0: it has a body matcher (problem/elementwise.py).
        (RELU_MODEL, (), []),
        (
            MATMUL_FOR_DATA_TILING,
            DATA_TILING_FLAGS,
            # The llvm-cpu target materialises the encodings first on the late path: its packs
            # and mmt4d are tunable (the late path alone: test_cpu_pack_space, test_mmt4d).
            [],
        ),
        # A pad's copy into its padded buffer has a space (CpuBufferCopySpace).
        (PAD_MODEL, (), []),
        (
            TRANSPOSE_AND_ARGMAX_MODEL,
            (),
            [
                "not tunable: root op 'linalg.generic' (a 2-result reduction (an arg-max or a "
                "fused pair, say) of 1 parallel loop and 1 reduction loop) is not supported yet "
                "(tunable op families: batch_contraction, contraction, convolution, attention, "
                "reduction, buffer_copy, elementwise, pack, unpack, inner_tiled)",
            ],
        ),
    ],
    ids=["lrn", "elementwise", "pack", "buffer_copy", "transpose_argmax"],
)
def test_every_not_tunable_reason_names_what_the_op_is(
    model_text: str, flags: tuple[str, ...], expected: list[str], tmp_path: Path
) -> None:
    from tests.profile_support import describe_problem

    benchmarks = dump_with_flags(model_text, tmp_path / "dump", flags)
    target = parse_target(f"cpu:{CPU}").with_global_flags(flags)
    reasons = [describe_problem(path, target) for path in benchmarks]
    assert [reason for reason, tunable in reasons if not tunable] == expected


TRANSPOSED_B_MATMUL = """
func.func @main(%lhs: tensor<512x1024xf32>, %rhs: tensor<768x1024xf32>) -> tensor<512x768xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<512x768xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<512x768xf32>) -> tensor<512x768xf32>
  %r = linalg.matmul
      indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d1, d2)>,
                       affine_map<(d0, d1, d2) -> (d0, d1)>]
      ins(%lhs, %rhs : tensor<512x1024xf32>, tensor<768x1024xf32>) outs(%init : tensor<512x768xf32>) -> tensor<512x768xf32>
  return %r : tensor<512x768xf32>
}
"""


# A matrix-vector product, as a batch-1 classifier's fully connected layer imports (AlexNet's
# 1x4096x9216): the default leaves its M loop of one row untiled (distribution 0).
MATRIX_VECTOR = """
func.func @main(%lhs: tensor<1x2304xf32>, %rhs: tensor<1024x2304xf32>) -> tensor<1x1024xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<1x1024xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<1x1024xf32>) -> tensor<1x1024xf32>
  %r = linalg.matmul
      indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d1, d2)>,
                       affine_map<(d0, d1, d2) -> (d0, d1)>]
      ins(%lhs, %rhs : tensor<1x2304xf32>, tensor<1024x2304xf32>) outs(%init : tensor<1x1024xf32>) -> tensor<1x1024xf32>
  return %r : tensor<1x1024xf32>
}
"""


def _space_around_default(
    benchmark: Path, count: int
) -> tuple[FamilySpace, SpaceRequest, list[Knobs]]:
    """Return the dispatch's space on the test CPU, the request around its default, and the
    first `count` candidates it generates."""
    context = ir.Context()
    ((module, problem),) = tunable_problems([benchmark], context)
    with context:
        root_op = find_root_op(module)
        space = space_for(parse_target(f"cpu:{CPU}"), problem)
        default = space.parse_default_knobs(problem, root_op)
        variant = root_op
        while variant.name != "hal.executable.variant":
            variant = variant.parent
        request = SpaceRequest(problem, variant.attributes["target"], default, 0)
        return space, request, list(itertools.islice(space.generate(request), count))


def test_an_untiled_loop_of_the_default_is_read_as_one_tile_of_the_whole_loop(
    tmp_path: Path,
) -> None:
    """The default's distribution 0 (the loop untiled) is the whole loop as one tile: the space
    is generated and ordered around it. Read as a tile of 0 rows, ordering divided by zero and a
    model run with a batch-1 fully connected layer ended in a traceback (AlexNet at default
    flags, 2026-12-06)."""
    (benchmark,) = dump_with_flags(MATRIX_VECTOR, tmp_path / "dump", ())
    assert "distribution = [0, " in benchmark.read_text()
    space, request, pool = _space_around_default(benchmark, 12)
    default = request.default_knobs
    assert default is not None and dict(default)["dist_m"] == 1
    ordered = [knobs for knobs, _ in space.order(request, pool)]
    assert sorted(ordered) == sorted(pool) and default not in pool
    assert all(dict(knobs)["dist_m"] == 1 for knobs in pool)


def test_a_contraction_search_starts_at_the_defaults_neighbours(tmp_path: Path) -> None:
    # On this transposed-B matmul all 8 candidates of `tune-dispatch --num-candidates 8` were
    # 3.6-7x slower than the default: none was near it. Now the first ones, generated and then
    # ordered, are one knob one step away from it.
    from ireetune.targets.llvm_cpu.space import compute_problem_sizes, contraction_domains

    (benchmark,) = dump_with_flags(TRANSPOSED_B_MATMUL, tmp_path / "dump", ())
    space, request, pool = _space_around_default(benchmark, 40)
    problem, default = request.problem, request.default_knobs
    assert default == (("dist_m", 64), ("dist_n", 64), ("vec_k", 8), ("vec_m", 8), ("vec_n", 8))
    ordered = [knobs for knobs, _ in space.order(request, pool)]
    domains = contraction_domains(
        compute_problem_sizes(problem),  # type: ignore[arg-type]
        space.facts(request),  # type: ignore[attr-defined]
    )

    def one_step(knobs: tuple[tuple[str, int], ...]) -> bool:
        moved = [(name, value) for name, value in knobs if dict(default)[name] != value]
        if len(moved) != 1:
            return False
        name, value = moved[0]
        domain = sorted({*domains[name], dict(default)[name]})
        return abs(domain.index(value) - domain.index(dict(default)[name])) == 1

    assert [one_step(knobs) for knobs in pool[:6]] == [True] * 6
    assert [one_step(knobs) for knobs in ordered[:4]] == [True] * 4


def test_an_mmt4d_spec_does_not_reach_a_data_tiled_model(tmp_path: Path) -> None:
    # What IREE 3.13 does (docs/cpu_families.md): in a model the tuning spec runs while the op
    # is a `linalg.matmul` on encoded operands, and materialising the encoding into
    # `linalg.mmt4d` drops the configuration; an mmt4d config built from the dispatch dump (its
    # distribution tile doubled) leaves the model's binary unchanged. When a later IREE honours
    # it, this fails: the mmt4d space then pays at model level.
    from ireetune.targets.llvm_cpu.common import render_cpu_compilation_info
    from ireetune.targets.llvm_cpu.mmt4d_space import MMT4D_PIPELINE

    benchmarks = dump_with_flags(MATMUL_FOR_DATA_TILING, tmp_path / "dump", DATA_TILING_FLAGS)
    context = ir.Context()
    # The two packs are problems too (of the pack family).
    ((module, problem),) = [
        (m, p) for m, p in tunable_problems(benchmarks, context) if p.family == "contraction"
    ]
    assert problem.signature == "mmt4d_8x8x16x8x96x1_f32_f32_f32"
    with context:
        levels = str(find_root_op(module).attributes["lowering_config"])
    assert "distribution = [4, 4, 0, 0, 0, 0]" in levels
    tiles = {
        "distribution": [8, 4, 0, 0, 0, 0],
        "vector_common_parallel": [1, 1, 0, 8, 8, 0],
        "vector_reduction": [0, 0, 1, 0, 0, 1],
    }
    configuration = OpConfiguration(render_cpu_compilation_info(tiles, MMT4D_PIPELINE, context))
    default, with_spec = hash_data_tiled_model(tmp_path, problem, configuration, context)
    assert with_spec == default


BATCH_MATMUL_FOR_DATA_TILING = """
func.func @main(%lhs: tensor<4x32x64xf32>, %rhs: tensor<4x64x16xf32>) -> tensor<4x32x16xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<4x32x16xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<4x32x16xf32>) -> tensor<4x32x16xf32>
  %r = linalg.batch_matmul ins(%lhs, %rhs : tensor<4x32x64xf32>, tensor<4x64x16xf32>) outs(%init : tensor<4x32x16xf32>) -> tensor<4x32x16xf32>
  return %r : tensor<4x32x16xf32>
}
"""


def test_on_the_late_path_alone_no_spec_reaches_a_data_tiled_batch_matmul(
    tmp_path: Path,
) -> None:
    # Its space is the mmt4d space's (tests/targets/llvm_cpu/test_batch_mmt4d.py, where the
    # target adds MATERIALIZE_FIRST). Under `--iree-opt-data-tiling` alone, a config with the
    # batch loop distributed two at a time leaves the model's binary unchanged, as for the mmt4d.
    from ireetune.targets.llvm_cpu.common import read_cpu_levels, render_cpu_compilation_info
    from ireetune.targets.llvm_cpu.mmt4d_space import MMT4D_PIPELINE

    benchmarks = dump_with_flags(BATCH_MATMUL_FOR_DATA_TILING, tmp_path / "dump", DATA_TILING_FLAGS)
    context = ir.Context()
    # The packs are problems too (of the pack family).
    ((module, problem),) = [
        (m, p) for m, p in tunable_problems(benchmarks, context) if p.family != "pack"
    ]
    assert target_refusal(parse_target(f"cpu:{CPU}"), problem) is None
    with context:
        levels = read_cpu_levels(find_root_op(module), len(problem.loop_sizes))
    assert levels is not None and levels["distribution"][0] != 2
    levels["distribution"][0] = 2
    configuration = OpConfiguration(render_cpu_compilation_info(levels, MMT4D_PIPELINE, context))
    default, with_spec = hash_data_tiled_model(tmp_path, problem, configuration, context)
    assert with_spec == default


def describe_window(problem: ConvolutionProblem) -> str:
    """Name a window: `pooling window 3x3` (no weights) or `depthwise convolution 3x3`."""
    window = "x".join(str(problem.loop_sizes[d]) for d in problem.filter_dims)
    # A depth loop indexes the image, the filter and the output: the window has weights.
    kind = "depthwise convolution" if problem.depth_dims else "pooling window"
    strides = "x".join(str(s) for s in problem.strides)
    return f"{kind} {window}" + (f" (stride {strides})" if set(problem.strides) != {1} else "")


# A bias add and tanh over rows (IREE keeps its two loops: the bias reads only one), a transpose
# with an exponential, and a broadcast: the element-wise roots a network holds.
ELEMENTWISE_MODEL = """
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
func.func @main(%x: tensor<64x96xf32>, %b: tensor<96xf32>, %y: tensor<8x16x32xf32>) -> (tensor<64x96xf32>, tensor<8x32x16xf32>) {
  %e = tensor.empty() : tensor<64x96xf32>
  %r = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %b : tensor<64x96xf32>, tensor<96xf32>) outs(%e : tensor<64x96xf32>) {
    ^bb0(%in: f32, %bias: f32, %out: f32):
      %a = arith.addf %in, %bias : f32
      %m = math.tanh %a : f32
      linalg.yield %m : f32
  } -> tensor<64x96xf32>
  %e2 = tensor.empty() : tensor<8x32x16xf32>
  %t = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2, d1)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%y : tensor<8x16x32xf32>) outs(%e2 : tensor<8x32x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %s = math.exp %in : f32
      linalg.yield %s : f32
  } -> tensor<8x32x16xf32>
  return %r, %t : tensor<64x96xf32>, tensor<8x32x16xf32>
}
"""


KnobChoice = Callable[[FamilySpace, SpaceRequest], Knobs]


def double_first_distribution(space: FamilySpace, request: SpaceRequest) -> Knobs:
    """A normalisation's candidate: the default with its first distribution tile doubled."""
    assert request.default_knobs is not None
    return tuple((n, v * 2 if n == "dist_0" else v) for n, v in request.default_knobs)


def first_generated(space: FamilySpace, request: SpaceRequest) -> Knobs:
    """The space's first candidate: IREE's default neighbourhood comes first."""
    return next(iter(space.generate(request)))


@dataclass(frozen=True)
class Landing:
    """A model whose tunable problems (of `family`, or all) each get a candidate from `choose`,
    which must change the binary of the model and of the problem's reference program."""

    model_text: str
    flags: tuple[str, ...]
    family: str | None
    describe: Callable[..., object]
    problems: list[object]
    space_class: type
    choose: KnobChoice
    first_default: dict[str, int]


def parallel_rank(problem: Problem) -> int:
    return len(problem.parallel_dims)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "case",
    [
        # The reference program (real-input timing) and the model both compile to another
        # binary than the default's under data tiling: before the reference kept the root's
        # loops, IREE collapsed a 3-D softmax's rows in it and every candidate was "config not
        # applied". The layer norm's two reductions (mean, variance) reach codegen as 32x64
        # ones, in two dispatches.
        pytest.param(
            Landing(
                SOFTMAX_3D_MODEL, DATA_TILING_FLAGS, "reduction", parallel_rank, [2],
                CpuReductionSpace, double_first_distribution,
                {"dist_0": 1, "dist_1": 8, "vec_p": 8, "vec_r": 8},
            ),
            id="softmax_3d",
        ),
        pytest.param(
            Landing(
                LAYER_NORM_MODEL, DATA_TILING_FLAGS, "reduction", parallel_rank, [1, 1],
                CpuReductionSpace, double_first_distribution,
                {"dist_0": 4, "vec_p": 4, "vec_r": 8},
            ),
            id="layer_norm",
        ),
        # Pooling windows (window_space) and element-wise generics (elementwise_space) have a
        # space of their own: IREE's default neighbourhood first (a ConvTileAndDecomposeExpert
        # config; a DoubleTilingExpert config of two levels), and the first candidate changes
        # the binary of the model and of the reference program that verification and timing
        # use.
        pytest.param(
            Landing(
                POOLING_MODEL, (), None, describe_window,
                [
                    "pooling window 3x3 (stride 2x2)",
                    "pooling window 3x3 (stride 2x2)",
                    "depthwise convolution 3x3",
                ],
                CpuWindowSpace, first_generated,
                {"dist_c": 2, "dist_oh": 8, "dist_ow": 8, "vec_c": 2, "vec_kw": 3, "vec_ow": 8},
            ),
            id="pooling",
        ),
        pytest.param(
            Landing(
                ELEMENTWISE_MODEL, (), None, lambda problem: problem.signature,
                ["elementwise_64x96_f32_f32_f32", "elementwise_8x16x32_f32_f32"],
                CpuElementwiseSpace, first_generated,
                {"dist_0": 64, "dist_1": 96, "vec_0": 1, "vec_1": 8},
            ),
            id="elementwise",
        ),
        # Bodies that read constants (a ReLU's 0, a sigmoid's 1) land through a body matcher.
        pytest.param(
            Landing(
                CONSTANT_BODIES_MODEL, (), None, lambda problem: problem.signature,
                [
                    "elementwise_6144_f32_f32",
                    "elementwise_64x96_f32_f32_f32",
                    "elementwise_6144_f32_f32",
                ],
                CpuElementwiseSpace, first_generated, {"dist_0": 4096, "vec_0": 8},
            ),
            id="elementwise_reading_constants",
        ),
        # So do reductions whose body reads one (a global average pool's sum of a ReLU).
        pytest.param(
            Landing(
                SUM_OF_RELU_MODEL, (), "reduction", lambda problem: problem.signature,
                ["reduction_64x96_f32_f32"] * 2,
                CpuReductionSpace, double_first_distribution,
                {"dist_0": 8, "vec_p": 8, "vec_r": 8},
            ),
            id="reduction_reading_constants",
        ),
    ],
)  # fmt: skip
def test_a_candidate_lands_in_the_model_and_its_reference(case: Landing, tmp_path: Path) -> None:
    benchmarks = dump_with_flags(case.model_text, tmp_path / "dump", case.flags)
    context = ir.Context()
    found = [
        (m, p) for m, p in tunable_problems(benchmarks, context) if case.family in (None, p.family)
    ]
    assert [case.describe(p) for _, p in found] == case.problems
    target = parse_target(f"cpu:{CPU}")
    flags = [*target.compile_flags(), *case.flags]
    baseline = tmp_path / "baseline.mlir"
    baseline.write_text(BASELINE_SPEC_TEXT)
    model = tmp_path / "dump" / "model.mlir"
    defaults = []
    for index, (module, problem) in enumerate(found):
        space = space_for(target, problem)
        assert isinstance(space, case.space_class)
        assert target_refusal(target, problem) is None
        with context:
            root_op = find_root_op(module)
            default = space.parse_default_knobs(problem, root_op)
            variant = root_op
            while variant.name != "hal.executable.variant":
                variant = variant.parent
            knobs = case.choose(
                space, SpaceRequest(problem, variant.attributes["target"], default, 0)
            )
            reference = tmp_path / f"reference{index}.mlir"
            reference.write_text(str(build_reference_module(root_op, context, problem)))
        assert default is not None
        defaults.append(dict(default))
        # The candidate is one step from the default.
        assert len(set(knobs) - set(default)) == 1
        spec = tmp_path / f"spec{index}.mlir"
        spec.write_text(
            build_configuration_spec(
                problem,
                space.configuration(problem, knobs, context),
                target.spec_prologue(problem),
                context,
            )
        )
        hashes = {
            (source.stem, spec_path.stem): compile_hash(
                source, [*flags, *spec_flags(target, spec_path)], tmp_path / "out.vmfb"
            )
            for source in (reference, model)
            for spec_path in (baseline, spec)
        }
        assert hashes[(reference.stem, "baseline")] != hashes[(reference.stem, spec.stem)]
        assert hashes[("model", "baseline")] != hashes[("model", spec.stem)]
    # IREE's own choices on haswell (AVX2: 8 f32 lanes).
    assert defaults[0] == case.first_default
