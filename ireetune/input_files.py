"""Check a file the user names before reading it: one line that says what is wrong with it."""

from __future__ import annotations

import errno
from pathlib import Path

from ireetune.errors import IreetuneError


def check_input_file(path: Path, what: str, *, allow_empty: bool = False) -> None:
    """Refuse a missing file, a symlink loop, an unreadable path or (unless allowed) an empty file.

    `what` names the file in the message: `check_input_file(path, "model")` raises
    "model not found: PATH". A folder passes: callers say in their own words that it is no file.
    """
    try:
        size = path.stat().st_size
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise IreetuneError(f"{what} is a symlink loop: {path}") from None
        if error.errno in (errno.ENOENT, errno.ENOTDIR):
            raise IreetuneError(f"{what} not found: {path}") from None
        raise IreetuneError(f"cannot read {what} {path}: {error.strerror}") from None
    if size == 0 and not allow_empty and path.is_file():
        raise IreetuneError(f"{what} is empty: {path}")
