"""`ireetune spec link`: combine, link with iree-opt, renames, overlaps and who wins."""

# ruff: noqa: E501  (MLIR text and expected output lines are data, kept verbatim)

from __future__ import annotations

from pathlib import Path

import pytest

from ireetune.cli import main
from ireetune.spec.apply import compile_with_spec, resolve_compile_target
from ireetune.spec.link import LinkForm, Overlap, Rename, link_spec_files
from tests.spec_support import MATMUL_MODEL, VALID_SPEC, edit, write

# The same 64x128x96 matcher as VALID_SPEC (and the same symbol names) with another config,
# plus a 512x512x512 matcher.
OTHER_SPEC = edit(
    edit(VALID_SPEC, "module @valid_spec", "module @other_spec"),
    "distribution = [32, 64, 0]",
    "distribution = [16, 32, 0]",
)
MATCHER_512 = """
  transform.named_sequence @match_matmul_512(%root: !transform.any_op {transform.readonly})
      -> (!transform.any_op, !transform.any_param) {
    %batch, %m, %n, %k = transform.iree.match.contraction %root,
        lhs_type = f32, rhs_type = f32, output_type = f32 : !transform.any_op -> !transform.param<i64>
    transform.iree.match.dims_equal %m, [512] : !transform.param<i64>
    %config = transform.param.constant #iree_codegen.compilation_info<
        lowering_config = #iree_cpu.lowering_config<distribution = [64, 64, 0]>,
        translation_info = #iree_codegen.translation_info<pipeline = #iree_cpu.pipeline<DoubleTilingExpert>>
      > -> !transform.any_param
    transform.yield %root, %config : !transform.any_op, !transform.any_param
  }
  transform.named_sequence @__kernel_config("""
OTHER_SPEC = edit(OTHER_SPEC, "\n  transform.named_sequence @__kernel_config(", MATCHER_512)
OTHER_SPEC = edit(
    OTHER_SPEC,
    "@match_matmul_64x128x96 -> @apply_op_config\n",
    "@match_matmul_64x128x96 -> @apply_op_config, @match_matmul_512 -> @apply_op_config\n",
)
NO_DEFAULT_ENTRY = edit(VALID_SPEC, ", iree_codegen.tuning_spec_with_default_entrypoint", "")
MATCHER_KEY = (
    "contraction f32 x f32 -> f32, batch=[] m=[64] n=[128] k=[96], maps (d0, d1, d2) -> (d0, d2); "
    "(d0, d1, d2) -> (d2, d1); (d0, d1, d2) -> (d0, d1)"
)
FIRST_WINS = (
    "it comes first in the same transform.foreach_match, which applies only the first matcher "
    "that succeeds"
)


def _landed_config(tmp_path: Path, spec_path: Path) -> tuple[str, str]:
    """Compile MATMUL_MODEL with the spec; return (matcher, config) IREE actually used."""
    model_path = write(tmp_path, "model.mlir", MATMUL_MODEL)
    report = compile_with_spec(
        model_path, resolve_compile_target("cpu"), spec_path, tmp_path / "model.vmfb", 60.0
    )
    assert report.landed, report
    (check,) = report.checks
    return check.matcher, check.found


def test_merged_link_first_spec_wins_and_its_config_lands(tmp_path: Path) -> None:
    first = write(tmp_path, "first.mlir", VALID_SPEC)
    second = write(tmp_path, "second.mlir", OTHER_SPEC)
    result = link_spec_files([first, second], tmp_path / "linked.mlir")
    assert (result.form, result.matcher_count, result.renames, result.overlaps) == (
        LinkForm.MERGED,
        3,
        (
            Rename(str(second), "apply_op_config", "apply_op_config_2"),
            Rename(str(second), "match_matmul_64x128x96", "match_matmul_64x128x96_2"),
        ),
        (
            Overlap(
                MATCHER_KEY,
                ((str(first), "match_matmul_64x128x96"), (str(second), "match_matmul_64x128x96_2")),
                (str(first), "match_matmul_64x128x96"),
                FIRST_WINS,
            ),
        ),
    )
    matcher, config = _landed_config(tmp_path, result.output_path)
    assert (matcher, "distribution = [32, 64, 0]" in config) == ("match_matmul_64x128x96", True)


def test_link_order_decides_the_winner(tmp_path: Path) -> None:
    first = write(tmp_path, "first.mlir", OTHER_SPEC)
    second = write(tmp_path, "second.mlir", VALID_SPEC)
    result = link_spec_files([first, second], tmp_path / "linked.mlir")
    assert [o.winner for o in result.overlaps] == [(str(first), "match_matmul_64x128x96")]
    matcher, config = _landed_config(tmp_path, result.output_path)
    assert (matcher, "distribution = [16, 32, 0]" in config) == ("match_matmul_64x128x96", True)


def test_included_link_last_spec_wins_and_its_config_lands(tmp_path: Path) -> None:
    first = write(tmp_path, "first.mlir", NO_DEFAULT_ENTRY)
    second = write(tmp_path, "second.mlir", OTHER_SPEC)
    result = link_spec_files([first, second], tmp_path / "linked.mlir")
    assert (result.form, [o.winner for o in result.overlaps], result.overlaps[0].reason) == (
        LinkForm.INCLUDED,
        [(str(second), "match_matmul_64x128x96_2")],
        "its entry point @other_spec::__kernel_config_2 runs after the others and annotates the op last",
    )
    matcher, config = _landed_config(tmp_path, result.output_path)
    assert (matcher, "distribution = [16, 32, 0]" in config) == ("match_matmul_64x128x96_2", True)


def test_single_input_is_written_through(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec_path = write(tmp_path, "only.mlir", VALID_SPEC)
    output = tmp_path / "out.mlir"
    assert main(["spec", "link", str(spec_path), "-o", str(output)]) == 0
    assert capsys.readouterr().out == (
        f"linked 1 spec(s) into {output} (single form, 1 matchers)\n"
        f"  link order 0: {spec_path}\n"
        "no overlapping matchers\n"
    )
    assert main(["spec", "check", str(output)]) == 0


def test_already_nested_input_is_split_into_its_specs(tmp_path: Path) -> None:
    first = write(tmp_path, "first.mlir", NO_DEFAULT_ENTRY)
    second = write(tmp_path, "second.mlir", OTHER_SPEC)
    nested = link_spec_files([first, second], tmp_path / "nested.mlir")
    assert nested.form is LinkForm.INCLUDED
    third = write(
        tmp_path, "third.mlir", edit(VALID_SPEC, "module @valid_spec", "module @third_spec")
    )
    result = link_spec_files([nested.output_path, third], tmp_path / "linked.mlir")
    assert (result.spec_labels, result.matcher_count) == (
        (f"{nested.output_path}::@valid_spec", f"{nested.output_path}::@other_spec", str(third)),
        4,
    )


def test_clashing_helper_names_keep_their_own_include(tmp_path: Path) -> None:
    # Both specs include a helper named @is_matmul with different bodies; after linking, each
    # matcher must still include its own spec's helper.
    def with_helper(op_name: str) -> str:
        helper = f"""
  transform.named_sequence @is_matmul(%op: !transform.any_op {{transform.readonly}}) -> !transform.any_op {{
    transform.match.operation_name %op ["{op_name}"] : !transform.any_op
    transform.yield %op : !transform.any_op
  }}
  transform.named_sequence @match_matmul_64x128x96("""
        text = edit(VALID_SPEC, "\n  transform.named_sequence @match_matmul_64x128x96(", helper)
        return edit(
            text,
            "    %batch, %m, %n, %k",
            "    %checked = transform.include @is_matmul failures(propagate) (%root)\n"
            "      : (!transform.any_op) -> !transform.any_op\n    %batch, %m, %n, %k",
        )

    first = write(tmp_path, "first.mlir", with_helper("linalg.matmul"))
    second = write(tmp_path, "second.mlir", with_helper("linalg.generic"))
    result = link_spec_files([first, second], tmp_path / "linked.mlir")
    linked_text = result.output_path.read_text()
    assert Rename(str(second), "is_matmul", "is_matmul_2") in result.renames
    assert (
        linked_text.count("transform.include @is_matmul "),
        linked_text.count("transform.include @is_matmul_2 "),
    ) == (1, 1)
    # The two matchers now differ (their helpers check different op names): no overlap.
    assert result.overlaps == ()


def test_invalid_input_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = write(tmp_path, "good.mlir", VALID_SPEC)
    bad = write(tmp_path, "bad.mlir", edit(VALID_SPEC, "-> @apply_op_config", "-> @apply_missing"))
    assert main(["spec", "link", str(good), str(bad), "-o", str(tmp_path / "out.mlir")]) == 2
    assert capsys.readouterr().err == (
        f"ireetune: error: IREE rejects the spec {bad}: {bad}:28:15: unresolved action symbol @apply_missing\n"
    )
    assert not (tmp_path / "out.mlir").exists()
