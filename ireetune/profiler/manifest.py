"""The files between the compile phase and the run phase: `manifest.json` in the generated tree.

Compiling needs the IREE compiler; verifying and profiling need only the runtime and NumPy. The
manifest lists every dispatch with its operation, configuration, binaries and compile outcome,
so the run phase can happen later, on another machine (a GPU host), from the tree alone.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

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
from ireetune.run_dir import is_inside_folder
from ireetune.run_files import read_json_object

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


def operation_to_dict(operation: Operation) -> dict[str, Any]:
    """Write an operation as plain JSON values (enums by value)."""
    fields = {
        key: value.value if isinstance(value, enum.Enum) else value
        for key, value in asdict(operation).items()
    }
    fields["kind"] = operation.kind.value
    return fields


def operation_from_dict(fields: dict[str, Any]) -> Operation:
    """Read an operation back from `operation_to_dict`'s form."""
    values = dict(fields)
    kind = OperationKind(values.pop("kind"))
    values["input_type"] = ElementType(values["input_type"])
    values["accumulator_type"] = ElementType(values["accumulator_type"])
    if kind is OperationKind.CONV2D:
        values["layout"] = ConvLayout(values["layout"])
        return ConvOperation(**values)
    values["layout"] = MatmulLayout(values["layout"])
    return MatmulOperation(kind=kind, **values)


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
    write_text_atomically(path, json.dumps(document, indent=1) + "\n")
    return path


def read_manifest(generated_dir: Path) -> Manifest:
    """Read the manifest the compile phase wrote, or say why it cannot be used."""
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
    try:
        entries = tuple(_read_entry(generated_dir, record) for record in document["dispatches"])
        return Manifest(
            str(document["target"]), str(document["device"]), entries,
            tuple(str(note) for note in document.get("notes", [])),
        )  # fmt: skip
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise IreetuneError(f"{path} is damaged: {type(error).__name__}: {error}") from None


# Dispatch names become file names (`NAME_output.npy`): no separators, no leading dot.
_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def _read_entry(generated_dir: Path, record: dict[str, Any]) -> DispatchEntry:
    """Read one dispatch record as untrusted data: its name and paths stay in the folder."""
    fields = dict(record)
    fields["operation"] = operation_from_dict(fields["operation"])
    fields["status"] = DispatchStatus(fields["status"])
    entry = DispatchEntry(**fields)
    if not isinstance(entry.name, str) or not _SAFE_NAME.fullmatch(entry.name):
        raise ValueError(f"dispatch name {json.dumps(entry.name)} is not a plain file name")
    for binary in (entry.profile_vmfb, entry.verify_vmfb):
        if binary and (not isinstance(binary, str) or not is_inside_folder(generated_dir, binary)):
            raise ValueError(f"{json.dumps(binary)} of {entry.name} leads outside {generated_dir}")
    return entry
