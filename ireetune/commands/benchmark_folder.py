"""`ireetune benchmark-folder`: measure and verify a compiled run folder (runtime only)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "benchmark-folder",
        help="benchmark a folder written by `tune-dispatch --stop-after compile` (needs only the runtime)",
    )
    parser.add_argument("run_dir", type=Path)
    parser.add_argument(
        "--devices", default="", help="comma-separated runtime devices (default: the manifest's)"
    )
    parser.set_defaults(handler=run)


def run(arguments: argparse.Namespace) -> int:
    from ireetune.benchmark.folder import benchmark_folder
    from ireetune.errors import IreetuneError

    try:
        path = benchmark_folder(arguments.run_dir, [d for d in arguments.devices.split(",") if d])
    except ValueError as error:
        raise IreetuneError(str(error)) from None
    sys.stdout.write(f"results: {path}\nnext: ireetune finish {arguments.run_dir}\n")
    return 0
