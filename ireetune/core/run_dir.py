"""Output folders: one new folder per run, never shared between two runs."""

from __future__ import annotations

import datetime
import os
import re
import secrets
import stat
import tempfile
from pathlib import Path

from ireetune.core.errors import IreetuneError
from ireetune.core.input_files import check_input_folder, check_path_name, describe_file_kind


def create_run_dir(parent: Path, label: str) -> Path:
    """Create `parent/<label>_<UTC timestamp>_<random>`; creation is exclusive, so no collisions."""
    parent.mkdir(parents=True, exist_ok=True)
    safe_label = re.sub(r"[^A-Za-z0-9_.-]", "_", label)[:80]
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d_%H%M%S")
    while True:
        candidate = parent / f"{safe_label}_{stamp}_{secrets.token_hex(3)}"
        try:
            os.mkdir(candidate)
        except FileExistsError:
            continue
        return candidate


def _nearest_existing(path: Path) -> Path:
    """Return `path` or its closest ancestor that exists (a relative path ends at `.`)."""
    existing = path
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    return existing


def check_output_dir(path: Path) -> None:
    """Refuse, before any work, a folder that cannot be created or written.

    The folder may not exist yet; then its closest existing ancestor must be a writable folder.
    Writability is probed by creating and removing a file, because permission bits say nothing
    for root or for a read-only mount.
    """
    check_path_name(path.absolute(), "output folder")
    existing = _nearest_existing(path)
    if not existing.is_dir():
        kind = "a file" if existing.exists() else "missing"
        raise IreetuneError(f"cannot write to {path}: {existing} is {kind}, not a folder")
    try:
        handle, probe = tempfile.mkstemp(prefix=".ireetune_probe_", dir=existing)
    except OSError as error:
        raise IreetuneError(
            f"cannot write to {path}: {existing} is not writable ({error.strerror})"
        ) from None
    os.close(handle)
    os.unlink(probe)


def check_output_file(path: Path) -> None:
    """Refuse, before any work, an output file that cannot be written (its folder included).

    An existing output (or what a link there leads to) must be a regular file: a device, a
    FIFO, a socket or a folder is refused, `--force` or not (a FIFO would block the writer, and
    renaming a file over `/dev/null` replaces the device node).
    """
    check_path_name(path.absolute(), "output file")
    try:
        mode = path.stat().st_mode
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        raise IreetuneError(
            f"cannot write {path}: it is {describe_file_kind(mode)}, not a regular file"
        )
    check_output_dir(path.parent)
    if mode is not None:
        try:
            # Append mode opens for writing without changing a byte (or the modification time).
            with path.open("ab"):
                pass
        except OSError as error:
            raise IreetuneError(f"cannot write {path}: {error.strerror}") from None


def check_database_path(path: Path | None) -> None:
    """Refuse, before any work, a database file (default: the user's) that cannot be written or
    that ireetune would refuse to open (not an ireetune database, a newer schema).

    SQLite writes a journal beside the file, so its folder must be writable too.
    """
    from ireetune.database.schema import check_database_file
    from ireetune.database.store import default_database_path

    database = path or default_database_path()
    if database.exists() and not database.is_file():
        raise IreetuneError(f"cannot use the database {database}: it is not a file")
    try:
        check_output_file(database)
    except IreetuneError as error:
        raise IreetuneError(f"cannot use the database {database}: {error}") from None
    check_database_file(database)


def check_run_folder(path: Path) -> None:
    """Refuse a run folder that does not exist, is not a folder, or cannot be written."""
    check_input_folder(path, "run folder")
    if not path.is_dir():
        raise IreetuneError(f"not a run folder: {path} is a file")
    check_output_dir(path)


def is_inside_folder(folder: Path, relative: str) -> bool:
    """Say whether `relative` names a path inside `folder` (no absolute path, no `..`, and no
    symlink that leads out): the test for every path read from a folder's own manifest."""
    path = Path(relative)
    if not relative or path.is_absolute() or ".." in path.parts:
        return False
    return (folder / path).resolve().is_relative_to(folder.resolve())
