"""The files between the compile phase and the run phase: `manifest.json` in the generated tree.

Compiling needs the IREE compiler; verifying and profiling need only the runtime and NumPy. The
manifest lists every dispatch with its operation, configuration, binaries and compile outcome,
so the run phase can happen later, on another machine (a GPU host), from the tree alone.
"""

from __future__ import annotations

import enum
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from ireetune.core.files import write_text_atomically
from ireetune.errors import IreetuneError
from ireetune.profiler.operations import (
    ConvLayout,
    ConvOperation,
    ElementType,
    MatmulLayout,
    MatmulOperation,
    Operation,
    OperationKind,
)
from ireetune.run_files import (
    FileModel,
    InsidePath,
    dump_document,
    read_json_object,
    validate_document,
)

MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1


class DispatchStatus(enum.Enum):
    COMPILED = "compiled"
    CONFIG_FAILED = "config-failed"
    COMPILE_FAILED = "compile-failed"
    COMPILE_TIMED_OUT = "compile-timed-out"


@dataclass(frozen=True)
class DispatchEntry:
    """One dispatch (operation x configuration) and what compiling it produced.

    Paths are relative to the generated folder. `not_applied` is set when the profiled binary is
    byte-identical to the default configuration's: the configuration did not change the code.
    """

    name: str
    operation: Operation
    config_name: str
    config_kind: str
    knobs: str
    status: DispatchStatus
    reason: str = ""
    profile_vmfb: str = ""
    verify_vmfb: str = ""
    binary_hash: str = ""
    not_applied: bool = False

    def with_status(self, status: DispatchStatus, reason: str) -> DispatchEntry:
        return replace(self, status=status, reason=reason)


@dataclass(frozen=True)
class Manifest:
    target: str
    device: str
    dispatches: tuple[DispatchEntry, ...]
    notes: tuple[str, ...] = ()


# The manifest's typed model: its reader checks every field against it and its writer writes
# through it, so the file has one definition.

Dimension = Annotated[int, Field(ge=1, le=2**31 - 1)]
# Dispatch names become file names (`NAME_output.npy`): no separators, no leading dot.
_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def _check_plain_name(name: str) -> str:
    if not _SAFE_NAME.fullmatch(name):
        raise ValueError("is not a plain file name")
    return name


class MatmulOperationFile(FileModel):
    kind: Literal["matmul", "batch_matmul", "matmul_bias_relu"]
    m: Dimension
    n: Dimension
    k: Dimension
    input_type: ElementType
    accumulator_type: ElementType
    layout: MatmulLayout = MatmulLayout.NN
    batch: Dimension | None = None

    @model_validator(mode="after")
    def _check_batch(self) -> MatmulOperationFile:
        if (self.batch is not None) != (self.kind == "batch_matmul"):
            raise ValueError("must give batch for batch_matmul, and only for it")
        return self


class ConvOperationFile(FileModel):
    kind: Literal["conv2d"]
    batch: Dimension
    height: Dimension
    width: Dimension
    channels: Dimension
    filters: Dimension
    kernel_h: Dimension
    kernel_w: Dimension
    stride: Dimension
    dilation: Dimension
    input_type: ElementType
    accumulator_type: ElementType
    layout: ConvLayout = ConvLayout.NHWC_HWCF


class DispatchEntryFile(FileModel):
    name: Annotated[str, AfterValidator(_check_plain_name)]
    operation: Annotated[MatmulOperationFile | ConvOperationFile, Field(discriminator="kind")]
    config_name: str
    config_kind: str
    knobs: str
    status: DispatchStatus
    reason: str = ""
    profile_vmfb: InsidePath = ""
    verify_vmfb: InsidePath = ""
    binary_hash: str = ""
    not_applied: bool = False


class ManifestFile(FileModel):
    """manifest.json of a generated profiler tree."""

    version: int
    target: str
    device: str
    notes: tuple[str, ...] = ()
    dispatches: tuple[DispatchEntryFile, ...]


def operation_to_dict(operation: Operation) -> dict[str, Any]:
    """Write an operation as plain JSON values (enums by value)."""
    fields = {
        key: value.value if isinstance(value, enum.Enum) else value
        for key, value in asdict(operation).items()
    }
    fields["kind"] = operation.kind.value
    return fields


def _operation_from_file(stored: MatmulOperationFile | ConvOperationFile) -> Operation:
    fields = {key: getattr(stored, key) for key in type(stored).model_fields}
    if isinstance(stored, ConvOperationFile):
        del fields["kind"]
        return ConvOperation(**fields)
    fields["kind"] = OperationKind(stored.kind)
    return MatmulOperation(**fields)


def write_manifest(generated_dir: Path, manifest: Manifest) -> Path:
    """Write the manifest atomically (a crash never leaves half a file)."""
    records = []
    for entry in manifest.dispatches:
        record = {key: getattr(entry, key) for key in entry.__dataclass_fields__}
        record["operation"] = operation_to_dict(entry.operation)
        record["status"] = entry.status.value
        records.append(record)
    document = {
        "version": MANIFEST_VERSION,
        "target": manifest.target,
        "device": manifest.device,
        "notes": list(manifest.notes),
        "dispatches": records,
    }
    path = generated_dir / MANIFEST_NAME
    write_text_atomically(path, dump_document(ManifestFile, document))
    return path


def read_manifest(generated_dir: Path) -> Manifest:
    """Read the manifest the compile phase wrote (as untrusted data), or say why it cannot be used.

    Every field is checked: dispatch names are plain file names and binaries stay in the folder.
    """
    path = generated_dir / MANIFEST_NAME
    if not path.is_file():
        raise IreetuneError(
            f"{path} not found: run the compile phase first (--phase compile or all)"
        )
    document = read_json_object(path)
    if document.get("version") != MANIFEST_VERSION:
        raise IreetuneError(
            f"{path} has version {document.get('version')}; expected {MANIFEST_VERSION}"
        )
    stored = validate_document(path, ManifestFile, document, generated_dir)
    entries = tuple(
        DispatchEntry(
            name=entry.name, operation=_operation_from_file(entry.operation),
            config_name=entry.config_name, config_kind=entry.config_kind, knobs=entry.knobs,
            status=entry.status, reason=entry.reason, profile_vmfb=entry.profile_vmfb,
            verify_vmfb=entry.verify_vmfb, binary_hash=entry.binary_hash,
            not_applied=entry.not_applied,
        )
        for entry in stored.dispatches
    )  # fmt: skip
    return Manifest(stored.target, stored.device, entries, stored.notes)
