"""`ireetune report RUN_DIR`: draw a run folder's self-contained HTML report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "report", help="write the HTML report of a tune-dispatch, tune, finish or profile run"
    )
    parser.add_argument("run_dir", type=Path, help="a run folder (or a profiler's generated tree)")
    parser.add_argument(
        "-o", "--output", type=Path, default=None, help="HTML file (default RUN_DIR/report.html)"
    )
    parser.set_defaults(handler=run)


def run(arguments: argparse.Namespace) -> int:
    from ireetune.report.html_report import write_html_report

    path = write_html_report(arguments.run_dir, arguments.output)
    sys.stdout.write(f"html report: {path}\n")
    return 0
