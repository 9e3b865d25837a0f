"""Write files atomically: a reader, or a crash, sees the old file or the new one, never half.

Every file the tuner writes and something else reads (run-folder records, manifests, caches,
models, user-named outputs) goes through here: the content is written to a temporary file beside
the target, which one rename then puts in its place.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def temporary_beside(path: Path) -> Iterator[Path]:
    """Yield the path of a new, empty file in `path`'s folder; when the block ends without an
    exception it replaces `path` in one rename, otherwise it is removed and `path` is untouched.

    The name is one no other writer uses (process id and a random part), so concurrent writers of
    the same file (threads, tasks of one node) never write into each other's temporary file; the
    file gets the mode any new file gets (the umask applies).
    """
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp")
    os.close(os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
    try:
        yield temporary
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def write_text_atomically(path: Path, text: str) -> None:
    """Write a text file so that a reader (or a crash) never sees half of it."""
    with temporary_beside(path) as temporary:
        temporary.write_text(text)


def write_bytes_atomically(path: Path, content: bytes) -> None:
    """Write a binary file so that a reader (or a crash) never sees half of it."""
    with temporary_beside(path) as temporary:
        temporary.write_bytes(content)


def write_bytes_once(path: Path, content: bytes) -> None:
    """Write a file several writers share (the tasks of one Ray node) atomically, with its
    folder, unless it is already there."""
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomically(path, content)
