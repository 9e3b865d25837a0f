"""What kind of run a folder holds and where it stopped: the one reader behind the two verbs
that continue a run.

Every run is saved after each stage (flows/sequence.py), so every folder can be continued; the
files it holds say how:

    kind              written by                        continued on the compile host by
    dispatch run      `tune-dispatch` (results.json's   `ireetune continue` (as `resume`:
                      progress, run_options.json)       the stages after the last one saved)
    dispatch folder   `tune-dispatch --stop-after       `ireetune measure` on the device host,
                      compile` (handoff.json)           then `ireetune continue` (as `finish`)
    model run         `tune` (model_run.json, mode      `ireetune continue`
                      in-process)
    split model run   `tune --stop-after compile`       `ireetune measure` on the device host
                      (model_run.json, mode split;      (as `device-step`), `ireetune continue`
                      device_step.json)

`ireetune measure FOLDER` is the device host's one verb: it measures a dispatch folder (as
`benchmark-folder`) or a split model run's device step (as `device-step`), whatever the folder
asks for. Runtime-only: nothing here imports the compiler at module level.
"""

from __future__ import annotations

import enum
from pathlib import Path

from ireetune.core.errors import IreetuneError
from ireetune.flows.dispatch.run_options import OPTIONS_NAME
from ireetune.flows.handoff.manifest import MANIFEST_NAME, RESULTS_NAME
from ireetune.flows.handoff.model_folder import DEVICE_MANIFEST_NAME


class FolderKind(enum.Enum):
    """The kinds of run folder, each with the file that tells it apart."""

    DISPATCH_RUN = "dispatch run"
    DISPATCH_FOLDER = "dispatch folder"
    MODEL_RUN = "model run"
    SPLIT_MODEL_RUN = "split model run"


def read_folder_kind(run_dir: Path) -> FolderKind:
    """Return the kind of run `run_dir` holds; refuse in one line a folder of no kind.

    The device's files are looked for first: they are what a runtime-only host measures, and a
    split model run's dispatch folders lie below it, not in it. A split run of the file before
    model_run.json (split.json) is a split model run, refused by name where it is read.
    """
    # The model run's file is declared where it is read, a module that imports the compiler:
    # this reader serves the compile host (the device host's is read_device_kind).
    from ireetune.flows.model.state import MODEL_RUN_NAME, OLD_SPLIT_NAME, Mode, read_run_mode

    mode = read_run_mode(run_dir)
    if (
        mode is Mode.SPLIT
        or (run_dir / DEVICE_MANIFEST_NAME).is_file()
        or (run_dir / OLD_SPLIT_NAME).is_file()
    ):
        return FolderKind.SPLIT_MODEL_RUN
    if (run_dir / MANIFEST_NAME).is_file():
        return FolderKind.DISPATCH_FOLDER
    if (run_dir / OPTIONS_NAME).is_file():
        return FolderKind.DISPATCH_RUN
    if (run_dir / MODEL_RUN_NAME).is_file():
        return FolderKind.MODEL_RUN
    raise IreetuneError(
        f"{run_dir} is not a model run folder, nor a dispatch one: it holds none of "
        f"{OPTIONS_NAME} (tune-dispatch), "
        f"{MANIFEST_NAME} (tune-dispatch --stop-after compile) and {MODEL_RUN_NAME} (tune, "
        "with or without --stop-after compile)"
    )


def read_device_kind(run_dir: Path) -> FolderKind:
    """Return the kind of a folder the device host is asked to measure (a dispatch folder, or
    a split model run); refuse in one line any other, naming where it is continued."""
    if (run_dir / DEVICE_MANIFEST_NAME).is_file():
        return FolderKind.SPLIT_MODEL_RUN
    if (run_dir / MANIFEST_NAME).is_file():
        return FolderKind.DISPATCH_FOLDER
    raise IreetuneError(
        f"{run_dir} asks the device host for nothing: it holds neither {MANIFEST_NAME} (a "
        f"dispatch folder compiled with --stop-after compile) nor {DEVICE_MANIFEST_NAME} (a "
        "split model run waiting for its device step); a run that measures as it goes is "
        "continued on its own host with `ireetune continue`"
    )


def check_measured(run_dir: Path) -> None:
    """Refuse in one line to continue a dispatch folder the device host has not measured."""
    if not (run_dir / RESULTS_NAME).is_file():
        raise IreetuneError(
            f"{run_dir} waits for the device host (it has no {RESULTS_NAME}): run "
            "`ireetune measure` on it there, then `ireetune continue` here"
        )
