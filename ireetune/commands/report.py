"""`ireetune report RUN_DIR`: draw a run folder's self-contained HTML report."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from ireetune.commands.shared import Subparsers, add_options_parser, run_dir_option
from ireetune.core.output_paths import add_output_arguments


@dataclass(frozen=True)
class ReportOptions:
    """The run folder `ireetune report` draws (its `-o` and `--force` follow by hand)."""

    run_dir: Path = run_dir_option("a run folder (or a profiler's generated tree)")


def register(subparsers: Subparsers) -> None:
    parser = add_options_parser(
        subparsers,
        "report",
        "write the HTML report of a tune-dispatch, tune or profile run",
        None,
        ReportOptions,
    )
    # `-o/--output` has two spellings, which a declared option does not take.
    add_output_arguments(parser, "HTML file (default RUN_DIR/report.html)")
    parser.set_defaults(handler=run)


def run(arguments: argparse.Namespace) -> int:
    from ireetune.core.output_paths import check_new_output
    from ireetune.flows.handoff.folder_trust import refuse_links
    from ireetune.report.html_report import REPORT_NAME, write_html_report

    output = arguments.output
    if output is not None and output.resolve() != (arguments.run_dir / REPORT_NAME).resolve():
        # Every file of the run folder is the report's input; its own report.html is not.
        check_new_output(output, arguments.force, input_folders=[arguments.run_dir])
    else:
        # The report is written into the folder: never through a link the folder holds.
        refuse_links(arguments.run_dir)
    path = write_html_report(arguments.run_dir, output)
    sys.stdout.write(f"html report: {path}\n")
    return 0
