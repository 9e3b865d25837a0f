"""`ireetune device-step RUN`: the runtime-only half of a split model run.

Nothing imported here at module level, nor on the way to `run_device_step`, may import the IREE
compiler or z3: this command runs on a GPU host with only `iree-base-runtime` and NumPy.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from ireetune.commands.shared import add_devices_argument, add_run_folder_command


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_run_folder_command(
        subparsers,
        "device-step",
        "run what a split model run needs from the device (needs only the runtime)",
        "Run the device half of a split model run (`ireetune tune MODEL --stop-after "
        "compile`): profile the model and its dispatches, measure the dispatch folders, time the "
        "model variants, whatever device_step.json lists. Needs only iree-base-runtime and NumPy. "
        "The folder holds native code: run only folders you produced.",
        "the model run folder (holds device_step.json)",
    )
    add_devices_argument(parser, "; the model is timed on the first, dispatch candidates on all")
    parser.set_defaults(handler=run)


def run(arguments: argparse.Namespace) -> int:
    from ireetune.handoff.device_step import run_device_step
    from ireetune.run_dir import check_run_folder

    check_run_folder(arguments.run_dir)
    path = run_device_step(arguments.run_dir, list(arguments.devices))
    next_command = shlex.join(["ireetune", "continue", str(arguments.run_dir)])
    sys.stdout.write(f"results: {path}\nnext: {next_command}\n")
    return 0
