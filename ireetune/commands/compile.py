"""`ireetune compile`: compile a model with a spec and/or tuned flags; prove the spec landed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ireetune.core.arguments import TARGET_HELP, positive_seconds
from ireetune.output_paths import add_force_argument


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "compile",
        help="compile a model with a spec and/or a tuned flags file; fail if the spec's "
        "configurations did not land",
        description="Compile a model with a tuning spec and/or the global flags of a tuned flags "
        "file, and prove, from the compiler's own configuration dump, that every matcher's "
        "configuration landed; exit 1 if not.",
    )
    parser.add_argument("model", type=Path, help="the model .mlir to compile")
    parser.add_argument("--target", required=True, help=f"what to compile for: {TARGET_HELP}")
    parser.add_argument("--spec", type=Path, default=None, help="a tuning spec (tuned_spec.mlir)")
    parser.add_argument(
        "--flags-file", type=Path, default=None,
        help="global iree-compile flags, one per line (tuned_flags.txt of `ireetune tune`)",
    )  # fmt: skip
    parser.add_argument("-o", "--output", type=Path, required=True, help="the .vmfb to write")
    add_force_argument(parser)
    parser.add_argument(
        "--compile-timeout", type=positive_seconds, default=600.0, help="seconds for the compile"
    )
    parser.set_defaults(handler=run)


def run(arguments: argparse.Namespace) -> int:
    from ireetune.errors import IreetuneError
    from ireetune.flags.file import read_flags_file
    from ireetune.output_paths import check_new_output
    from ireetune.spec.apply import (
        compile_with_spec,
        compile_without_spec,
        render_compile_report,
        resolve_compile_target,
    )

    if arguments.spec is None and arguments.flags_file is None:
        raise IreetuneError("compile: give --spec SPEC, --flags-file FILE or both")
    inputs = [arguments.model, arguments.spec, arguments.flags_file]
    check_new_output(arguments.output, arguments.force, [p for p in inputs if p is not None])
    flags = read_flags_file(arguments.flags_file) if arguments.flags_file is not None else ()
    target = resolve_compile_target(arguments.target, flags)
    if arguments.spec is None:
        compile_without_spec(arguments.model, target, arguments.output, arguments.compile_timeout)
        sys.stdout.write(f"compiled with {len(flags)} global flag(s); wrote {arguments.output}\n")
        return 0
    report = compile_with_spec(
        arguments.model, target, arguments.spec, arguments.output, arguments.compile_timeout
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
