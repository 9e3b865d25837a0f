"""`ireetune compile`: compile a model with a spec and/or tuned flags; prove the spec landed."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path

from ireetune.commands.shared import Subparsers, add_command
from ireetune.core.arguments import positive_seconds, user_path
from ireetune.core.common_options import target_option
from ireetune.core.options import added_option, option
from ireetune.core.output_paths import add_force_argument


# Keyword-only: the required `--output` follows options with defaults, in the order of the help.
@dataclass(frozen=True, kw_only=True)
class CompileOptions:
    """What `ireetune compile` is asked to do."""

    model: Path = option(flag="model", type=user_path, help="the model .mlir to compile")
    target: str = target_option(dataclasses.MISSING)
    spec: Path | None = option(
        None, flag="--spec", type=user_path, help="a tuning spec (tuned_spec.mlir)"
    )
    flags_file: Path | None = option(
        None, flag="--flags-file", type=user_path,
        help="global iree-compile flags, one per line (tuned_flags.txt of `ireetune tune`)",
    )  # fmt: skip
    output: Path = option(flag=("-o", "--output"), type=user_path, help="the .vmfb to write")
    force: bool = added_option(False, add_force_argument)
    compile_timeout: float = option(
        600.0, flag="--compile-timeout", type=positive_seconds, help="seconds for the compile"
    )


def register(subparsers: Subparsers) -> None:
    add_command(
        subparsers,
        "compile",
        "compile a model with a spec and/or a tuned flags file; fail if the spec's "
        "configurations did not land",
        "Compile a model with a tuning spec and/or the global flags of a tuned flags "
        "file, and prove, from the compiler's own configuration dump, that every matcher's "
        "configuration landed; exit 1 if not.",
        CompileOptions,
        run,
    )


def run(options: CompileOptions) -> int:
    from ireetune.core.errors import IreetuneError
    from ireetune.core.output_paths import check_new_output
    from ireetune.flags.file import read_flags_file
    from ireetune.spec.apply import (
        compile_with_spec,
        compile_without_spec,
        render_compile_report,
        resolve_compile_target,
    )

    if options.spec is None and options.flags_file is None:
        raise IreetuneError("compile: give --spec SPEC, --flags-file FILE or both")
    inputs = [options.model, options.spec, options.flags_file]
    check_new_output(options.output, options.force, [p for p in inputs if p is not None])
    flags = read_flags_file(options.flags_file) if options.flags_file is not None else ()
    target = resolve_compile_target(options.target, flags)
    if options.spec is None:
        compile_without_spec(options.model, target, options.output, options.compile_timeout)
        sys.stdout.write(f"compiled with {len(flags)} global flag(s); wrote {options.output}\n")
        return 0
    report = compile_with_spec(
        options.model, target, options.spec, options.output, options.compile_timeout
    )
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
