"""Each run's private temp folder: nothing a run or its children put in the temp folder outlives it.

`private_temp_folder` makes `ireetune_run_*` in the temp folder, points `TMPDIR` (which the
compiler and the runtime's children read: iree-compile writes `iree_dylib_*` files there with
`--iree-llvmcpu-link-embedded=false`) and Python's `tempfile` into it for the run, and removes it
when the run ends, however it ends short of SIGKILL. A SIGKILLed run cannot clean up, so every
run first removes the private folders of runs whose process is gone.

Whose folder it is says a file in it, `owner`: the process id and its start time (Linux
`/proc/PID/stat`), so a process id the system has given to another process since does not keep a
dead run's folder alive. A folder of a live run is never touched; nor is a folder without a
readable owner (one being made), or one of another user.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ireetune.core.child_process import process_start_time

SCRATCH_PREFIX = "ireetune_run_"
OWNER_NAME = "owner"


def describe_owner(pid: int) -> str:
    """Write the owner line of process `pid`: its id and start time ("-" where unknown)."""
    start_time = process_start_time(pid)
    return f"{pid} {'-' if start_time is None else start_time}\n"


def is_owner_alive(owner_text: str) -> bool | None:
    """Say whether the process an owner line names still runs (None: the line is not one).

    A process id in use by a process that started at another time is a reused id: the owner is
    gone.
    """
    words = owner_text.split()
    if len(words) != 2 or not words[0].isdigit() or not (words[1].isdigit() or words[1] == "-"):
        return None
    pid = int(words[0])
    if pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # Alive, and another user's.
    recorded = None if words[1] == "-" else int(words[1])
    current = process_start_time(pid)
    return recorded is None or current is None or recorded == current


def remove_stale_scratch(parent: Path) -> list[Path]:
    """Remove the private folders under `parent` of runs whose process is gone; return them."""
    removed = []
    try:
        entries = list(parent.glob(f"{SCRATCH_PREFIX}*"))
    except OSError:
        return []
    for folder in entries:
        try:
            if folder.is_symlink() or not folder.is_dir() or folder.stat().st_uid != os.getuid():
                continue
            owner_text = (folder / OWNER_NAME).read_text()
        except (OSError, UnicodeDecodeError):
            continue
        if is_owner_alive(owner_text) is False:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


@contextmanager
def private_temp_folder() -> Iterator[Path]:
    """Give the block a private temp folder (in `TMPDIR` and `tempfile`), removed at its end;
    first remove the private folders of dead runs."""
    parent = Path(tempfile.gettempdir())
    remove_stale_scratch(parent)
    try:
        folder = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=parent))
        # Written under another name and renamed, so no run ever reads half an owner line.
        partial = folder / f".{OWNER_NAME}"
        partial.write_text(describe_owner(os.getpid()))
        partial.rename(folder / OWNER_NAME)
    except OSError:
        # A temp folder nothing can be made in: the commands that need one say so themselves.
        yield parent
        return
    previous_variable = os.environ.get("TMPDIR")
    previous_tempdir = tempfile.tempdir
    os.environ["TMPDIR"] = str(folder)
    tempfile.tempdir = str(folder)
    try:
        yield folder
    finally:
        tempfile.tempdir = previous_tempdir
        if previous_variable is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = previous_variable
        shutil.rmtree(folder, ignore_errors=True)
