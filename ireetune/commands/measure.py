"""`ireetune measure FOLDER`: on the device host, measure whatever a folder asks for (runtime
only).

A dispatch folder (`tune-dispatch --stop-after compile`) is measured and verified as
`benchmark-folder` does; a split model run (`tune --stop-after compile`) runs its device step as
`device-step` does (flows/continue_folder.py tells them apart). Nothing imported here at module
level, nor on the way to either, may import the IREE compiler or z3: this command runs on a
host with only `iree-base-runtime` and NumPy.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ireetune.commands.shared import Subparsers, add_command, devices_option, run_dir_option


@dataclass(frozen=True)
class MeasureOptions:
    """What `ireetune measure` is asked to do."""

    run_dir: Path = run_dir_option(
        "the folder to measure (holds handoff.json, or device_step.json for a split model run)"
    )
    devices: tuple[str, ...] = devices_option(
        "; a model is timed on the first, dispatch candidates on all"
    )


def register(subparsers: Subparsers) -> None:
    add_command(
        subparsers,
        "measure",
        "measure whatever a folder asks of the device host (needs only the runtime)",
        "Run the device host's half of a run split across two hosts, with only "
        "iree-base-runtime and NumPy installed: time and verify every candidate of a folder "
        "written by `ireetune tune-dispatch --stop-after compile` (as `ireetune "
        "benchmark-folder`), or run a split model run's device step, whatever its "
        "device_step.json lists (as `ireetune device-step`). Then `ireetune continue` on the "
        "compile host. The folder holds native code: run only folders you produced.",
        MeasureOptions,
        run,
    )


def run(options: MeasureOptions) -> int:
    from ireetune.commands.benchmark_folder import measure_dispatch_folder
    from ireetune.commands.device_step import measure_model_folder
    from ireetune.core.run_dir import check_run_folder
    from ireetune.flows.continue_folder import FolderKind, read_device_kind
    from ireetune.flows.handoff.folder_trust import check_folder_trust

    check_run_folder(options.run_dir)
    if read_device_kind(options.run_dir) is FolderKind.SPLIT_MODEL_RUN:
        check_folder_trust(options.run_dir, "device-step")
        return measure_model_folder(options.run_dir, options.devices)
    check_folder_trust(options.run_dir, "benchmark-folder")
    return measure_dispatch_folder(options.run_dir, options.devices, "continue")
