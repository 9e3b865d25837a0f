"""`ireetune tune-dispatch`: tune one dispatch and write its spec."""

from __future__ import annotations

import argparse
import shlex
import sys

from ireetune.commands.shared import Subparsers, add_tuning_command, announce_html_report
from ireetune.core.tools import path_argument
from ireetune.flows.dispatch.options import References, StopAfter, TuneOptions


def register(subparsers: Subparsers) -> None:
    add_tuning_command(
        subparsers,
        "tune-dispatch",
        "tune one dispatch and write its spec",
        "Tune one dispatch: compile candidate configurations, time them against "
        "the default, verify the fastest and write the winner's tuning spec.",
        TuneOptions,
        run,
    )


def run(options: TuneOptions, arguments: argparse.Namespace) -> int:
    from ireetune.flows.dispatch.tuner import tune_dispatch

    result = tune_dispatch(options)
    if options.stop_after is StopAfter.COMPILE:
        sys.stdout.write(
            f"compiled {result.problem.signature} into {result.run_dir} "
            f"(compile success {result.compile_success_rate:.0%}); next:\n"
            f"  {shlex.join(['ireetune', 'measure', path_argument(result.run_dir)])}"
            "   (or python -m ireetune.cli measure)\n"
            f"  {shlex.join(['ireetune', 'continue', path_argument(result.run_dir)])}\n"
            + (
                "  then, for the leaders' output checks: measure and continue once more\n"
                if options.references is References.LEADERS
                else ""
            )
        )
        for note in result.notes[:-1]:
            sys.stdout.write(f"note: {note}\n")
        return 0
    sys.stdout.write(result.summary)
    sys.stdout.write(f"run folder: {result.run_dir}\n")
    if result.best_spec_path is not None:
        sys.stdout.write(f"best spec: {result.best_spec_path}\n")
    flags_file = result.run_dir / "tuned_flags.txt"
    if flags_file.exists():
        sys.stdout.write(f"global flags (iree-compile @FILE): {flags_file}\n")
    announce_html_report(result.run_dir)
    return 0
