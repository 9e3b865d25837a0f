"""The help of every command: every argument explained, and docs/usage.md in step with the parser."""

from __future__ import annotations

import argparse
import sys

import pytest

from ireetune.cli import build_parser, describe_version, main
from tests.conftest import REPOSITORY

sys.path.insert(0, str(REPOSITORY / "bench"))

from write_usage_reference import (  # noqa: E402
    iter_commands,
    render_usage_reference,
    replace_generated_section,
)

USAGE = REPOSITORY / "docs" / "usage.md"
PARSER = build_parser()

# Arguments of `ireetune db` still without help; commands/db.py belongs to the database items of
# issue 11 (`--db` on every db subcommand), which rewrite these parsers.
DB_ITEMS_PENDING: set[tuple[str, str]] = set()


def _arguments() -> list[object]:
    cases: list[object] = []
    for name, _, parser in iter_commands(PARSER):
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            flag = action.option_strings[-1] if action.option_strings else action.dest
            marks = (
                [pytest.mark.xfail(strict=True, reason="issue 11 database items own db.py")]
                if (name, flag) in DB_ITEMS_PENDING
                else []
            )
            cases.append(pytest.param(name, action, id=f"{name} {flag}", marks=marks))
    return cases


@pytest.mark.parametrize(("command", "action"), _arguments())
def test_every_argument_has_help(command: str, action: argparse.Action) -> None:
    assert action.help and action.help.strip(), f"{command}: {action.dest} has no help text"


def test_usage_doc_lists_every_command_and_flag_as_the_parser_does() -> None:
    document = USAGE.read_text()
    expected = replace_generated_section(document, render_usage_reference(PARSER))
    assert document == expected, "docs/usage.md is stale: run python bench/write_usage_reference.py"


def test_help_shows_defaults_and_target_forms(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as excinfo:
        main(["tune-dispatch", "--help"])
    assert excinfo.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "candidate configurations to try (default: 32)" in text
    assert "cuda:sm_XX (e.g. cuda:sm_80), rocm:gfxNNN (e.g. rocm:gfx942) or vulkan[:NAME]" in text
    assert "this machine's Vulkan device) (default: cpu)" in text
    assert "parent of the run folder (default: ireetune_runs)" in text


def test_version_names_ireetune_and_the_iree_packages(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as excinfo:
        main(["--version"])
    assert excinfo.value.code == 0
    assert capsys.readouterr().out == describe_version() + "\n"
    assert describe_version() == (
        "ireetune 0.1.0 (iree-base-compiler 3.13.0, iree-base-runtime 3.13.0)"
    )
