"""Tuning specs built with the bindings: anatomy, matcher contents, baseline spec."""

from __future__ import annotations

from pathlib import Path

from iree.compiler import ir

from ireetune.core.target import space_for
from ireetune.problem.root_op import find_root_op, parse_problem
from ireetune.spec.builder import MatcherEntry, build_spec, matcher_name, render_spec
from ireetune.targets import parse_target

CONFIG = (
    "#iree_codegen.compilation_info<lowering_config = #iree_cpu.lowering_config<"
    "distribution = [32, 64, 0], vector_common_parallel = [8, 32, 0], vector_reduction = [0, 0, 8]>, "
    "translation_info = #iree_codegen.translation_info<pipeline = #iree_cpu.pipeline<DoubleTilingExpert>>>"
)


def _spec_text(benchmark: Path) -> str:
    context = ir.Context()
    with context:
        module = ir.Module.parse(benchmark.read_text())
        problem = parse_problem(find_root_op(module))
    return render_spec(build_spec([MatcherEntry(problem, CONFIG)], context))


def test_spec_has_the_documented_anatomy(mmt_benchmark: Path) -> None:
    text = _spec_text(mmt_benchmark)
    header = next(line for line in text.splitlines() if line.startswith("module"))
    assert "transform.with_named_sequence" in header
    assert "iree_codegen.tuning_spec_with_default_entrypoint" in header
    assert (
        "transform.named_sequence @__kernel_config(%arg0: !transform.any_op {transform.consumed}) "
        "-> !transform.any_op attributes {iree_codegen.tuning_spec_entrypoint}"
    ) in text
    assert "@match_mmt_32x48x64_f16_f16_f32 -> @apply_op_config" in text
    assert 'transform.annotate %arg0 "compilation_info" = %arg1' in text


def test_matcher_pins_types_maps_and_every_dimension(mmt_benchmark: Path) -> None:
    text = _spec_text(mmt_benchmark)
    assert (
        "transform.iree.match.contraction %arg0, lhs_type = f16, rhs_type = f16, output_type = f32, "
        "indexing_maps = [#map, #map1, #map2]"
    ) in text
    assert "#map1 = affine_map<(d0, d1, d2) -> (d1, d2)>" in text
    dims = [line.strip() for line in text.splitlines() if "match.dims_equal" in line]
    assert dims == [
        "transform.iree.match.dims_equal %batch_dims, [] : !transform.param<i64>",
        "transform.iree.match.dims_equal %m_dims, [32] : !transform.param<i64>",
        "transform.iree.match.dims_equal %n_dims, [48] : !transform.param<i64>",
        "transform.iree.match.dims_equal %k_dims, [64] : !transform.param<i64>",
    ]
    assert "vector_common_parallel = [8, 32, 0]" in text


def test_two_entries_for_one_problem_get_distinct_matcher_names(matmul_benchmark: Path) -> None:
    context = ir.Context()
    with context:
        module = ir.Module.parse(matmul_benchmark.read_text())
        problem = parse_problem(find_root_op(module))
    text = render_spec(
        build_spec([MatcherEntry(problem, CONFIG), MatcherEntry(problem, CONFIG)], context)
    )
    name = matcher_name(problem)
    pairs = [
        line.strip().rstrip(",") for line in text.splitlines() if "-> @apply_op_config" in line
    ]
    assert pairs == [
        f"@{name} -> @apply_op_config",
        f"@{name}_2 -> @apply_op_config : (!transform.any_op) -> !transform.any_op",
    ]


def test_cpu_compilation_info_round_trips_through_the_bindings(
    znver4_matmul_benchmark: Path,
) -> None:
    # Dumped for znver4, not the host: an AVX2-only host picks other defaults (vec_k=8).
    context = ir.Context()
    target = parse_target("cpu:znver4")
    with context:
        module = ir.Module.parse(znver4_matmul_benchmark.read_text())
        root = find_root_op(module)
        problem = parse_problem(root)
        default = space_for(target, problem).parse_default_knobs(problem, root)
    assert default == (("dist_m", 8), ("dist_n", 64), ("vec_k", 16), ("vec_m", 8), ("vec_n", 16))
    info = space_for(target, problem).configuration(problem, default, context).compilation_info
    assert info == (
        "#iree_codegen.compilation_info<lowering_config = #iree_cpu.lowering_config<"
        "distribution = [8, 64, 0], vector_common_parallel = [8, 16, 0], vector_reduction = [0, 0, 16]>, "
        "translation_info = <pipeline = #iree_cpu.pipeline<DoubleTilingExpert>>>"
    )


def test_spec_without_entries_is_the_valid_no_op_spec(
    matmul_benchmark: Path, tmp_path: Path
) -> None:
    from ireetune.flows.dispatch.stages import BASELINE_SPEC_TEXT

    context = ir.Context()
    text = render_spec(build_spec([], context))
    assert "tuning_spec_with_default_entrypoint" not in text
    assert "transform.yield %arg0" in text and "{transform.readonly}" in text
    with context:
        assert str(ir.Module.parse(text)) == str(ir.Module.parse(BASELINE_SPEC_TEXT))
