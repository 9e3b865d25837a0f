"""The device step's manifest of a split model run: what the runtime-only host does next.

Runtime-only: read on machines with only `iree-base-runtime` and `numpy`. The compile host
(`ireetune/flows/model/split.py`) writes `device_step.json` into the run folder before each round
trip; the device host (`ireetune/flows/handoff/device_step.py`) does every task it lists and writes
`device/results_<round trip>.json`. Paths are relative to the run folder.

Every file the device step reads is listed with its SHA-256: the step checks them all before
it runs anything, so a folder changed after it was compiled (or a file copied from another run)
is refused with one line. The manifest is read as untrusted data, like the dispatch-level one
(flows/handoff/manifest.py): types checked, every path inside the folder.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, Field, model_validator

from ireetune.core.arguments import non_negative_int, positive_int, speedup_threshold
from ireetune.core.errors import IreetuneError
from ireetune.core.fields import (
    Milliseconds,
    NonEmpty,
    NonNegativeFloat,
    NonNegativeInt,
    Positive,
    Seconds,
    Sha256Digest,
    bounded_as,
)
from ireetune.core.files import write_text_atomically
from ireetune.database.run_files import (
    FileModel,
    InsidePath,
    check_format,
    check_inside_run_dir,
    dump_document,
    dump_record,
    read_versioned_file,
    validate_document,
)
from ireetune.flows.handoff.manifest import check_inside_folder

DEVICE_MANIFEST_NAME = "device_step.json"
FORMAT = "ireetune-model-folder/1"
RESULTS_FORMAT = "ireetune-device-results/1"


# The device step's records are its manifest's declaration too: pydantic checks device_step.json
# against them (read on the device host as untrusted data, field by field in their order), and
# the file is written from them.

FolderPath = Annotated[NonEmpty, AfterValidator(check_inside_run_dir)]


@dataclass(frozen=True)
class LabelledBinary:
    """One compiled program to time: a dispatch benchmark or a model variant."""

    label: NonEmpty
    vmfb: FolderPath


def _unique_labels(binaries: tuple[LabelledBinary, ...]) -> tuple[LabelledBinary, ...]:
    labels = [binary.label for binary in binaries]
    if len(set(labels)) != len(labels) or "default" in labels:
        raise ValueError("labels must be unique and not 'default'")
    return binaries


Binaries = Annotated[tuple[LabelledBinary, ...], AfterValidator(_unique_labels)]


@dataclass(frozen=True)
class ProfileTask:
    """Time the default model on its inputs and each dispatch: inside runs of the whole model,
    matched by its `exports`, or else its benchmark alone (the profile; the ones that take most
    of a run, by their `launches` a call of the model, again)."""

    dispatches: Binaries
    rounds: Annotated[Positive, bounded_as(positive_int)]
    # By label; a dispatch not named (every one, in a manifest older than this field) counts 1.
    launches: dict[str, Annotated[NonNegativeInt, bounded_as(non_negative_int)]] = field(
        default_factory=dict
    )
    # By label: the export names of each dispatch, to time it inside runs of the whole model
    # (model/in_model_times.py); none (every one, in a manifest older than this field): each
    # dispatch benchmark is timed alone.
    exports: dict[str, tuple[NonEmpty, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class VariantTask:
    """Time model variants against the default, interleaved in one process, then confirm.

    The variants are the spec variants of the variants phase, or the flag phase's binaries
    (one per distinct flag set): both go through the same two sessions. The first session
    pre-selects by point estimate (`threshold`, at most `confirm_top`); a fresh session of
    `confirm_rounds` rounds times the pre-selected against the default again. That session's
    intervals are what the compile host decides on.
    """

    # The file calls the variants `models`.
    variants: Annotated[Binaries, Field(alias="models")]
    rounds: Annotated[Positive, bounded_as(positive_int)]
    # 0: as many calls as make a round of the default last `MIN_ROUND_MS`, from a short warm-up
    # of the default on the device (the flag phase runs before the model was ever timed).
    calls_per_round: Annotated[NonNegativeInt, bounded_as(non_negative_int)]
    confirm_top: Annotated[NonNegativeInt, bounded_as(non_negative_int)]
    confirm_rounds: Annotated[Positive, bounded_as(positive_int)]
    threshold: Annotated[NonNegativeFloat, bounded_as(speedup_threshold)]


@dataclass(frozen=True, kw_only=True)
class DeviceManifest:
    """device_step.json: what the device host runs."""

    round_trip: Annotated[Positive, bounded_as(positive_int)]
    target: NonEmpty
    devices: Annotated[tuple[NonEmpty, ...], Field(min_length=1)]
    function: NonEmpty
    inputs: FolderPath
    default_model: FolderPath
    # Parameter archives (.irpa) the model binaries read their weights from (ONNX models
    # imported with their weights kept apart: one archive serves every variant).
    parameters: tuple[FolderPath, ...] = ()
    # Every file the step reads, with its SHA-256 (relative path -> digest).
    files: dict[FolderPath, Sha256Digest]
    profile: ProfileTask | None
    # Dispatch-level benchmark folders (each holds handoff.json) to measure on every device.
    folders: tuple[FolderPath, ...]
    variants: VariantTask | None
    # The flag phase's binaries, timed against the default (the untouched model).
    flags: VariantTask | None = None


def results_name(round_trip: int) -> str:
    """Return the folder-relative path of one round trip's device results."""
    return f"device/results_{round_trip}.json"


def hash_file(path: Path) -> str:
    """Return a file's SHA-256, read in chunks (model binaries can be hundreds of megabytes)."""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_device_manifest(run_dir: Path, manifest: DeviceManifest) -> str:
    """Write `device_step.json`; return its SHA-256 (the compile host records it)."""
    payload = {"format": FORMAT, **dump_record(DeviceManifest, manifest)}
    payload["files"] = dict(sorted(manifest.files.items()))
    # A task's binaries follow its settings in the file, as they always have.
    for task, binaries in (("profile", "dispatches"), ("variants", "models"), ("flags", "models")):
        if payload[task] is not None:
            payload[task][binaries] = payload[task].pop(binaries)
    path = run_dir / DEVICE_MANIFEST_NAME
    write_text_atomically(path, dump_document(DeviceManifest, payload))
    return hash_file(path)


def hash_device_manifest(run_dir: Path) -> str:
    """Return the SHA-256 of the folder's device manifest."""
    return hash_file(run_dir / DEVICE_MANIFEST_NAME)


def check_listed_files(run_dir: Path, manifest: DeviceManifest) -> None:
    """Refuse the folder (one line) when a listed file is missing or differs from its hash."""
    for relative, digest in manifest.files.items():
        path = check_inside_folder(run_dir, relative)
        if not path.is_file():
            raise IreetuneError(f"{run_dir}: {relative} is missing; copy the whole run folder")
        if hash_file(path) != digest:
            raise IreetuneError(
                f"{run_dir}: {relative} does not match the hash in {DEVICE_MANIFEST_NAME}; the "
                "folder was changed after it was compiled"
            )


def read_device_manifest(run_dir: Path) -> DeviceManifest:
    """Read `device_step.json`; raise IreetuneError (one line) for a folder that is not one."""
    path = run_dir / DEVICE_MANIFEST_NAME
    if not path.is_file():
        raise IreetuneError(
            f"{run_dir} has no {DEVICE_MANIFEST_NAME}; write it with `ireetune tune MODEL "
            "--stop-after compile` (or `ireetune continue` after a device step)"
        )
    manifest = read_versioned_file(path, DeviceManifest, FORMAT, "manifest", run_dir)
    # Whatever the step reads must be covered by a hash.
    read = [manifest.inputs, manifest.default_model, *manifest.parameters]
    read += [d.vmfb for d in manifest.profile.dispatches] if manifest.profile else []
    read += [v.vmfb for v in manifest.variants.variants] if manifest.variants else []
    read += [v.vmfb for v in manifest.flags.variants] if manifest.flags else []
    read += [f"{folder}/handoff.json" for folder in manifest.folders]
    unlisted = [relative for relative in read if relative not in manifest.files]
    if unlisted:
        raise IreetuneError(f"{path}: files lists no hash for {unlisted[0]}")
    return manifest


# device/results_<round trip>.json: what the device step measured (flows/handoff/device_step.py
# writes it; the compile host reads it as untrusted data, it comes from another host).


class ProfileResultsFile(FileModel):
    device: str = ""
    model_times_ms: Annotated[list[Milliseconds], Field(min_length=1)]
    model_ms: Milliseconds
    default_outputs: InsidePath = ""
    dispatch_ms: dict[str, Milliseconds | None]
    # How the dispatches were timed, for the report's notes (absent in older results).
    timed_how: str = ""


class ModelRunFile(FileModel):
    times_ms: list[Milliseconds]
    reason: str = ""
    outputs: InsidePath


class VariantResultsFile(FileModel):
    device: str = ""
    calls_per_round: Positive
    first: dict[str, ModelRunFile]
    contenders: list[str]
    confirm: dict[str, ModelRunFile]

    @model_validator(mode="after")
    def _check_labels(self) -> VariantResultsFile:
        if "default" not in self.first:
            raise ValueError("the first session must time the default model")
        unknown = [label for label in self.contenders if label not in self.first]
        if unknown:
            raise ValueError(f"contender {unknown[0]} was not timed in the first session")
        return self


class DeviceResultsFile(FileModel):
    """One round trip's device results; `done` is false while the step is still running."""

    format: str = RESULTS_FORMAT
    manifest_sha256: str
    round_trip: Positive | None = None
    devices: Annotated[list[NonEmpty], Field(min_length=1)]
    seconds: dict[str, Seconds]
    folders: dict[str, str]
    profile: ProfileResultsFile | None = None
    variants: VariantResultsFile | None = None
    flags: VariantResultsFile | None = None
    done: bool = False


def check_device_results(path: Path, document: object, run_dir: Path) -> None:
    """Refuse a device results file (it comes from another host) in one line: its format, then
    every field."""
    check_format(path, document, RESULTS_FORMAT, "device results file", unversioned=True)
    validate_document(path, DeviceResultsFile, document, run_dir)
