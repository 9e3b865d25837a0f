"""`ireetune spec check`: each anatomy rule broken once, found by the layer that enforces it."""

# ruff: noqa: E501  (MLIR text and expected output lines are data, kept verbatim)

from __future__ import annotations

from pathlib import Path

import pytest

from ireetune.cli import main
from ireetune.spec.apply import resolve_compile_target
from ireetune.spec.check import ViolationSource, check_spec
from tests.spec_support import VALID_SPEC, edit, write

ENTRY = "@__kernel_config(%variant: !transform.any_op {transform.consumed}) -> !transform.any_op\n"
ENTRY_ATTRS = "\n      attributes {iree_codegen.tuning_spec_entrypoint} {"
VERIFIER, ANATOMY, LOAD = ViolationSource.VERIFIER, ViolationSource.ANATOMY, ViolationSource.LOAD
MISSING_WITH_NAMED_SEQUENCE = (
    "expects the parent symbol table to have the 'transform.with_named_sequence' attribute"
)
DEFAULT_ENTRY = "(required by 'iree_codegen.tuning_spec_with_default_entrypoint')"

# (name, edits to VALID_SPEC, expected violations as (line, column, message, layer)).
BROKEN_SPECS = [
    (
        "module without transform.with_named_sequence",
        [("attributes {transform.with_named_sequence, iree_codegen", "attributes {iree_codegen")],
        [
            (3, 3, MISSING_WITH_NAMED_SEQUENCE, VERIFIER),
            (8, 3, MISSING_WITH_NAMED_SEQUENCE, VERIFIER),
            (26, 3, MISSING_WITH_NAMED_SEQUENCE, VERIFIER),
        ],
    ),
    (
        "__kernel_config not marked as entry point",
        [(ENTRY_ATTRS, " {")],
        [
            (
                26,
                3,
                "Missing attribute 'iree_codegen.tuning_spec_entrypoint' in named sequence "
                f"'__kernel_config' {DEFAULT_ENTRY}",
                VERIFIER,
            )
        ],
    ),
    (
        "entry point with two arguments",
        [
            (
                "{transform.consumed}) -> !transform.any_op\n",
                "{transform.consumed}, %extra: !transform.any_op {transform.readonly})"
                " -> !transform.any_op\n",
            )
        ],
        [
            (
                26,
                3,
                "Must take one 'any_op' (required by 'iree_codegen.tuning_spec_entrypoint')",
                VERIFIER,
            )
        ],
    ),
    (
        "entry point without a result",
        [("{transform.consumed}) -> !transform.any_op\n", "{transform.consumed})\n")],
        [
            (
                26,
                3,
                "Must return one 'any_op' (required by 'iree_codegen.tuning_spec_entrypoint')",
                VERIFIER,
            )
        ],
    ),
    (
        "entry point argument marked readonly but consumed",
        [
            (
                "%variant: !transform.any_op {transform.consumed}",
                "%variant: !transform.any_op {transform.readonly}",
            )
        ],
        [(26, 3, "argument #0 is consumed in the body but is not marked as such", VERIFIER)],
    ),
    (
        "tuning_spec_with_default_entrypoint without __kernel_config",
        [("@__kernel_config(", "@my_entry(")],
        [(2, 1, f"Missing named sequence '__kernel_config' {DEFAULT_ENTRY}", VERIFIER)],
    ),
    (
        "foreach_match names a missing matcher",
        [("@match_matmul_64x128x96 -> @apply_op_config", "@match_missing -> @apply_op_config")],
        [(28, 15, "unresolved matcher symbol @match_missing", VERIFIER)],
    ),
    (
        "foreach_match names a missing action",
        [
            (
                "@match_matmul_64x128x96 -> @apply_op_config",
                "@match_matmul_64x128x96 -> @apply_missing",
            )
        ],
        [(28, 15, "unresolved action symbol @apply_missing", VERIFIER)],
    ),
    (
        "matcher consumes its operand",
        [
            (
                "@match_matmul_64x128x96(%root: !transform.any_op {transform.readonly})",
                "@match_matmul_64x128x96(%root: !transform.any_op {transform.consumed})",
            )
        ],
        [
            (
                28,
                15,
                "'transform.foreach_match' op does not expect matcher symbol to consume its operand #0",
                VERIFIER,
            )
        ],
    ),
    (
        "action takes more values than the matcher yields",
        [
            (
                "%config: !transform.any_param {transform.readonly}) {",
                "%config: !transform.any_param {transform.readonly},"
                " %extra: !transform.any_param {transform.readonly}) {",
            )
        ],
        [
            (
                28,
                15,
                "mismatching number of matcher results and action arguments between "
                "@match_matmul_64x128x96 (2) and @apply_op_config (3)",
                VERIFIER,
            )
        ],
    ),
    (
        "entry point argument neither readonly nor consumed",
        [("%variant: !transform.any_op {transform.consumed}", "%variant: !transform.any_op")],
        [
            (
                26,
                3,
                "Entry point @__kernel_config must mark its argument {transform.readonly} or "
                "{transform.consumed}; it has neither.",
                ANATOMY,
            )
        ],
    ),
    (
        "no entry point at all",
        [(", iree_codegen.tuning_spec_with_default_entrypoint", ""), (ENTRY_ATTRS, " {")],
        [
            (
                2,
                1,
                "The spec has no entry point: no transform.named_sequence carries "
                "'iree_codegen.tuning_spec_entrypoint'.",
                ANATOMY,
            )
        ],
    ),
]


def _violations(path: Path) -> list[tuple[int, int, str, ViolationSource]]:
    """List violations as (line, column, message, layer); line and column 0 when unlocated."""
    report = check_spec(path, resolve_compile_target("cpu"))
    found = []
    for v in report.violations:
        assert v.location is None or v.location.file == str(path)
        line, column = (v.location.line, v.location.column) if v.location else (0, 0)
        found.append((line, column, v.message, v.source))
    return found


def test_valid_spec_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec_path = write(tmp_path, "valid.mlir", VALID_SPEC)
    status = main(["spec", "check", str(spec_path)])
    assert (status, capsys.readouterr().out) == (
        0,
        f"PASS {spec_path}: entry points @__kernel_config\n",
    )


@pytest.mark.parametrize(
    ("name", "edits", "expected"), BROKEN_SPECS, ids=[b[0] for b in BROKEN_SPECS]
)
def test_each_broken_rule_is_reported_where_it_is(
    tmp_path: Path,
    name: str,
    edits: list[tuple[str, str]],
    expected: list[tuple[int, int, str, ViolationSource]],
) -> None:
    text = VALID_SPEC
    for old, new in edits:
        text = edit(text, old, new)
    assert _violations(write(tmp_path, "broken.mlir", text)) == expected


def test_cli_prints_each_violation_with_location_and_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec_path = write(
        tmp_path, "broken.mlir", edit(VALID_SPEC, "-> @apply_op_config", "-> @apply_missing")
    )
    status = main(["spec", "check", str(spec_path)])
    expected = (
        f"{spec_path}:28:15: unresolved action symbol @apply_missing [iree-verifier]\n"
        f"FAIL {spec_path}: 1 violation\n"
    )
    assert (status, capsys.readouterr().out) == (1, expected)


def test_unreadable_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["spec", "check", str(tmp_path / "missing.mlir")])
    assert (status, capsys.readouterr().err) == (
        2,
        f"ireetune: error: spec not found: {tmp_path / 'missing.mlir'}\n",
    )


def test_empty_module_lacks_attribute_and_entry_point(tmp_path: Path) -> None:
    assert _violations(write(tmp_path, "empty.mlir", "module {\n}\n")) == [
        (1, 1, "The spec module lacks the 'transform.with_named_sequence' attribute.", ANATOMY),
        (
            1,
            1,
            "The spec has no entry point: no transform.named_sequence carries "
            "'iree_codegen.tuning_spec_entrypoint'.",
            ANATOMY,
        ),
        (
            1,
            1,
            "Module without the 'transform.with_named_sequence' attribute is not a transform "
            "dialect library",
            LOAD,
        ),
    ]


def test_entry_points_that_disagree_on_consuming(tmp_path: Path) -> None:
    second_entry = """
  transform.named_sequence @second_entry(%op: !transform.any_op {transform.readonly}) -> !transform.any_op
      attributes {iree_codegen.tuning_spec_entrypoint} {
    transform.yield %op : !transform.any_op
  }
}
"""
    # Without the default-entry-point attribute, IREE's verifier allows several entry points.
    text = edit(VALID_SPEC, ", iree_codegen.tuning_spec_with_default_entrypoint", "")
    text = text.rstrip().removesuffix("}") + second_entry
    assert _violations(write(tmp_path, "two_entries.mlir", text)) == [
        (
            2,
            1,
            "Entry points disagree: @__kernel_config consume their argument but @second_entry only "
            "read it; linking needs them all one way.",
            ANATOMY,
        ),
        (0, 0, "Applying the spec to a 3x7x5 f32 matmul fails: Failed to link tuning specs", LOAD),
    ]


def test_unnamed_nested_module_is_reported(tmp_path: Path) -> None:
    inner = edit(VALID_SPEC, "module @valid_spec attributes", "module attributes")
    text = "module attributes {transform.with_named_sequence} {\n" + inner + "}\n"
    assert _violations(write(tmp_path, "nested.mlir", text)) == [
        (
            3,
            1,
            "This nested module holds entry points but has no name, so linking skips it; "
            "name it ('module @name attributes {...}').",
            ANATOMY,
        )
    ]


def test_spec_the_compiler_refuses_to_apply_fails_the_load_layer(tmp_path: Path) -> None:
    # Matches every linalg.matmul, including the load check's own, with a config of wrong rank.
    text = edit(
        VALID_SPEC,
        VALID_SPEC[VALID_SPEC.index("    %batch, %m") : VALID_SPEC.index("    %config =")],
        '    transform.match.operation_name %root ["linalg.matmul"] : !transform.any_op\n',
    )
    text = edit(text, "distribution = [32, 64, 0]", "distribution = [32, 64, 0, 7, 9]")
    report = check_spec(write(tmp_path, "bad_config.mlir", text), resolve_compile_target("cpu"))
    assert [(v.location, v.source) for v in report.violations] == [(None, LOAD)]
    assert report.violations[0].message.startswith(
        "Applying the spec to a 3x7x5 f32 matmul fails: 'linalg.matmul' op expected only parallel dims"
    )
