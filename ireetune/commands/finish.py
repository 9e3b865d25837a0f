"""`ireetune finish`: read a benchmarked folder back, pick the verified winner, write its spec."""

from __future__ import annotations

import argparse
import shlex
import sys

from ireetune.commands.shared import add_run_folder_command, announce_html_report


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_run_folder_command(
        subparsers,
        "finish",
        "pick the winner of a benchmarked folder and write its spec",
        "Read the results `ireetune benchmark-folder` wrote into a run folder, pick "
        "the fastest verified candidate, prove its configuration lands and write best_spec.mlir.",
        "the run folder measured by `ireetune benchmark-folder` (holds benchmark_results.json)",
    )
    parser.set_defaults(handler=run)


def run(arguments: argparse.Namespace) -> int:
    from ireetune.handoff.continue_run import ContinueAt, continue_run
    from ireetune.run_dir import check_run_folder

    check_run_folder(arguments.run_dir)
    continued = continue_run(arguments.run_dir, ContinueAt.REFERENCES)
    if continued.references:
        # The folder deferred its reference programs: the leaders' are compiled now.
        sys.stdout.write(
            f"compiled the reference programs of candidates {', '.join(map(str, continued.references))}; "
            f"check their outputs where the device is, then finish:\n"
            f"  {shlex.join(['ireetune', 'benchmark-folder', str(arguments.run_dir)])}\n"
            f"  {shlex.join(['ireetune', 'finish', str(arguments.run_dir)])}\n"
        )
        return 0
    result = continued.result
    assert result is not None
    sys.stdout.write(result.summary)
    if result.best_spec_path is not None:
        sys.stdout.write(f"best spec: {result.best_spec_path}\n")
    announce_html_report(result.run_dir)
    return 0
