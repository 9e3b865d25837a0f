"""Apply a tuning result to a model: compile it with the tuned spec and/or flags file.

`ApplyOptions` declares what `ireetune compile` and `ireetune.apply` are asked (the parser is
generated from it, so this module imports nothing heavy at module level); `apply_result`
compiles and, with a spec, proves from the compiler's configuration dump that every matcher's
configuration landed (spec/apply.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ireetune.core.arguments import positive_seconds, user_path
from ireetune.core.common_options import target_option
from ireetune.core.options import added_option, option
from ireetune.core.output_paths import add_force_argument

if TYPE_CHECKING:
    from ireetune.spec.apply import CompileReport


# Keyword-only: the required `--output` follows options with defaults, in the order of the help.
@dataclass(frozen=True, kw_only=True)
class ApplyOptions:
    """What `ireetune compile` (and `ireetune.apply`) is asked to do."""

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


@dataclass(frozen=True)
class ApplyResult:
    """What applying a result compiled: the global flags it used and, with a spec, whether
    every matcher's configuration landed (`report`); `output` is the binary written, None
    when a configuration did not land (then nothing is written)."""

    output: Path | None
    flags: tuple[str, ...]
    report: CompileReport | None

    @property
    def landed(self) -> bool:
        return self.report is None or self.report.landed


def apply_result(options: ApplyOptions) -> ApplyResult:
    """Compile `options.model` with its spec and/or flags file; check the spec landed."""
    from ireetune.core.errors import IreetuneError
    from ireetune.core.output_paths import check_new_output
    from ireetune.flags.file import read_flags_file
    from ireetune.report.progress import StageProgress
    from ireetune.spec.apply import compile_with_spec, compile_without_spec, resolve_compile_target

    if options.spec is None and options.flags_file is None:
        raise IreetuneError("compile: give --spec SPEC, --flags-file FILE or both")
    inputs = [options.model, options.spec, options.flags_file]
    check_new_output(options.output, options.force, [p for p in inputs if p is not None])
    flags = read_flags_file(options.flags_file) if options.flags_file is not None else ()
    target = resolve_compile_target(options.target, flags)
    # One step, shown to an API call's callback only (the command has no bar).
    with StageProgress(False) as progress, progress.stage("compiling", 1):
        if options.spec is None:
            compile_without_spec(options.model, target, options.output, options.compile_timeout)
            report = None
        else:
            report = compile_with_spec(
                options.model, target, options.spec, options.output, options.compile_timeout
            )
        progress.advance()
    written = report is None or report.landed
    return ApplyResult(options.output if written else None, tuple(flags), report)
