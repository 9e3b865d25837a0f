"""The flags files a user applies: one flag per line.

`tuned_flags.txt` is read by `iree-compile @tuned_flags.txt`: iree-compile (LLVM's command-line
parser) expands `@FILE` into the file's words, so the file holds one flag per line and nothing
else: it has no comment syntax, and flags never contain whitespace (`flags/check.py`).
`runtime_flags.txt`, beside it, holds the device's runtime options (`flags/runtime.py`), as
`iree-run-module --flagfile=runtime_flags.txt` reads them and as
`iree.runtime.flags.parse_flags(*lines)` takes them (before the device is created).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ireetune.core.files import write_text_atomically
from ireetune.core.input_files import read_input_text
from ireetune.flags.check import check_flag_form

FLAGS_FILE_NAME = "tuned_flags.txt"
RUNTIME_FLAGS_FILE_NAME = "runtime_flags.txt"


def write_flag_files(
    run_dir: Path, flags: Sequence[str], runtime_flags: Sequence[str]
) -> Path | None:
    """Write `tuned_flags.txt` (when there are flags) and `runtime_flags.txt` (when there are
    runtime flags) into `run_dir`; return the first one's path, or None."""
    if runtime_flags:
        write_flags_file(run_dir / RUNTIME_FLAGS_FILE_NAME, runtime_flags)
    if not flags:
        return None
    write_flags_file(run_dir / FLAGS_FILE_NAME, flags)
    return run_dir / FLAGS_FILE_NAME


def write_flags_file(path: Path, flags: Sequence[str]) -> None:
    """Write flags one per line (an empty file means the compiler's defaults)."""
    write_text_atomically(path, "".join(f"{flag}\n" for flag in flags))


def _read_words(path: Path, what: str) -> list[str]:
    """Read the whitespace-separated words of a flags file (`what`: its kind, for errors). An empty
    file is valid: it means the defaults."""
    return read_input_text(path, what, allow_empty=True).split()


def read_flags_file(path: Path) -> tuple[str, ...]:
    """Read a flags file written by `write_flags_file` (or by hand) and check each flag's form."""
    return check_flag_form(_read_words(path, "flags file"), str(path))
