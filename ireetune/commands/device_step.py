"""`ireetune device-step RUN`: the runtime-only half of a split model run.

Nothing imported here at module level, nor on the way to `run_device_step`, may import the IREE
compiler or z3: this command runs on a GPU host with only `iree-base-runtime` and NumPy.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from ireetune.commands.shared import Subparsers, add_command, devices_option, run_dir_option
from ireetune.core.tools import path_argument


@dataclass(frozen=True)
class DeviceStepOptions:
    """What `ireetune device-step` is asked to do."""

    run_dir: Path = run_dir_option("the model run folder (holds device_step.json)")
    devices: tuple[str, ...] = devices_option(
        "; the model is timed on the first, dispatch candidates on all"
    )


def register(subparsers: Subparsers) -> None:
    add_command(
        subparsers,
        "device-step",
        "run what a split model run needs from the device (`measure` does the same)",
        "Run the device half of a split model run (`ireetune tune MODEL --stop-after "
        "compile`): profile the model and its dispatches, measure the dispatch folders, time the "
        "model variants, whatever device_step.json lists. Needs only iree-base-runtime and NumPy. "
        "The folder holds native code: run only folders you produced.",
        DeviceStepOptions,
        run,
    )


def run(options: DeviceStepOptions) -> int:
    from ireetune.core.run_dir import check_run_folder
    from ireetune.flows.handoff.folder_trust import check_folder_trust

    check_run_folder(options.run_dir)
    check_folder_trust(options.run_dir, "device-step")
    return measure_model_folder(options.run_dir, options.devices)


def measure_model_folder(run_dir: Path, devices: tuple[str, ...]) -> int:
    """Run a split model run's device step (`device-step`, or `measure` on such a folder) and
    print the results file and the compile host's next command."""
    from ireetune.flows.handoff.device_step import run_device_step

    path = run_device_step(run_dir, list(devices))
    next_command = shlex.join(["ireetune", "continue", path_argument(run_dir)])
    sys.stdout.write(f"results: {path}\nnext: {next_command}\n")
    return 0
