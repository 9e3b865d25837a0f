"""The op-family interface: parsing, database keys, matchers and their readers, per family."""

# ruff: noqa: E501  (MLIR text is data, kept verbatim)

from __future__ import annotations

import json
from pathlib import Path

import pytest
from iree.compiler import ir

from ireetune.core.errors import IreetuneError
from ireetune.core.target import Target, prepare_space, space_for, spec_flags
from ireetune.database.store import problem_key
from ireetune.problem.attention import AttentionProblem
from ireetune.problem.contraction import ContractionProblem
from ireetune.problem.reduction import ReductionProblem
from ireetune.problem.registry import (
    FAMILIES,
    family_names,
    family_of,
    parse_problem,
    problem_from_fields,
)
from ireetune.problem.root_op import find_root_op
from ireetune.spec.builder import MatcherEntry, build_spec, render_spec
from ireetune.spec.inspect import MatchVerdict, list_matchers, match_problem
from ireetune.spec.source import parse_spec
from ireetune.targets import parse_target
from tests.conftest import IREE_COMPILE, TEST_TARGET, dump_benchmarks, parse_function_op
from tests.targets.gpu.test_gpu_compile import ATTENTION_F16, dump_gpu_benchmark

SOFTMAX_MODEL = """
func.func @main(%x: tensor<8x256xf32>) -> tensor<8x256xf32> {
  %empty = tensor.empty() : tensor<8x256xf32>
  %r = linalg.softmax dimension(1) ins(%x : tensor<8x256xf32>) outs(%empty : tensor<8x256xf32>) -> tensor<8x256xf32>
  return %r : tensor<8x256xf32>
}
"""
ROW_MAX_MODEL = """
func.func @main(%x: tensor<8x256xf32>) -> tensor<8xf32> {
  %low = arith.constant -3.0e+38 : f32
  %empty = tensor.empty() : tensor<8xf32>
  %init = linalg.fill ins(%low : f32) outs(%empty : tensor<8xf32>) -> tensor<8xf32>
  %r = linalg.reduce ins(%x : tensor<8x256xf32>) outs(%init : tensor<8xf32>) dimensions = [1]
    (%in: f32, %acc: f32) { %m = arith.maximumf %in, %acc : f32
      linalg.yield %m : f32 }
  return %r : tensor<8xf32>
}
"""
CPU_REDUCTION_INFO = (
    "#iree_codegen.compilation_info<lowering_config = #iree_cpu.lowering_config<distribution = [4, 0], "
    "vector_common_parallel = [2, 0], vector_reduction = [0, 32]>, translation_info = "
    "#iree_codegen.translation_info<pipeline = #iree_cpu.pipeline<DoubleTilingExpert>>>"
)


def check_family_coverage(target: Target) -> list[str]:
    """List the op families a target neither tunes nor explains (should be none)."""
    spaces, unsupported = target.family_spaces(), target.unsupported_families()
    return [name for name in family_names() if name not in spaces and name not in unsupported]


def _problem_of(benchmark: Path, context: ir.Context) -> tuple[ir.Module, object]:
    with context:
        module = ir.Module.parse(benchmark.read_text())
        return module, parse_problem(find_root_op(module))


@pytest.fixture(scope="module")
def softmax_benchmark(tmp_path_factory: pytest.TempPathFactory) -> Path:
    (path,) = dump_benchmarks(SOFTMAX_MODEL, tmp_path_factory.mktemp("softmax"))
    return path


@pytest.fixture(scope="module")
def row_max_benchmark(tmp_path_factory: pytest.TempPathFactory) -> Path:
    (path,) = dump_benchmarks(ROW_MAX_MODEL, tmp_path_factory.mktemp("row_max"))
    return path


def test_a_softmax_root_is_a_reduction_with_its_body(softmax_benchmark: Path) -> None:
    _, problem = _problem_of(softmax_benchmark, ir.Context())
    assert isinstance(problem, ReductionProblem)
    assert (
        problem.family, problem.signature, problem.parallel_dims, problem.reduction_dims,
        problem.input_shapes, problem.body,
    ) == (
        "reduction", "reduction_8x256_f32_f32_f32", (0,), (1,), ((8, 256), (8,)),
        ("arith.subf", "math.exp", "arith.addf", "linalg.yield"),
    )  # fmt: skip
    assert family_of(problem).reference_inputs(problem).reduction_size == 256


def test_new_families_name_their_kind_in_the_key_and_read_back(softmax_benchmark: Path) -> None:
    _, problem = _problem_of(softmax_benchmark, ir.Context())
    key = problem_key(problem)  # type: ignore[arg-type]
    assert json.loads(key)["kind"] == "reduction"
    assert problem_from_fields(json.loads(key)) == problem
    with pytest.raises(IreetuneError) as excinfo:
        problem_from_fields({**json.loads(key), "kind": "scan"})
    assert "unknown kind 'scan'" in str(excinfo.value)


def test_contraction_keys_stay_byte_identical() -> None:
    # A key stored before families existed: exactly the record's fields, no kind.
    problem = ContractionProblem(
        op_name="linalg.matmul", loop_sizes=(4, 8, 2), batch_dims=(), m_dims=(0,), n_dims=(1,), k_dims=(2,),
        lhs_type="f32", rhs_type="f32", output_type="f32",
        indexing_maps=("(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d2, d1)", "(d0, d1, d2) -> (d0, d1)"),
        lhs_shape=(4, 2), rhs_shape=(2, 8), output_shape=(4, 8),
    )  # fmt: skip
    key = problem_key(problem)
    assert key == (
        '{"batch_dims": [], "indexing_maps": ["(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d2, d1)", '
        '"(d0, d1, d2) -> (d0, d1)"], "k_dims": [2], "lhs_shape": [4, 2], "lhs_type": "f32", '
        '"loop_sizes": [4, 8, 2], "m_dims": [0], "n_dims": [1], "op_name": "linalg.matmul", '
        '"output_shape": [4, 8], "output_type": "f32", "rhs_shape": [2, 8], "rhs_type": "f32"}'
    )
    assert problem_from_fields(json.loads(key)) == problem
    assert problem.family == "contraction"


def test_a_reduction_matcher_is_read_back_and_compared(
    softmax_benchmark: Path, row_max_benchmark: Path
) -> None:
    context = ir.Context()
    _, softmax = _problem_of(softmax_benchmark, context)
    _, row_max = _problem_of(row_max_benchmark, context)
    text = render_spec(build_spec([MatcherEntry(softmax, CPU_REDUCTION_INFO)], context))  # type: ignore[arg-type]
    assert "transform.iree.match.cast_compatible_dag_from_root" in text
    (matcher,) = list_matchers(parse_spec(text, "spec.mlir", context))
    assert matcher.kind == "reduction"
    assert matcher.conditions == (
        "reduction tensor<8x256xf32> x tensor<8xf32> -> tensor<8xf32>, loops=[8, 256] "
        "[parallel, reduction], body arith.subf, math.exp, arith.addf, maps (d0, d1) -> (d0, d1); "
        "(d0, d1) -> (d0); (d0, d1) -> (d0)",
    )
    assert [match_problem(matcher, p) for p in (softmax, row_max)] == [  # type: ignore[arg-type]
        MatchVerdict.HIT,
        MatchVerdict.MISS,
    ]


def test_the_reduction_reference_keeps_the_dispatch_init(row_max_benchmark: Path) -> None:
    from ireetune.verify.reference import build_reference_module

    context = ir.Context()
    module, problem = _problem_of(row_max_benchmark, context)
    with context:
        reference = str(build_reference_module(find_root_op(module), context, problem))  # type: ignore[arg-type]
    # The row maximum starts from the dispatch's own fill value, not zero.
    assert "-3.000000e+38" in reference and "arith.maximumf" in reference


@pytest.fixture(scope="module")
def attention_benchmark(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return dump_gpu_benchmark(ATTENTION_F16, "cuda:sm_80", tmp_path_factory.mktemp("attention"))


def test_attention_is_parsed_from_its_online_form(attention_benchmark: Path) -> None:
    _, problem = _problem_of(attention_benchmark, ir.Context())
    assert isinstance(problem, AttentionProblem)
    assert (problem.signature, problem.op_name, problem.sizes(problem.k1_dims)) == (
        "attention_4x128x64x128x64_f16_f16_f16_f32",
        "iree_linalg_ext.online_attention",
        (64,),
    )
    assert problem_from_fields(json.loads(problem_key(problem))) == problem


def test_every_target_tunes_or_explains_every_family() -> None:
    assert [
        check_family_coverage(parse_target(t))
        for t in ("cpu", "cuda:sm_80", "rocm:gfx942", "vulkan:lavapipe")
    ] == [[], [], [], []]
    assert sorted(f.name for f in FAMILIES) == [
        "attention", "batch_contraction", "buffer_copy", "contraction", "convolution",
        "elementwise", "inner_tiled", "pack", "reduction", "unpack",
    ]  # fmt: skip


def test_an_unsupported_family_is_refused_with_the_reason(
    attention_benchmark: Path, tmp_path: Path
) -> None:
    context = ir.Context()
    _, problem = _problem_of(attention_benchmark, context)
    target = parse_target("cpu")
    with pytest.raises(IreetuneError) as excinfo:
        prepare_space(target, problem, attention_benchmark, tmp_path, context)  # type: ignore[arg-type]
    assert str(excinfo.value).startswith(
        "attention is not supported on cpu: IREE 3.13 lowers CPU attention"
    )


def test_database_export_runs_the_cpu_prologue_and_refuses_partial_configs(
    attention_benchmark: Path,
) -> None:
    from dataclasses import replace

    from ireetune.problem.convolution import ConvolutionProblem
    from ireetune.spec.export import render_linked_spec
    from tests.database.test_database import KEY, stored_result
    from tests.targets.llvm_cpu.test_cpu_conv_space import CONV

    conv_key = replace(KEY, problem=problem_key(CONV), signature=CONV.signature)
    assert isinstance(CONV, ConvolutionProblem)
    spec = render_linked_spec([stored_result({"dist_f": 32}, "verified", 1.3, key=conv_key)])
    assert (
        'transform.apply_registered_pass "iree-codegen-insert-batch-dim-for-batchless-conv"' in spec
    )
    _, attention = _problem_of(attention_benchmark, ir.Context())
    attention_key = replace(
        KEY,
        target="cuda:sm_80#abc",
        problem=problem_key(attention),
        signature=attention.signature,  # type: ignore[arg-type]
    )
    with pytest.raises(IreetuneError) as excinfo:
        render_linked_spec([stored_result({"m_tile": 64}, "verified", 1.3, key=attention_key)])
    assert "keep only the compilation_info" in str(excinfo.value)


# A ResNet downsampling branch: ReLU, then a 1x1 convolution of stride 2. IREE folds its unit
# loops away and the dispatch's root is a generic reduction reading its image with strides.
STRIDED_POINTWISE_MODEL = """
func.func @main(%x: tensor<1x16x8x8xf32>, %w: tensor<32x16x1x1xf32>) -> tensor<1x32x4x4xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x16x8x8xf32>
  %relu = linalg.generic {indexing_maps = [affine_map<(a, b, c, d) -> (a, b, c, d)>, affine_map<(a, b, c, d) -> (a, b, c, d)>],
                          iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%x : tensor<1x16x8x8xf32>) outs(%e : tensor<1x16x8x8xf32>) {
    ^bb0(%in: f32, %out: f32):
      %m = arith.maximumf %in, %zero : f32
      linalg.yield %m : f32
  } -> tensor<1x16x8x8xf32>
  %empty = tensor.empty() : tensor<1x32x4x4xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<1x32x4x4xf32>) -> tensor<1x32x4x4xf32>
  %r = linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<2> : tensor<2xi64>}
      ins(%relu, %w : tensor<1x16x8x8xf32>, tensor<32x16x1x1xf32>) outs(%init : tensor<1x32x4x4xf32>) -> tensor<1x32x4x4xf32>
  return %r : tensor<1x32x4x4xf32>
}
"""


@pytest.mark.parametrize(
    ("model_text", "first_map"),
    [
        (STRIDED_POINTWISE_MODEL, "(d0, d1, d2, d3) -> (d3, d1 * 2, d2 * 2)"),
        (SOFTMAX_MODEL, "(d0, d1) -> (d0, d1)"),
    ],
    ids=["strided_1x1_conv", "softmax"],
)
def test_a_reduction_reference_takes_the_config(
    model_text: str, first_map: str, tmp_path: Path
) -> None:
    # ReductionProblem.reference_carries_config: candidates are searched on real inputs, so a
    # candidate's reference program must differ from the default's.
    import subprocess

    from ireetune.flows.dispatch.stages import BASELINE_SPEC_TEXT
    from ireetune.spec.builder import build_configuration_spec
    from ireetune.verify.reference import build_reference_module

    benchmarks = dump_benchmarks(model_text, tmp_path / "dump")
    context = ir.Context()
    found = []
    for benchmark in benchmarks:
        module, problem = _problem_of_or_none(benchmark, context)
        if problem is not None and problem.family == "reduction":
            found.append((module, problem))
    ((module, problem),) = found
    assert problem.reference_carries_config  # type: ignore[attr-defined]
    assert problem.indexing_maps[0] == first_map  # type: ignore[attr-defined]
    target = parse_target(TEST_TARGET)
    with context:
        root_op = find_root_op(module)
        default = space_for(target, problem).parse_default_knobs(problem, root_op)  # type: ignore[arg-type]
        reference = tmp_path / "reference.mlir"
        reference.write_text(str(build_reference_module(root_op, context, problem)))  # type: ignore[arg-type]
    assert default is not None
    knobs = tuple((n, v * 2 if n == "dist_0" else v) for n, v in default)
    spec = tmp_path / "spec.mlir"
    spec.write_text(
        build_configuration_spec(
            problem, space_for(target, problem).configuration(problem, knobs, context), (), context
        )  # type: ignore[arg-type]
    )
    baseline = tmp_path / "baseline.mlir"
    baseline.write_text(BASELINE_SPEC_TEXT)
    binaries = []
    for path in (baseline, spec):
        output = tmp_path / f"{path.stem}.vmfb"
        subprocess.run(
            [IREE_COMPILE, str(reference), *target.compile_flags(), *spec_flags(target, path), "-o", str(output)],
            check=True, capture_output=True,
        )  # fmt: skip
        binaries.append(output.read_bytes())
    assert binaries[0] != binaries[1]


def _problem_of_or_none(benchmark: Path, context: ir.Context) -> tuple[ir.Module, object | None]:
    with context:
        module = ir.Module.parse(benchmark.read_text())
        try:
            return module, parse_problem(find_root_op(module))
        except IreetuneError:
            return module, None


def test_a_strided_contraction_candidate_becomes_a_contraction_in_the_model(
    tmp_path: Path,
) -> None:
    # IREE leaves the strided 1x1 convolution a scalar reduction inside a network; the
    # candidate's action rewrites it into a strided slice and a contraction after setting its
    # config, so the config stays on the op, and the model computes what the default computes.
    import subprocess

    import numpy as np
    from iree import runtime

    from ireetune.spec.apply import compile_with_spec, resolve_compile_target
    from ireetune.spec.builder import build_configuration_spec, matcher_name
    from ireetune.targets.llvm_cpu.reduction_space import STRIDED_CONTRACTION_PASS

    benchmarks = dump_benchmarks(STRIDED_POINTWISE_MODEL, tmp_path / "dump")
    context = ir.Context()
    found = [_problem_of_or_none(b, context) for b in benchmarks]
    ((module, problem),) = [(m, p) for m, p in found if p is not None and p.family == "reduction"]
    assert problem.strided_contraction  # type: ignore[attr-defined]
    target = parse_target(TEST_TARGET)
    with context:
        default = space_for(target, problem).parse_default_knobs(problem, find_root_op(module))  # type: ignore[arg-type]
    assert default is not None
    knobs = tuple((n, 4 if n == "vec_0" else v) for n, v in default)
    configuration = space_for(target, problem).configuration(problem, knobs, context)  # type: ignore[arg-type]
    assert configuration.function_passes == (STRIDED_CONTRACTION_PASS,)
    spec = tmp_path / "spec.mlir"
    spec.write_text(build_configuration_spec(problem, configuration, (), context))  # type: ignore[arg-type]
    model = tmp_path / "model.mlir"
    model.write_text(STRIDED_POINTWISE_MODEL)
    dumps = {}
    for label, flags in (("default", []), ("tuned", spec_flags(target, spec))):
        dump_dir = tmp_path / f"configs_{label}"
        subprocess.run(
            [IREE_COMPILE, str(model), *target.compile_flags(), *flags,
             f"--iree-hal-dump-executable-configurations-to={dump_dir}", "-o", str(tmp_path / f"{label}.vmfb")],
            check=True, capture_output=True,
        )  # fmt: skip
        dumps[label] = "\n".join(p.read_text() for p in sorted(dump_dir.glob("*.mlir")))
    assert "d1 * 2" in dumps["default"] and "d1 * 2" not in dumps["tuned"]
    assert "vector_common_parallel = [4, 1, 4, 0]" in dumps["tuned"]
    # `ireetune compile` compares the matcher with the op as the spec saw it, before the rewrite.
    report = compile_with_spec(
        model, resolve_compile_target(TEST_TARGET), spec, tmp_path / "c.vmfb", 120
    )
    assert report.landed and [c.matcher for c in report.checks] == [matcher_name(problem)]  # type: ignore[arg-type]
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in ((1, 16, 8, 8), (32, 16, 1, 1))]
    results = []
    for label in ("default", "tuned"):
        loaded = runtime.load_vm_flatbuffer_file(
            str(tmp_path / f"{label}.vmfb"), driver="local-task"
        )
        results.append(np.asarray(loaded.main(*inputs)))
    np.testing.assert_allclose(results[0], results[1], rtol=1e-5, atol=1e-5)


SUM_OF_RELU_FUNCTION = """
func.func @f(%x: tensor<64x96xf32>, %acc: tensor<64xf32>) -> tensor<64xf32> {
  %zero = arith.constant 0.0 : f32
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
      iterator_types = ["parallel", "reduction"]} ins(%x : tensor<64x96xf32>) outs(%acc : tensor<64xf32>) {
    ^bb0(%in: f32, %out: f32):
      %m = arith.maximumf %in, %zero : f32
      %s = arith.addf %m, %out : f32
      linalg.yield %s : f32
  } -> tensor<64xf32>
  return %r : tensor<64xf32>
}
"""


def test_a_body_matcher_reads_back_the_loops_it_names_as_parallel_or_reduced() -> None:
    context = ir.Context()
    module, generic = parse_function_op(SUM_OF_RELU_FUNCTION, context)
    with context:
        problem = parse_problem(generic)
    assert isinstance(problem, ReductionProblem)
    config = "#iree_codegen.compilation_info<lowering_config = #iree_cpu.lowering_config<distribution = [8, 0]>, translation_info = #iree_codegen.translation_info<pipeline = #iree_cpu.pipeline<DoubleTilingExpert>>>"
    spec = render_spec(build_spec([MatcherEntry(problem, config)], context))
    checks = "transform.match.structured.dim %arg1[0] parallel : !transform.any_op\n      transform.match.structured.dim %arg1[1] reduction : !transform.any_op"
    assert checks in spec, spec

    def read(text: str) -> tuple[str, ...] | None:
        (matcher,) = list_matchers(parse_spec(text, "spec.mlir", ir.Context()))
        return None if matcher.pattern is None else matcher.pattern.body[:2]

    assert read(spec) == ("parallel", "reduction")
    # `%h[all]` names every loop, `except(...)` the others, a negative position counts from the
    # last loop (as IREE reads them); a loop named twice, or one left unnamed, is not read.
    every = "transform.match.structured.dim %arg1[all] reduction : !transform.any_op"
    assert read(spec.replace(checks, every)) == ("reduction", "reduction")
    inverted = checks.replace("[1] reduction", "[except(0)] reduction")
    assert read(spec.replace(checks, inverted)) == ("parallel", "reduction")
    last = checks.replace("[1] reduction", "[-1] reduction")
    assert read(spec.replace(checks, last)) == ("parallel", "reduction")
    twice = checks.replace("[0] parallel", "[1] parallel")
    assert read(spec.replace(checks, twice)) is None
    partial = checks.split("\n")[1].strip()
    assert read(spec.replace(checks, partial)) is None
    # Not read is not a miss: `spec show` cannot say whether it matches the sum.
    (whole,) = list_matchers(parse_spec(spec, "spec.mlir", ir.Context()))
    assert match_problem(whole, problem) is MatchVerdict.HIT
    (part,) = list_matchers(parse_spec(spec.replace(checks, partial), "spec.mlir", ir.Context()))
    assert match_problem(part, problem) is MatchVerdict.UNKNOWN
    assert not part.op_names and "not read" in part.other_conditions[0]
