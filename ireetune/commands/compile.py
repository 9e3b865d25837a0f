"""`ireetune compile`: compile a model with a spec and/or tuned flags; prove the spec landed."""

from __future__ import annotations

import sys

from ireetune.commands.shared import Subparsers, add_command
from ireetune.flows.apply import ApplyOptions


def register(subparsers: Subparsers) -> None:
    add_command(
        subparsers,
        "compile",
        "compile a model with a spec and/or a tuned flags file; fail if the spec's "
        "configurations did not land",
        "Compile a model with a tuning spec and/or the global flags of a tuned flags "
        "file, and prove, from the compiler's own configuration dump, that every matcher's "
        "configuration landed; exit 1 if not.",
        ApplyOptions,
        run,
    )


def run(options: ApplyOptions) -> int:
    from ireetune.flows.apply import apply_result
    from ireetune.spec.apply import render_compile_report

    result = apply_result(options)
    report = result.report
    if report is None:
        sys.stdout.write(
            f"compiled with {len(result.flags)} global flag(s); wrote {options.output}\n"
        )
        return 0
    sys.stdout.write(render_compile_report(report))
    if report.landed:
        return 0
    if not report.checks:
        reason = "no matcher of the spec configures any dispatch of the model"
    else:
        missing = sum(1 for check in report.checks if not check.landed)
        reason = f"{missing} of {len(report.checks)} configurations did not land"
    sys.stderr.write(f"ireetune: error: {reason}; {options.output} was not written\n")
    return 1
