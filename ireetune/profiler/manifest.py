"""The files between the compile phase and the run phase: `manifest.json` in the generated tree.

Compiling needs the IREE compiler; verifying and profiling need only the runtime and NumPy. The
manifest lists every dispatch with its operation, configuration, binaries and compile outcome,
so the run phase can happen later, on another machine (a GPU host), from the tree alone.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Hashable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, GetCoreSchemaHandler
from pydantic_core import core_schema

from ireetune.core.errors import IreetuneError
from ireetune.core.files import write_text_atomically
from ireetune.database.run_files import (
    FileModel,
    InsidePath,
    dump_document,
    read_json_object,
    validate_document,
)
from ireetune.profiler.operations import ConvOperation, MatmulOperation, Operation, OperationKind

MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1


class DispatchStatus(enum.Enum):
    COMPILED = "compiled"
    CONFIG_FAILED = "config-failed"
    COMPILE_FAILED = "compile-failed"
    COMPILE_TIMED_OUT = "compile-timed-out"


# Dispatch names become file names (`NAME_output.npy`): no separators, no leading dot.
_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def _check_plain_name(name: str) -> str:
    if not _SAFE_NAME.fullmatch(name):
        raise ValueError("is not a plain file name")
    return name


class _ByKind:
    """Read a stored operation as the record its `kind` field names.

    A matmul record keeps its kind as a field; a convolution's is fixed, so the file's `kind` of a
    convolution only chooses the record. The kinds are listed matmuls first, as the file's readers
    always named them in their refusals.
    """

    def __get_pydantic_core_schema__(
        self, source: object, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        matmul = handler.generate_schema(MatmulOperation)
        choices: dict[Hashable, core_schema.CoreSchema] = {
            kind.value: matmul for kind in OperationKind if kind is not OperationKind.CONV2D
        }
        choices[OperationKind.CONV2D.value] = handler.generate_schema(ConvOperation)
        return core_schema.tagged_union_schema(choices, discriminator="kind")


# The records below are also the manifest's typed model (pydantic validates these dataclasses
# directly): the reader checks every field against them and the writer writes through them, so
# the file has one definition.


@dataclass(frozen=True)
class DispatchEntry:
    """One dispatch (operation x configuration) and what compiling it produced.

    Paths are relative to the generated folder. `not_applied` is set when the profiled binary is
    byte-identical to the default configuration's: the configuration did not change the code.
    """

    name: Annotated[str, AfterValidator(_check_plain_name)]
    operation: Annotated[Operation, _ByKind()]
    config_name: str
    config_kind: str
    knobs: str
    status: DispatchStatus
    reason: str = ""
    profile_vmfb: InsidePath = ""
    verify_vmfb: InsidePath = ""
    binary_hash: str = ""
    not_applied: bool = False


@dataclass(frozen=True)
class Manifest:
    target: str
    device: str
    dispatches: tuple[DispatchEntry, ...]
    notes: tuple[str, ...] = ()


class ManifestFile(FileModel):
    """manifest.json of a generated profiler tree."""

    version: int
    target: str
    device: str
    notes: tuple[str, ...] = ()
    dispatches: tuple[DispatchEntry, ...]


def operation_to_dict(operation: Operation) -> dict[str, Any]:
    """Write an operation as plain JSON values (enums by value)."""
    fields = {
        key: value.value if isinstance(value, enum.Enum) else value
        for key, value in asdict(operation).items()
    }
    fields["kind"] = operation.kind.value
    return fields


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
    return Manifest(stored.target, stored.device, stored.dispatches, stored.notes)
