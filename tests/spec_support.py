"""Specs and models shared by the spec-tooling tests: small, realistic, hand-written."""

# ruff: noqa: E501  (MLIR text and expected output lines are data, kept verbatim)

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from iree.compiler import ir
from iree.compiler.dialects import iree_codegen

from ireetune.core.target import space_for
from ireetune.frontend.dispatches import parse_module, read_mlir_file
from ireetune.problem.convolution import ConvolutionProblem
from ireetune.problem.root_op import find_root_op, parse_problem
from ireetune.spec.builder import MatcherEntry, build_spec, render_spec
from ireetune.targets.llvm_cpu.target import LlvmCpuTarget
from tests.conftest import CONV_MODEL, TEST_CPU, dump_benchmarks
from tests.conftest import MATMUL_MODEL as MATMUL_MODEL

# A CPU spec for the 64x128x96 f32 matmul of MATMUL_MODEL and MIXED_MODEL's first dispatch.
VALID_SPEC = """// A hand-written CPU tuning spec for a 64x128x96 f32 matmul.
module @valid_spec attributes {transform.with_named_sequence, iree_codegen.tuning_spec_with_default_entrypoint} {
  transform.named_sequence @apply_op_config(%op: !transform.any_op {transform.readonly},
                                            %config: !transform.any_param {transform.readonly}) {
    transform.annotate %op "compilation_info" = %config : !transform.any_op, !transform.any_param
    transform.yield
  }
  transform.named_sequence @match_matmul_64x128x96(%root: !transform.any_op {transform.readonly})
      -> (!transform.any_op, !transform.any_param) {
    %batch, %m, %n, %k = transform.iree.match.contraction %root,
        lhs_type = f32, rhs_type = f32, output_type = f32,
        indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>,
                         affine_map<(d0, d1, d2) -> (d2, d1)>,
                         affine_map<(d0, d1, d2) -> (d0, d1)>] : !transform.any_op -> !transform.param<i64>
    transform.iree.match.dims_equal %batch, [] : !transform.param<i64>
    transform.iree.match.dims_equal %m, [64] : !transform.param<i64>
    transform.iree.match.dims_equal %n, [128] : !transform.param<i64>
    transform.iree.match.dims_equal %k, [96] : !transform.param<i64>
    %config = transform.param.constant #iree_codegen.compilation_info<
        lowering_config = #iree_cpu.lowering_config<distribution = [32, 64, 0],
            vector_common_parallel = [8, 16, 0], vector_reduction = [0, 0, 16]>,
        translation_info = #iree_codegen.translation_info<pipeline = #iree_cpu.pipeline<DoubleTilingExpert>>
      > -> !transform.any_param
    transform.yield %root, %config : !transform.any_op, !transform.any_param
  }
  transform.named_sequence @__kernel_config(%variant: !transform.any_op {transform.consumed}) -> !transform.any_op
      attributes {iree_codegen.tuning_spec_entrypoint} {
    %result = transform.foreach_match in %variant
        @match_matmul_64x128x96 -> @apply_op_config
      : (!transform.any_op) -> !transform.any_op
    transform.yield %result : !transform.any_op
  }
}
"""

CPU_CONFIG = "distribution = [32, 64, 0]"

# sm_80 TileAndFuse for F16_MODEL: the default config but reduction = [0, 0, 16] (default 8).
CUDA_SPEC = """module @cuda_spec attributes {transform.with_named_sequence, iree_codegen.tuning_spec_with_default_entrypoint} {
  transform.named_sequence @apply_op_config(%op: !transform.any_op {transform.readonly},
                                            %config: !transform.any_param {transform.readonly}) {
    transform.annotate %op "compilation_info" = %config : !transform.any_op, !transform.any_param
    transform.yield
  }
  transform.named_sequence @match_matmul_256x384x512(%root: !transform.any_op {transform.readonly})
      -> (!transform.any_op, !transform.any_param) {
    %batch, %m, %n, %k = transform.iree.match.contraction %root,
        lhs_type = f16, rhs_type = f16, output_type = f32,
        indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>,
                         affine_map<(d0, d1, d2) -> (d2, d1)>,
                         affine_map<(d0, d1, d2) -> (d0, d1)>] : !transform.any_op -> !transform.param<i64>
    transform.iree.match.dims_equal %batch, [] : !transform.param<i64>
    transform.iree.match.dims_equal %m, [256] : !transform.param<i64>
    transform.iree.match.dims_equal %n, [384] : !transform.param<i64>
    transform.iree.match.dims_equal %k, [512] : !transform.param<i64>
    %config = transform.param.constant #iree_codegen.compilation_info<lowering_config = #iree_gpu.lowering_config<{convert_acc_gemm, mma_kind = #iree_gpu.mma_layout<NV_MMA_SYNC_F32_16x8x16_F16>, promote_operands = [0, 1], reduction = [0, 0, 16], subgroup = [2, 4, 0], workgroup = [64, 64, 0]}>, translation_info = #iree_codegen.translation_info<pipeline = #iree_gpu.pipeline<TileAndFuse> workgroup_size = [128, 1, 1] subgroup_size = 32, {gpu_pipeline_options = #iree_gpu.pipeline_options<prefetch_num_stages = 2>}>> -> !transform.any_param
    transform.yield %root, %config : !transform.any_op, !transform.any_param
  }
  transform.named_sequence @__kernel_config(%variant: !transform.any_op {transform.consumed}) -> !transform.any_op
      attributes {iree_codegen.tuning_spec_entrypoint} {
    %result = transform.foreach_match in %variant
        @match_matmul_256x384x512 -> @apply_op_config
      : (!transform.any_op) -> !transform.any_op
    transform.yield %result : !transform.any_op
  }
}
"""

# gfx942 TileAndFuse for F16_MODEL: the default config but reduction = [0, 0, 4] (default 8).
ROCM_SPEC = """module @rocm_spec attributes {transform.with_named_sequence, iree_codegen.tuning_spec_with_default_entrypoint} {
  transform.named_sequence @apply_op_config(%op: !transform.any_op {transform.readonly},
                                            %config: !transform.any_param {transform.readonly}) {
    transform.annotate %op "compilation_info" = %config : !transform.any_op, !transform.any_param
    transform.yield
  }
  transform.named_sequence @match_matmul_256x384x512(%root: !transform.any_op {transform.readonly})
      -> (!transform.any_op, !transform.any_param) {
    %batch, %m, %n, %k = transform.iree.match.contraction %root,
        lhs_type = f16, rhs_type = f16, output_type = f32,
        indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>,
                         affine_map<(d0, d1, d2) -> (d2, d1)>,
                         affine_map<(d0, d1, d2) -> (d0, d1)>] : !transform.any_op -> !transform.param<i64>
    transform.iree.match.dims_equal %batch, [] : !transform.param<i64>
    transform.iree.match.dims_equal %m, [256] : !transform.param<i64>
    transform.iree.match.dims_equal %n, [384] : !transform.param<i64>
    transform.iree.match.dims_equal %k, [512] : !transform.param<i64>
    %config = transform.param.constant #iree_codegen.compilation_info<lowering_config = #iree_gpu.lowering_config<{mma_kind = #iree_gpu.mma_layout<MFMA_F32_16x16x16_F16>, promote_operands = [0, 1], reduction = [0, 0, 4], subgroup = [2, 4, 0], workgroup = [64, 128, 0]}>, translation_info = #iree_codegen.translation_info<pipeline = #iree_gpu.pipeline<TileAndFuse> workgroup_size = [256, 1, 1] subgroup_size = 64, {gpu_pipeline_options = #iree_gpu.pipeline_options<prefetch_num_stages = 2>}>> -> !transform.any_param
    transform.yield %root, %config : !transform.any_op, !transform.any_param
  }
  transform.named_sequence @__kernel_config(%variant: !transform.any_op {transform.consumed}) -> !transform.any_op
      attributes {iree_codegen.tuning_spec_entrypoint} {
    %result = transform.foreach_match in %variant
        @match_matmul_256x384x512 -> @apply_op_config
      : (!transform.any_op) -> !transform.any_op
    transform.yield %result : !transform.any_op
  }
}
"""


# Two matmuls (64x128x96 and 64x32x128) and an elementwise add: partly covered by VALID_SPEC.
MIXED_MODEL = """
func.func @main(%a: tensor<64x96xf32>, %b: tensor<96x128xf32>, %c: tensor<128x32xf32>,
                %d: tensor<64x32xf32>) -> tensor<64x32xf32> {
  %zero = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<64x128xf32>
  %i0 = linalg.fill ins(%zero : f32) outs(%e0 : tensor<64x128xf32>) -> tensor<64x128xf32>
  %ab = linalg.matmul ins(%a, %b : tensor<64x96xf32>, tensor<96x128xf32>)
                      outs(%i0 : tensor<64x128xf32>) -> tensor<64x128xf32>
  %e1 = tensor.empty() : tensor<64x32xf32>
  %i1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<64x32xf32>) -> tensor<64x32xf32>
  %abc = linalg.matmul ins(%ab, %c : tensor<64x128xf32>, tensor<128x32xf32>)
                       outs(%i1 : tensor<64x32xf32>) -> tensor<64x32xf32>
  %r = arith.addf %abc, %d : tensor<64x32xf32>
  return %r : tensor<64x32xf32>
}
"""

F16_MODEL = """
func.func @main(%lhs: tensor<256x512xf16>, %rhs: tensor<512x384xf16>) -> tensor<256x384xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<256x384xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<256x384xf32>) -> tensor<256x384xf32>
  %r = linalg.matmul ins(%lhs, %rhs : tensor<256x512xf16>, tensor<512x384xf16>)
                     outs(%init : tensor<256x384xf32>) -> tensor<256x384xf32>
  return %r : tensor<256x384xf32>
}
"""


def edit(text: str, old: str, new: str) -> str:
    """Replace one snippet that must be present, so that a stale edit fails loudly."""
    assert old in text, f"snippet not found: {old}"
    return text.replace(old, new, 1)


def write(folder: Path, name: str, text: str) -> Path:
    """Write text to folder/name and return the path."""
    path = folder / name
    path.write_text(text)
    return path


# CONV_MODEL with a batch of 2: a unit batch is folded away before a tuning spec runs on the
# whole model, so a matcher built from the dumped dispatch (which keeps it) would not apply.
BATCH_2_CONV_MODEL = CONV_MODEL.replace("1x16x18x18", "2x16x18x18").replace(
    "1x32x16x16", "2x32x16x16"
)


@dataclass(frozen=True)
class ConvSpec:
    """A real convolution spec built by the builder for BATCH_2_CONV_MODEL's dispatch."""

    spec_path: Path
    model_path: Path
    problem: ConvolutionProblem
    lowering_config: str


def build_conv_spec(folder: Path) -> ConvSpec:
    """Dump the convolution's dispatch, parse it, and build a spec for a config that differs from
    the compiler's default in its output-channel distribution tile only."""
    (benchmark,) = dump_benchmarks(BATCH_2_CONV_MODEL, folder)
    context = ir.Context()
    module = parse_module(read_mlir_file(benchmark), context, benchmark)
    root_op = find_root_op(module)
    problem = parse_problem(root_op)
    assert isinstance(problem, ConvolutionProblem)
    target = LlvmCpuTarget(TEST_CPU)
    default = space_for(target, problem).parse_default_knobs(problem, root_op)
    assert default is not None
    knobs = tuple(
        (name, (16 if value != 16 else 32) if name == "dist_f" else value)
        for name, value in default
    )
    info = space_for(target, problem).configuration(problem, knobs, context).compilation_info
    with context:
        lowering_config = str(
            iree_codegen.CompilationInfoAttr(ir.Attribute.parse(info)).lowering_config
        )
    spec = render_spec(build_spec([MatcherEntry(problem, info)], context))
    return ConvSpec(
        write(folder, "conv_spec.mlir", spec),
        write(folder, "conv.mlir", BATCH_2_CONV_MODEL),
        problem,
        lowering_config,
    )
