"""Files a user names for a command to write (`-o FILE`): never an input, never a silent overwrite.

Every command that writes a user-named file checks it with `check_new_output` before any work
and writes it with `write_output` (or `replace_output` for a file made elsewhere), so the rule is
written once:

- an existing output that is not a regular file (a device such as `/dev/null`, a FIFO, a
  socket, a folder) is refused, `--force` or not;
- an output that is one of the command's inputs (the same file, however it is spelled: a link, a
  hard link, `./x`), an existing file inside a folder the command reads (a run folder), or any
  path inside a folder the command writes and then reads (profile's generated tree) is refused,
  `--force` or not;
- an existing output is refused unless the user passed `--force`;
- the file is written beside its final place and renamed over it, so a reader (or a crash) never
  sees half of it and a link at the output's name is replaced, never written through.
"""

from __future__ import annotations

import argparse
import os
import shutil
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

from ireetune.core.arguments import user_path
from ireetune.core.errors import IreetuneError
from ireetune.core.files import temporary_beside
from ireetune.core.run_dir import check_output_file


def add_force_argument(parser: argparse.ArgumentParser) -> None:
    """Add `--force`: replace an existing output file (never an input)."""
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace the output file if it exists (an input is never replaced)",
    )


def add_output_arguments(
    parser: argparse.ArgumentParser, help: str, *, required: bool = False
) -> None:
    """Add `-o/--output FILE`, the file a command writes (`help` says which), and `--force`."""
    parser.add_argument("-o", "--output", type=user_path, required=required, help=help)
    add_force_argument(parser)


def _is_same_file(first: Path, second: Path) -> bool:
    """Say whether two paths name one file: the same inode, or the same place once resolved."""
    try:
        return os.path.samefile(first, second)
    except OSError:
        return first.resolve() == second.resolve()


def _is_inside(path: Path, folder: Path) -> bool:
    """Say whether `path`, or the place it leads to, lies in `folder` (links resolved)."""
    folder = folder.resolve()
    return path.absolute().is_relative_to(folder) or path.resolve().is_relative_to(folder)


def check_new_output(
    output: Path,
    force: bool,
    inputs: Sequence[Path] = (),
    input_folders: Sequence[Path] = (),
    own_folders: Sequence[Path] = (),
) -> None:
    """Refuse, before any work, an output file that would replace an input or an existing file.

    `inputs` are the files the command reads; `input_folders` are folders whose every file it
    may read (a run folder); `own_folders` are folders the command itself fills and reads back,
    where no output may go, existing or not. An existing output needs `force`; an input, or
    anything but a regular file, is refused even then.
    """
    check_output_file(output)
    for folder in own_folders:
        if _is_inside(output, folder):
            raise IreetuneError(
                f"cannot write {output}: it is a file of {folder}, which this command reads; "
                "name a file outside it"
            )
    exists = output.exists() or output.is_symlink()
    if not exists:
        return
    for input_path in inputs:
        if _is_same_file(output, input_path):
            raise IreetuneError(
                f"cannot write {output}: it is the input {input_path}; name another output file"
            )
    for folder in input_folders:
        if _is_inside(output, folder):
            raise IreetuneError(
                f"cannot write {output}: it is a file of {folder}, which this command reads; "
                "name a file outside it (or a new one)"
            )
    if not force:
        raise IreetuneError(f"{output} exists; pass --force to replace it")


@contextmanager
def _temporary_beside(output: Path) -> Iterator[Path]:
    """Yield a fresh temporary path in the output's folder; rename it over `output` on success.

    The folder is created if needed (`check_new_output` has seen that it can be); a folder or
    temporary file that cannot be made is a one-line error naming the output.
    """
    with ExitStack() as stack:
        try:
            output.parent.mkdir(parents=True, exist_ok=True)
            temporary = stack.enter_context(temporary_beside(output))
        except OSError as error:
            raise IreetuneError(f"cannot write {output}: {error.strerror}") from error
        yield temporary


def write_output(output: Path, content: str | bytes) -> None:
    """Write a user-named output file atomically (checked first with `check_new_output`)."""
    try:
        with _temporary_beside(output) as temporary:
            if isinstance(content, str):
                temporary.write_text(content)
            else:
                temporary.write_bytes(content)
    except OSError as error:
        raise IreetuneError(f"cannot write {output}: {error.strerror}") from error


def replace_output(output: Path, source: Path) -> None:
    """Copy `source` to a user-named output file atomically."""
    try:
        with _temporary_beside(output) as temporary:
            shutil.copyfile(source, temporary)
    except OSError as error:
        raise IreetuneError(f"cannot write {output}: {error.strerror}") from error


@contextmanager
def output_in_place(output: Path) -> Iterator[Path]:
    """Yield a temporary path beside `output` for a tool to write; it becomes `output` when the
    block ends without an exception (a failed tool leaves `output` as it was)."""
    with _temporary_beside(output) as temporary:
        yield temporary
