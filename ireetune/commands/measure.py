"""`ireetune measure FOLDER`: on the device host, measure whatever a folder asks for (runtime
only).

A dispatch folder (`tune-dispatch --stop-after compile`) is measured and verified; a split model
run (`tune --stop-after compile`) runs its device step (flows/continue_folder.py tells them
apart). `benchmark-folder` and `device-step`, the names the two steps had, are kept as aliases
for old scripts, each for its kind of folder; what they print teaches `measure` and `continue`.
Nothing imported here at module level, nor on the way to either, may import the IREE compiler or
z3: these commands run on a host with only `iree-base-runtime` and NumPy.
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
class MeasureOptions:
    """What `ireetune measure` is asked to do."""

    run_dir: Path = run_dir_option(
        "the folder to measure (holds handoff.json, or device_step.json for a split model run)"
    )
    devices: tuple[str, ...] = devices_option(
        "; a model is timed on the first, dispatch candidates on all"
    )


@dataclass(frozen=True)
class BenchmarkFolderOptions:
    """What `ireetune benchmark-folder` is asked to do."""

    run_dir: Path = run_dir_option("the run folder (it holds handoff.json and the binaries)")
    devices: tuple[str, ...] = devices_option()


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
        "measure",
        "measure whatever a folder asks of the device host (needs only the runtime)",
        "Run the device host's half of a run split across two hosts, with only "
        "iree-base-runtime and NumPy installed: time and verify every candidate of a folder "
        "written by `ireetune tune-dispatch --stop-after compile`, or run a split model run's "
        "device step, whatever its device_step.json lists. Then `ireetune continue` on the "
        "compile host. The folder holds native code: run only folders you produced.",
        MeasureOptions,
        run,
    )
    # The names the two kinds of device step had, kept for old scripts.
    add_command(
        subparsers,
        "benchmark-folder",
        "old name of `measure` for a dispatch folder, kept for old scripts",
        "Time and verify every candidate of a run folder written by `ireetune "
        "tune-dispatch --stop-after compile`, with only iree-base-runtime and NumPy installed. "
        "The folder holds native code: run only folders you produced.",
        BenchmarkFolderOptions,
        run_as_benchmark_folder,
    )
    add_command(
        subparsers,
        "device-step",
        "old name of `measure` for a split model run, kept for old scripts",
        "Run the device half of a split model run (`ireetune tune MODEL --stop-after "
        "compile`): profile the model and its dispatches, measure the dispatch folders, time the "
        "model variants, whatever device_step.json lists. Needs only iree-base-runtime and NumPy. "
        "The folder holds native code: run only folders you produced.",
        DeviceStepOptions,
        run_as_device_step,
    )


def run(options: MeasureOptions) -> int:
    from ireetune.core.run_dir import check_run_folder
    from ireetune.flows.continue_folder import FolderKind, read_device_kind

    check_run_folder(options.run_dir)
    if read_device_kind(options.run_dir) is FolderKind.SPLIT_MODEL_RUN:
        return measure_model_folder(options.run_dir, options.devices)
    return measure_dispatch_folder(options.run_dir, options.devices)


def run_as_benchmark_folder(options: BenchmarkFolderOptions) -> int:
    return measure_dispatch_folder(options.run_dir, options.devices)


def measure_dispatch_folder(run_dir: Path, devices: tuple[str, ...]) -> int:
    """Measure and verify a dispatch folder (`measure` on such a folder, or `benchmark-folder`)
    and print the results file and the compile host's next command."""
    from ireetune.core.errors import IreetuneError
    from ireetune.core.run_dir import check_run_folder
    from ireetune.flows.handoff.benchmark_folder import benchmark_folder
    from ireetune.flows.handoff.folder_trust import check_folder_trust

    check_run_folder(run_dir)
    check_folder_trust(run_dir, "benchmark-folder")
    try:
        path = benchmark_folder(run_dir, devices)
    except ValueError as error:
        raise IreetuneError(str(error)) from None
    pending = json.loads(path.read_text()).get("verification", {}).get("pending")
    finish_command = shlex.join(["ireetune", "continue", path_argument(run_dir)])
    if pending:
        sys.stdout.write(
            f"results: {path}\nnext: {finish_command}   (compiles the "
            f"leaders' reference programs), then this command again to check their outputs\n"
        )
        return 0
    sys.stdout.write(f"results: {path}\nnext: {finish_command}\n")
    return 0


def run_as_device_step(options: DeviceStepOptions) -> int:
    return measure_model_folder(options.run_dir, options.devices)


def measure_model_folder(run_dir: Path, devices: tuple[str, ...]) -> int:
    """Run a split model run's device step (`measure` on such a folder, or `device-step`) and
    print the results file and the compile host's next command."""
    from ireetune.core.run_dir import check_run_folder
    from ireetune.flows.handoff.device_step import run_device_step
    from ireetune.flows.handoff.folder_trust import check_folder_trust

    check_run_folder(run_dir)
    check_folder_trust(run_dir, "device-step")
    path = run_device_step(run_dir, list(devices))
    next_command = shlex.join(["ireetune", "continue", path_argument(run_dir)])
    sys.stdout.write(f"results: {path}\nnext: {next_command}\n")
    return 0
