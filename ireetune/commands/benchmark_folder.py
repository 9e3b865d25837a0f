"""`ireetune benchmark-folder`: measure and verify a compiled run folder (runtime only).

Nothing imported here at module level, nor on the way to `benchmark_folder`, may import the IREE
compiler or z3: this command runs on a GPU host with only `iree-base-runtime` and NumPy.
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from ireetune.commands.shared import Subparsers, add_command, devices_option, run_dir_option
from ireetune.core.tools import path_argument


@dataclass(frozen=True)
class BenchmarkFolderOptions:
    """What `ireetune benchmark-folder` is asked to do."""

    run_dir: Path = run_dir_option("the run folder (it holds handoff.json and the binaries)")
    devices: tuple[str, ...] = devices_option()


def register(subparsers: Subparsers) -> None:
    add_command(
        subparsers,
        "benchmark-folder",
        "benchmark a folder of `tune-dispatch --stop-after compile` (`measure` does the same)",
        "Time and verify every candidate of a run folder written by `ireetune "
        "tune-dispatch --stop-after compile`, with only iree-base-runtime and NumPy installed. "
        "The folder holds native code: run only folders you produced.",
        BenchmarkFolderOptions,
        run,
    )


def run(options: BenchmarkFolderOptions) -> int:
    from ireetune.core.run_dir import check_run_folder
    from ireetune.flows.handoff.folder_trust import check_folder_trust

    check_run_folder(options.run_dir)
    check_folder_trust(options.run_dir, "benchmark-folder")
    return measure_dispatch_folder(options.run_dir, options.devices, "finish")


def measure_dispatch_folder(run_dir: Path, devices: tuple[str, ...], finish_verb: str) -> int:
    """Measure and verify a dispatch folder (`benchmark-folder`, or `measure` on such a folder)
    and print the results file and the compile host's next command (`finish_verb`)."""
    from ireetune.core.errors import IreetuneError
    from ireetune.flows.handoff.benchmark_folder import benchmark_folder

    try:
        path = benchmark_folder(run_dir, devices)
    except ValueError as error:
        raise IreetuneError(str(error)) from None
    pending = json.loads(path.read_text()).get("verification", {}).get("pending")
    finish_command = shlex.join(["ireetune", finish_verb, path_argument(run_dir)])
    if pending:
        sys.stdout.write(
            f"results: {path}\nnext: {finish_command}   (compiles the "
            f"leaders' reference programs), then this command again to check their outputs\n"
        )
        return 0
    sys.stdout.write(f"results: {path}\nnext: {finish_command}\n")
    return 0
