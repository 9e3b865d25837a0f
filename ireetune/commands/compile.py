"""`ireetune compile`: compile a model with a spec and prove its configurations landed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ireetune.commands.arguments import TARGET_HELP, positive_seconds


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "compile",
        help="compile a model with a spec; fail if its configurations did not land",
        description="Compile a model with a tuning spec and prove, from the compiler's own "
        "configuration dump, that every matcher's configuration landed; exit 1 if not.",
    )
    parser.add_argument("model", type=Path, help="the model .mlir to compile")
    parser.add_argument("--target", required=True, help=f"what to compile for: {TARGET_HELP}")
    parser.add_argument(
        "--spec", type=Path, required=True, help="the tuning spec (.mlir) to compile with"
    )
    parser.add_argument("-o", "--output", type=Path, required=True, help="the .vmfb to write")
    parser.add_argument(
        "--compile-timeout", type=positive_seconds, default=600.0, help="seconds for the compile"
    )
    parser.set_defaults(handler=run)


def run(arguments: argparse.Namespace) -> int:
    from ireetune.run_dir import check_output_file
    from ireetune.spec.apply import compile_with_spec, render_compile_report, resolve_compile_target

    check_output_file(arguments.output)

    report = compile_with_spec(
        arguments.model,
        resolve_compile_target(arguments.target),
        arguments.spec,
        arguments.output,
        arguments.compile_timeout,
    )
    sys.stdout.write(render_compile_report(report))
    if report.landed:
        return 0
    if not report.checks:
        reason = "no matcher of the spec configures any dispatch of the model"
    else:
        missing = sum(1 for check in report.checks if not check.landed)
        reason = f"{missing} of {len(report.checks)} configurations did not land"
    sys.stderr.write(f"ireetune: error: {reason}; {arguments.output} was not written\n")
    return 1
