"""`ireetune continue RUN`: the compile host's next step of a split model run."""

from __future__ import annotations

import argparse
import sys

from ireetune.commands.shared import add_run_folder_command
from ireetune.core.arguments import positive_int


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_run_folder_command(
        subparsers,
        "continue",
        "do what is due next in a split model run (after a device step)",
        "Continue a split model run (`ireetune tune MODEL --stop-after compile`) on "
        "the compile host: read the device step's results and do what is due next (compile the "
        "candidates of dispatches found hot, build and compile model variants, or decide and "
        "write the tuned spec and the report). Also resumes a compile phase that was stopped.",
        "the model run folder (holds split.json)",
    )
    parser.add_argument(
        "--jobs", type=positive_int, default=None, help="parallel compiles (default: the run's)"
    )
    parser.set_defaults(handler=run)


def run(arguments: argparse.Namespace) -> int:
    from ireetune.model_tuner import continue_split_run, describe_status
    from ireetune.run_dir import check_run_folder

    check_run_folder(arguments.run_dir)
    sys.stdout.write(describe_status(continue_split_run(arguments.run_dir, arguments.jobs)))
    return 0
