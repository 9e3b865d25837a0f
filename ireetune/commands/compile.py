"""`ireetune compile`: compile a model with a spec and prove its configurations landed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "compile", help="compile a model with a spec; fail if its configurations did not land"
    )
    parser.add_argument("model", type=Path)
    parser.add_argument("--target", required=True, help="cpu | cuda:sm_80 | rocm:gfx942")
    parser.add_argument("--spec", type=Path, required=True)
    parser.add_argument("-o", "--output", type=Path, required=True, help="the .vmfb to write")
    parser.add_argument("--compile-timeout", type=float, default=600.0)
    parser.set_defaults(handler=run)


def run(arguments: argparse.Namespace) -> int:
    from ireetune.spec.apply import compile_with_spec, render_compile_report, resolve_compile_target

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
