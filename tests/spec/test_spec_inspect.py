"""`ireetune spec show`: what each matcher matches and applies, and a model's coverage."""

# ruff: noqa: E501  (MLIR text and expected output lines are data, kept verbatim)

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from iree.compiler import ir

from ireetune.cli import main
from ireetune.problem.contraction import ContractionProblem
from ireetune.spec.inspect import (
    DispatchRoot,
    MatchPattern,
    MatchVerdict,
    compute_coverage,
    list_matchers,
    match_problem,
)
from ireetune.spec.source import SourceLocation, parse_spec
from tests.spec_support import MIXED_MODEL, VALID_SPEC, ConvSpec, build_conv_spec, edit, write

MAPS = ("(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d2, d1)", "(d0, d1, d2) -> (d0, d1)")
CPU_LOWERING = (
    "#iree_cpu.lowering_config<distribution = [32, 64, 0], vector_common_parallel = [8, 16, 0], "
    "vector_reduction = [0, 0, 16]>"
)
# The matcher of IREE's documentation: a DAG match through an included helper, then types.
DAG_MATCHER_SPEC = """
module attributes {transform.with_named_sequence} {
  transform.named_sequence @apply_op_config(%op: !transform.any_op {transform.readonly},
                                            %config: !transform.any_param {transform.readonly}) {
    transform.annotate %op "compilation_info" = %config : !transform.any_op, !transform.any_param
    transform.yield
  }
  transform.named_sequence @match_mmt_f16(%root: !transform.any_op {transform.readonly}) -> !transform.any_op {
    transform.match.operation_name %root ["linalg.generic"] : !transform.any_op
    %ins, %outs = transform.iree.match.cast_compatible_dag_from_root %root {
    ^bb0(%lhs: tensor<?x?xf16>, %rhs: tensor<?x?xf16>, %out: tensor<?x?xf32>):
      %r = linalg.matmul ins(%lhs, %rhs : tensor<?x?xf16>, tensor<?x?xf16>)
                         outs(%out : tensor<?x?xf32>) -> tensor<?x?xf32>
    } : (!transform.any_op) -> (!transform.any_value, !transform.any_value)
    transform.yield %root : !transform.any_op
  }
  transform.named_sequence @match_mmt_64x64(%op: !transform.any_op {transform.readonly})
      -> (!transform.any_op, !transform.any_param) {
    %mmt = transform.include @match_mmt_f16 failures(propagate) (%op) : (!transform.any_op) -> !transform.any_op
    %lhs = transform.get_operand %op[0] : (!transform.any_op) -> !transform.any_value
    transform.iree.match.cast_compatible_type %lhs = tensor<64x64xf16> : !transform.any_value
    %config = transform.param.constant {key = "custom"} -> !transform.any_param
    transform.yield %op, %config : !transform.any_op, !transform.any_param
  }
  transform.named_sequence @__kernel_config(%variant: !transform.any_op {transform.consumed}) -> !transform.any_op
      attributes {iree_codegen.tuning_spec_entrypoint} {
    %r = transform.foreach_match in %variant @match_mmt_64x64 -> @apply_op_config
      : (!transform.any_op) -> !transform.any_op
    transform.yield %r : !transform.any_op
  }
}
"""


def _problem(m: int, n: int, k: int, op_name: str = "linalg.matmul") -> ContractionProblem:
    return ContractionProblem(
        op_name=op_name,
        loop_sizes=(m, n, k),
        batch_dims=(),
        m_dims=(0,),
        n_dims=(1,),
        k_dims=(2,),
        lhs_type="f32",
        rhs_type="f32",
        output_type="f32",
        indexing_maps=MAPS,
        lhs_shape=(m, k),
        rhs_shape=(k, n),
        output_shape=(m, n),
    )


def test_contraction_matcher_is_read_from_the_ir() -> None:
    (matcher,) = list_matchers(parse_spec(VALID_SPEC, "valid.mlir", ir.Context()))
    assert (
        matcher.name,
        matcher.action,
        matcher.entry_point,
        matcher.location,
        matcher.pattern,
        matcher.lowering_config,
        matcher.translation_info,
    ) == (
        "match_matmul_64x128x96",
        "apply_op_config",
        "valid_spec::__kernel_config",
        SourceLocation("valid.mlir", 8, 3),
        MatchPattern(
            "transform.iree.match.contraction",
            ("f32", "f32", "f32"),
            MAPS,
            ((), (64,), (128,), (96,)),
        ),
        CPU_LOWERING,
        "#iree_codegen.translation_info<pipeline = #iree_cpu.pipeline<DoubleTilingExpert>>",
    )


def test_other_matchers_are_described_through_includes() -> None:
    (matcher,) = list_matchers(parse_spec(DAG_MATCHER_SPEC, "dag.mlir", ir.Context()))
    assert (matcher.kind, matcher.conditions, matcher.lowering_config, matcher.other_params) == (
        "linalg.generic",
        (
            "op name in [linalg.generic]",
            "a DAG of linalg.matmul",
            "a value of type tensor<64x64xf16>",
        ),
        None,
        ('{key = "custom"}',),
    )
    assert match_problem(matcher, _problem(64, 64, 64, "linalg.generic")) is MatchVerdict.UNKNOWN
    assert match_problem(matcher, _problem(64, 64, 64, "linalg.matmul")) is MatchVerdict.MISS


def test_static_match_compares_sizes_types_and_maps() -> None:
    (matcher,) = list_matchers(parse_spec(VALID_SPEC, "valid.mlir", ir.Context()))
    transposed = ContractionProblem(
        **{
            **_problem(64, 128, 96).__dict__,
            "indexing_maps": (MAPS[0], "(d0, d1, d2) -> (d1, d2)", MAPS[2]),
        }
    )
    verdicts = [
        match_problem(matcher, problem)
        for problem in (_problem(64, 128, 96), _problem(64, 128, 97), transposed)
    ]
    assert verdicts == [MatchVerdict.HIT, MatchVerdict.MISS, MatchVerdict.MISS]


def test_coverage_marks_the_first_hit_and_uncovered_dispatches() -> None:
    (matcher,) = list_matchers(parse_spec(VALID_SPEC, "valid.mlir", ir.Context()))
    dispatches = [
        DispatchRoot(0, "d0", "linalg.matmul", _problem(64, 128, 96)),
        DispatchRoot(1, "d1", "linalg.matmul", _problem(64, 32, 128)),
        DispatchRoot(2, "d2", "linalg.generic", None),
    ]
    coverage = compute_coverage([matcher], dispatches)
    assert [(c.winner.name if c.winner else None, c.flop_share) for c in coverage] == [
        ("match_matmul_64x128x96", 0.75),
        (None, 0.25),
        (None, None),
    ]


def test_spec_without_matchers_lists_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # IREE requires a foreach_match in a default entry point, so this spec names its own.
    text = edit(VALID_SPEC, ", iree_codegen.tuning_spec_with_default_entrypoint", "")
    text = text[: text.index("    %result = transform.foreach_match")]
    text += "    transform.yield %variant : !transform.any_op\n  }\n}\n"
    assert main(["spec", "show", str(write(tmp_path, "empty.mlir", text))]) == 0
    assert capsys.readouterr().out == "no matchers: this spec configures nothing\n"


def test_show_with_model_lists_hits_and_uncovered(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec_path = write(tmp_path, "valid.mlir", VALID_SPEC)
    model_path = write(tmp_path, "mixed.mlir", MIXED_MODEL)
    assert (
        main(["spec", "show", str(spec_path), "--model", str(model_path), "--target", "cpu"]) == 0
    )
    output = capsys.readouterr().out
    coverage = output[output.index("dispatches:") :]
    assert coverage == (
        "dispatches:\n"
        "  0: main_dispatch_0 [matmul_64x128x96_f32_f32_f32] 75% of FLOPs: configured by @match_matmul_64x128x96\n"
        "  1: main_dispatch_1 [matmul_64x32x128_f32_f32_f32] 25% of FLOPs: NOT COVERED\n"
        "uncovered dispatches, by cost:\n"
        "  HOT 1: main_dispatch_1 (25% of FLOPs)\n"
    )
    assert output.startswith(
        f"0. @valid_spec::@match_matmul_64x128x96 -> @apply_op_config ({spec_path}:8:3)\n"
    )


def test_show_reports_a_matcher_no_dispatch_uses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec_path = write(tmp_path, "other.mlir", edit(VALID_SPEC, "[96] :", "[97] :"))
    model_path = write(tmp_path, "mixed.mlir", MIXED_MODEL)
    assert main(["spec", "show", str(spec_path), "--model", str(model_path)]) == 0
    assert capsys.readouterr().out.endswith(
        "matchers that configure no dispatch: @match_matmul_64x128x96\n"
    )


@pytest.fixture(scope="module")
def conv_spec(tmp_path_factory: pytest.TempPathFactory) -> ConvSpec:
    return build_conv_spec(tmp_path_factory.mktemp("conv_spec"))


def test_convolution_matcher_is_read_from_the_ir(conv_spec: ConvSpec) -> None:
    (matcher,) = list_matchers(parse_spec(conv_spec.spec_path.read_text(), "c.mlir", ir.Context()))
    assert (matcher.name, matcher.kind, matcher.pattern, matcher.lowering_config) == (
        "match_conv_2x32x16x16x16x3x3_f32_f32_f32",
        "convolution",
        MatchPattern(
            "transform.iree.match.convolution",
            ("f32", "f32", "f32"),
            conv_spec.problem.indexing_maps,
            ((2,), (16, 16), (32,), (3, 3), (16,), (), (1, 1), (1, 1)),
        ),
        conv_spec.lowering_config,
    )


def test_static_match_of_a_convolution_compares_sizes_strides_and_family(
    conv_spec: ConvSpec,
) -> None:
    context = ir.Context()
    (conv_matcher,) = list_matchers(parse_spec(conv_spec.spec_path.read_text(), "c.mlir", context))
    (matmul_matcher,) = list_matchers(parse_spec(VALID_SPEC, "valid.mlir", context))
    problem = conv_spec.problem
    verdicts = [
        match_problem(conv_matcher, problem),
        match_problem(conv_matcher, replace(problem, strides=(2, 2))),
        match_problem(conv_matcher, replace(problem, loop_sizes=(2, 64, 16, 16, 16, 3, 3))),
        match_problem(conv_matcher, _problem(64, 128, 96)),
        match_problem(matmul_matcher, problem),
    ]
    assert verdicts == [MatchVerdict.HIT, *[MatchVerdict.MISS] * 4]


def test_show_with_model_covers_a_convolution(
    conv_spec: ConvSpec, capsys: pytest.CaptureFixture[str]
) -> None:
    arguments = ["spec", "show", str(conv_spec.spec_path), "--model", str(conv_spec.model_path)]
    assert main(arguments) == 0
    output = capsys.readouterr().out
    assert output[output.index("dispatches:") :] == (
        "dispatches:\n"
        "  0: main_dispatch_0 [conv_2x32x16x16x16x3x3_f32_f32_f32] 100% of FLOPs: configured by @match_conv_2x32x16x16x16x3x3_f32_f32_f32\n"
        "uncovered dispatches, by cost:\n"
        "  none\n"
    )
    assert "   matches: convolution\n" in output
