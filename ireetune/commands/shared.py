"""What several subcommands share: a command over a run folder, the device list, the tuning
commands' options and the line naming the HTML report.

Nothing imported here at module level may import the IREE compiler or z3: the runtime-only
commands (`benchmark-folder`, `device-step`) use this module.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from ireetune.core.arguments import device_list, parse_executor
from ireetune.core.options import options_from_arguments

if TYPE_CHECKING:
    from ireetune.dispatch_options import TuneOptions
    from ireetune.model_options import ModelTuneOptions

TuningOptions = TypeVar("TuningOptions", "TuneOptions", "ModelTuneOptions")


def add_run_folder_command(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    summary: str,
    description: str | None,
    folder_help: str,
) -> argparse.ArgumentParser:
    """Add a subcommand whose first argument is a run folder (`run_dir`)."""
    parser = subparsers.add_parser(name, help=summary, description=description)
    parser.add_argument("run_dir", type=Path, help=folder_help)
    return parser


def add_devices_argument(parser: argparse.ArgumentParser, more_help: str = "") -> None:
    """Add `--devices`, the runtime devices a runtime-only command measures on."""
    parser.add_argument(
        "--devices",
        type=device_list,
        default="",
        help="comma-separated runtime devices, e.g. cuda://0,cuda://1 (default: the manifest's)"
        + more_help,
    )


def read_tuning_options(
    options_class: type[TuningOptions], arguments: argparse.Namespace
) -> TuningOptions:
    """Build a tuning command's options, with its executor, and check its output folder and
    database before any work."""
    from ireetune.run_dir import check_database_path, check_output_dir

    executor, ray = parse_executor(arguments)
    options = options_from_arguments(options_class, arguments, executor=executor, ray=ray)
    check_output_dir(options.output_dir)
    if options.use_database:
        check_database_path(options.database_path)
    return options


def announce_html_report(run_dir: Path) -> None:
    """Write a run folder's HTML report and name it on stdout (nothing when it cannot be drawn)."""
    from ireetune.report.html_report import try_write_html_report

    report_path = try_write_html_report(run_dir)
    if report_path is not None:
        sys.stdout.write(f"html report: {report_path}\n")
