"""The round trips of a split model run: the next device manifest, and the device's results.

Every phase of the split mode that needs the device (flows/model/split.py, flag_phase.py) hands
its task to `send_to_device`, which lists every file the device step will read with its hash in
`device_step.json` (flows/handoff/model_folder.py) and pauses the run. `receive_device_results` reads
the round trip's results back on `ireetune continue`: results of another manifest, a manifest
that is not the one this run wrote, or a step that did not finish are refused in one line.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ireetune.core.errors import IreetuneError
from ireetune.core.tools import path_argument
from ireetune.database.run_files import RunFileError, read_json_file, validate_record
from ireetune.flows.handoff.manifest import read_manifest
from ireetune.flows.handoff.model_folder import (
    DEVICE_MANIFEST_NAME,
    DeviceManifest,
    ProfileResultsFile,
    ProfileTask,
    VariantTask,
    check_device_results,
    hash_device_manifest,
    hash_file,
    results_name,
    write_device_manifest,
)
from ireetune.flows.model.run import ModelTuningRun, Pause
from ireetune.flows.model.state import SplitSection, SplitTimingFile
from ireetune.flows.model.state_restore import save_run

# The default model every device task times the others against, until the flag phase keeps a
# winner (then its binary: the later phases measure under the winning flags).
UNTUNED_MODEL = "default.vmfb"


def record_time(state: SplitSection, phase: str, host: str, seconds: float) -> None:
    state.timings.append(SplitTimingFile(phase=phase, host=host, seconds=seconds))


def relative_to_run(run_dir: Path, path: Path) -> str:
    """Return a path inside the run folder as the run file and the manifest name it."""
    return str(path.resolve().relative_to(run_dir.resolve()))


def device_step_command(run_dir: Path) -> str:
    """Spell the device step of a run folder as a shell command (a path with spaces quoted)."""
    return shlex.join(["ireetune", "measure", path_argument(run_dir)])


def default_model_of(state: SplitSection) -> str:
    """Return the folder-relative binary the device times as the default: the flag phase's
    winner once it kept one, else the model compiled with the run's own flags."""
    step = state.flags
    if not step.decided or step.winner is None:
        return UNTUNED_MODEL
    return f"flags/{step.winner}.vmfb"


def receive_device_results(run: ModelTuningRun) -> None:
    """Read the current round trip's device results into the run's state; refuse results of
    another manifest, or a folder changed since it was compiled."""
    run_dir, state = run.run_dir, run.split_state
    if hash_device_manifest(run_dir) != state.device_manifest_sha256:
        raise IreetuneError(
            f"{run_dir / DEVICE_MANIFEST_NAME} is not the one this run wrote; the folder was "
            "changed after it was compiled"
        )
    results = _read_results(run_dir, state)
    if f"device {state.round_trip}" not in [t.phase for t in state.timings]:
        record_time(
            state, f"device {state.round_trip}", "device", float(results["seconds"]["total"])
        )
        save_run(run)
    if "profile" in results:
        state.profile = validate_record(
            run_dir / results_name(state.round_trip), ProfileResultsFile, results["profile"]
        )
    # `device-step --devices` may have measured on other devices than the run was prepared for.
    state.devices = list(results.get("devices") or state.devices)
    for folder, outcome in results.get("folders", {}).items():
        state.folder_outcomes[folder] = outcome
    if state.profile is None and "flags" not in results:
        raise IreetuneError(f"{run_dir}: the device results hold no profile; run the device step")
    run.device_results = results


def _read_results(run_dir: Path, state: SplitSection) -> dict[str, Any]:
    """Read the current round trip's device results; refuse those of another manifest."""
    path = run_dir / results_name(state.round_trip)
    if not path.exists():
        raise IreetuneError(
            f"{run_dir} waits for the device: run `{device_step_command(run_dir)}` on the GPU "
            "host, then continue"
        )
    results = read_json_file(path)
    if (
        not isinstance(results, dict)
        or results.get("manifest_sha256") != state.device_manifest_sha256
    ):
        raise IreetuneError(
            f"{path} was not measured from this run's {DEVICE_MANIFEST_NAME}; run the device "
            f"step again: {device_step_command(run_dir)}"
        )
    try:
        check_device_results(path, results, run_dir)
    except RunFileError as error:
        raise IreetuneError(f"{error}; run the device step again") from None
    if results.get("done") is not True:
        raise IreetuneError(
            f"the device step of {run_dir} was stopped before it finished; run it again (it "
            f"keeps what was measured): {device_step_command(run_dir)}"
        )
    return results


def send_to_device(
    run: ModelTuningRun, profile_task: ProfileTask | None = None, folders: Sequence[str] = (),
    variants: VariantTask | None = None, flags: VariantTask | None = None,
) -> Pause:  # fmt: skip
    """Write the next device manifest, with the hash of every file the step will read."""
    run_dir, state = run.run_dir, run.split_state
    folders = [f for f in folders if f]
    model = run.model_file
    assert model is not None, "the prepare phase imports the model"
    parameters = model.parameters
    default_model = default_model_of(state)
    files = ["inputs.npz", default_model, *parameters]
    files += [d.vmfb for d in profile_task.dispatches] if profile_task else []
    files += [v.vmfb for v in variants.variants] if variants else []
    files += [v.vmfb for v in flags.variants] if flags else []
    for folder in folders:
        folder_manifest = read_manifest(run_dir / folder)
        files.append(f"{folder}/handoff.json")
        for entry in (folder_manifest.baseline, *folder_manifest.candidates):
            files += [f"{folder}/{path}" for path in (entry.vmfb, entry.reference_vmfb) if path]
    round_trip = state.round_trip + 1
    manifest = DeviceManifest(
        round_trip=round_trip, target=run.options.target, devices=tuple(state.devices),
        function=model.function, inputs="inputs.npz", default_model=default_model,
        files={f: hash_file(run_dir / f) for f in files}, profile=profile_task,
        folders=tuple(folders), variants=variants, parameters=tuple(parameters), flags=flags,
    )  # fmt: skip
    state.device_manifest_sha256 = write_device_manifest(run_dir, manifest)
    state.round_trip = round_trip
    run.run_progress = run.run_progress.paused(Pause(round_trip))
    save_run(run)
    return Pause(round_trip)


def load_outputs(path: Path) -> tuple[np.ndarray[Any, Any], ...]:
    """Read the outputs the device step saved for one model (`arr_0`, `arr_1`, ...)."""
    with np.load(path) as archive:
        return tuple(archive[f"arr_{i}"] for i in range(len(archive.files)))
