"""The flags file a user applies: one flag per line, read by `iree-compile @tuned_flags.txt`.

iree-compile (LLVM's command-line parser) expands `@FILE` into the file's words, so the file
holds one flag per line and nothing else: it has no comment syntax, and flags never contain
whitespace (`flags/check.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ireetune.core.files import write_text_atomically
from ireetune.errors import IreetuneError
from ireetune.flags.check import check_flag_form
from ireetune.input_files import check_input_file

FLAGS_FILE_NAME = "tuned_flags.txt"


def write_flags_file(path: Path, flags: Sequence[str]) -> None:
    """Write flags one per line (an empty file means the compiler's defaults)."""
    write_text_atomically(path, "".join(f"{flag}\n" for flag in flags))


def read_flags_file(path: Path) -> tuple[str, ...]:
    """Read a flags file written by `write_flags_file` (or by hand) and check each flag's form."""
    # An empty flags file is valid: it means the compiler's defaults.
    check_input_file(path, "flags file", allow_empty=True)
    if not path.is_file():
        raise IreetuneError(f"flags file not found: {path}")
    try:
        words = path.read_text().split()
    except (OSError, UnicodeDecodeError) as error:
        raise IreetuneError(f"cannot read flags file {path}: {error}") from error
    return check_flag_form(words, str(path))
