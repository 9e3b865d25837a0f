"""Check and read a file the user names: one line that says what is wrong with it.

Every file a command takes from its user (a model, a spec, a flags file, a problem or knob list,
a file to import) is checked here, by what it is, before a byte of it is read: a name that is
not UTF-8, a missing file, a folder, a FIFO or a device, an empty file. A FIFO is never opened
in a way that waits for a writer. Its text is then decoded as UTF-8 (a binary file, an ONNX
model given where MLIR is taken, is named as such), and JSON is scanned for its depth before
it is parsed, so a deep file is one line rather than a RecursionError.
"""

from __future__ import annotations

import codecs
import errno
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from ireetune.core.errors import IreetuneError

# How deep a JSON file a user writes by hand may nest: the deepest ireetune reads (a recorded
# space's rows) nests 4 levels.
MAX_JSON_DEPTH = 32

# How much of a file `check_mlir_input` reads to tell MLIR text from a binary file.
HEAD_BYTES = 65536

# The first bytes of MLIR bytecode (`.mlirbc`).
MLIR_BYTECODE_MAGIC = b"ML\xefR"

# What a command that takes an MLIR model says to someone who gives it an ONNX model.
ONNX_HINT = (
    "this command takes MLIR; `ireetune tune` takes ONNX models (or import one first: "
    "`iree-import-onnx MODEL.onnx -o MODEL.mlir`)"
)

# A JSON string (escapes included) or one bracket: what the depth scan steps through.
_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


def describe_path(path: Path | str) -> str:
    """Return a path as a message shows it: bytes that are not UTF-8 as `\\xff` escapes (a
    file name is bytes; Python keeps the undecodable ones as lone surrogates)."""
    text = os.fspath(path)
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        # A surrogate no file name decodes to: escaped as itself.
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")


def is_utf8_name(path: Path | str) -> bool:
    """Say whether a file name is valid UTF-8 (ireetune writes names into UTF-8 JSON)."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_path_name(path: Path, what: str) -> None:
    """Refuse a name that is not valid UTF-8, in its own words."""
    if not is_utf8_name(path):
        raise IreetuneError(
            f"{what} name is not valid UTF-8: {describe_path(path)} (ireetune records file "
            "names in UTF-8; rename it)"
        )


def describe_file_kind(mode: int) -> str:
    """Name what a file mode (`os.stat(...).st_mode`) is: "a folder", "a FIFO", ..."""
    kinds = (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISREG, "a regular file"),
    )
    return next((name for holds, name in kinds if holds(mode)), "not a regular file")


def _stat(path: Path, what: str) -> os.stat_result:
    check_path_name(path, what)
    try:
        return path.stat()
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise IreetuneError(f"{what} is a symlink loop: {path}") from None
        if error.errno in (errno.ENOENT, errno.ENOTDIR):
            raise IreetuneError(f"{what} not found: {path}") from None
        raise IreetuneError(f"cannot read {what} {path}: {error.strerror}") from None


def _check_regular(mode: int, path: Path, what: str) -> None:
    if stat.S_ISDIR(mode):
        raise IreetuneError(f"{what} is a directory, not a file: {path}")
    if not stat.S_ISREG(mode):
        raise IreetuneError(f"{what} is not a regular file: {path} is {describe_file_kind(mode)}")


def check_input_file(path: Path, what: str, *, allow_empty: bool = False) -> None:
    """Refuse a name that is not UTF-8, a missing file, a symlink loop, an unreadable path, a
    directory, a FIFO or device, or (unless allowed) an empty file.

    `what` names the file in the message: `check_input_file(path, "model")` raises
    "model not found: PATH", "model is a directory, not a file: PATH".
    """
    status = _stat(path, what)
    _check_regular(status.st_mode, path, what)
    if status.st_size == 0 and not allow_empty:
        raise IreetuneError(f"{what} is empty: {path}")


def check_input_folder(path: Path, what: str) -> None:
    """Refuse a name that is not UTF-8, a missing folder, a symlink loop or a path that is no
    folder."""
    status = _stat(path, what)
    if not stat.S_ISDIR(status.st_mode):
        kind = "a file" if stat.S_ISREG(status.st_mode) else describe_file_kind(status.st_mode)
        raise IreetuneError(f"{what} {path} is {kind}, not a folder")


def read_input_bytes(
    path: Path, what: str, *, allow_empty: bool = False, limit: int | None = None
) -> bytes:
    """Check the file (`check_input_file`) and return its bytes (the first `limit` of them).

    The file is opened without waiting (a FIFO swapped in after the check would otherwise block
    the open) and checked again through its descriptor, so what is read is what was checked.
    """
    check_input_file(path, what, allow_empty=allow_empty)
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as error:
        raise IreetuneError(f"cannot read {what} {path}: {error.strerror}") from None
    with os.fdopen(descriptor, "rb") as handle:
        _check_regular(os.fstat(descriptor).st_mode, path, what)
        try:
            return handle.read(-1 if limit is None else limit)
        except OSError as error:
            raise IreetuneError(f"cannot read {what} {path}: {error.strerror}") from None


def describe_binary(
    raw: bytes, path: Path, what: str, error: UnicodeDecodeError, *, mlir: bool, onnx_hint: str = ""
) -> str:
    """Say why bytes that are not UTF-8 are no text input (`mlir`: no MLIR input): an ONNX
    model (`onnx_hint` says where one goes) or MLIR bytecode by name, anything else by its
    first bad byte."""
    if path.suffix.lower() == ".onnx":
        expected = "MLIR" if mlir else "text"
        return f"{what} {path} is an ONNX model, not {expected}" + (
            f": {onnx_hint}" if onnx_hint else ""
        )
    if raw.startswith(MLIR_BYTECODE_MAGIC):
        return (
            f"cannot read {what} {path}: it is MLIR bytecode, not text; write it as text with "
            f"`iree-ir-tool copy {path} -o FILE.mlir`"
        )
    bad = raw[error.start : error.start + 1].hex()
    return f"cannot read {what} {path}: it is not UTF-8 text (byte 0x{bad} at offset {error.start})"


def read_input_text(path: Path, what: str, *, allow_empty: bool = False) -> str:
    """Check the file (`check_input_file`) and return its text, decoded as UTF-8."""
    raw = read_input_bytes(path, what, allow_empty=allow_empty)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise IreetuneError(describe_binary(raw, path, what, error, mlir=False)) from None


def check_mlir_input(path: Path, what: str) -> None:
    """Refuse a file that is no MLIR, for a command that hands it to iree-compile unread: an
    ONNX model (by its name) or a file whose first bytes are neither text nor MLIR bytecode."""
    check_input_file(path, what)
    if path.suffix.lower() == ".onnx":
        raise IreetuneError(f"{what} {path} is an ONNX model, not MLIR: {ONNX_HINT}")
    # The head tells text from binary; a model may be gigabytes of weights.
    raw = read_input_bytes(path, what, limit=HEAD_BYTES)
    if raw.startswith(MLIR_BYTECODE_MAGIC):
        return
    try:
        # Incremental: a character cut at the head's end is no fault.
        codecs.getincrementaldecoder("utf-8")().decode(raw, final=False)
    except UnicodeDecodeError as error:
        raise IreetuneError(
            describe_binary(raw, path, what, error, mlir=True, onnx_hint=ONNX_HINT)
        ) from None


def measure_depth(text: str, limit: int) -> int:
    """Return the deepest nesting of brackets in JSON `text`, stopping once it passes `limit`.

    Strings are stepped over whole, so brackets inside them do not count. No recursion: a file
    100,000 levels deep costs one pass over its brackets.
    """
    depth = deepest = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > limit:
                return deepest
        elif token in "]}":
            depth -= 1
    return deepest


def parse_input_json(text: str, path: Path, what: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Parse the JSON text of a user's file: its depth scanned first, each fault one line."""
    if measure_depth(text, max_depth) > max_depth:
        raise IreetuneError(f"{what} {path} nests deeper than {max_depth} levels")
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise IreetuneError(f"{what} {path} is not valid JSON: {error}") from None


def read_input_json(path: Path, what: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Check and read a user's JSON file (`read_input_text`, `parse_input_json`)."""
    return parse_input_json(read_input_text(path, what), path, what, max_depth)
