"""The rule of trust for a run folder: a folder is data, and never runs or writes anything of
its own choosing.

Every command that reads a run folder (`continue`, `measure`, `replay`, and `report` where it
writes into the folder; the old names `resume`, `finish`, `benchmark-folder` and `device-step`
too) calls `check_folder_trust` first, before anything runs or is written (`measure` as
`device-step` or `benchmark-folder`, `continue` on a dispatch folder as `finish`: the commands
that take no `--flags`):

- links: an entry of the folder that is a symbolic link (or anything but a plain file or a
  folder) is refused by name, so no write goes through one and no read leaves the folder;
- flags: every compiler or runtime flag any of the folder's files carries (results.json's
  `global_flags`, run_options.json's and model_run.json's options and flag
  trials, handoff.json's `global_flags`, in the folder and every folder under it) passes the
  one allow-list of folder_flags.py, or was given again on the command line (`--flags` of
  `continue` and `replay`: a run tuned with `--flags X` continues with `--flags X`);
- paths: a folder does not choose the database (`options.database_path` is refused unless
  `--db` names one again); the user's input stays where it is (`continue` reads the run's own
  copy of its dispatch, model runs compile their own MLIR after its hash is checked);
- numbers: each file's model bounds them as the command line does (core/options.py's
  `check_option_numbers`, core/fields.py's `bounded_as`), checked when the command reads it,
  which is before its first step.

Runtime-only: nothing here imports the compiler (`measure` runs on hosts with only the
runtime).
"""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ireetune.core.errors import IreetuneError
from ireetune.database.run_files import read_json_file
from ireetune.flows.handoff.folder_flags import check_folder_flags

# The commands whose command line may give a folder's flags again (`--flags`), and those that
# use a database, whose command line may give it again (`--db`).
_FLAG_COMMANDS = ("continue", "replay")
_DATABASE_COMMANDS = ("continue",)


@dataclass(frozen=True)
class GivenAgain:
    """What the person gave again on the command line of `continue`: flags a folder may then
    carry beyond the allow-list, and the database to use."""

    flags: tuple[str, ...] = ()
    database_path: Path | None = None


def refuse_links(run_dir: Path) -> None:
    """Refuse a folder with an entry that is a symbolic link, or neither a plain file nor a
    folder (a FIFO, a device), naming the first one found."""
    for folder, folders, files in os.walk(run_dir):
        for name in sorted((*folders, *files)):
            path = Path(folder) / name
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                raise IreetuneError(
                    f"{path} is a symbolic link: a run folder holds its own files and ireetune "
                    "neither reads nor writes through a link (replace it with the file)"
                )
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise IreetuneError(f"{path} is not a plain file or a folder")


def _strings(value: object) -> tuple[str, ...]:
    """Return the strings of a JSON array (anything else is its file reader's to refuse)."""
    return tuple(item for item in value if isinstance(item, str)) if isinstance(value, list) else ()


def _field(document: object, *names: str) -> Any:
    """Return document[names[0]][names[1]]..., or None where a level is missing or no object."""
    for name in names:
        if not isinstance(document, dict):
            return None
        document = document.get(name)
    return document


def _trial_flags(trials: object, where: str) -> Iterator[tuple[str, tuple[str, ...]]]:
    for index, trial in enumerate(trials if isinstance(trials, list) else ()):
        yield f"{where}[{index}].flag_set.flags", _strings(_field(trial, "flag_set", "flags"))


def _flag_fields(name: str, document: object) -> Iterator[tuple[str, tuple[str, ...]]]:
    """Yield (field, flags) for every field of a folder's file that carries flags."""
    if name in ("results.json", "handoff.json"):
        yield "global_flags", _strings(_field(document, "global_flags"))
    if name in ("run_options.json", "model_run.json"):
        yield "options.extra_flags", _strings(_field(document, "options", "extra_flags"))
        flag_sets = _field(document, "options", "flag_sets")
        for index, flag_set in enumerate(flag_sets if isinstance(flag_sets, list) else ()):
            yield f"options.flag_sets[{index}]", _strings(flag_set)
    if name == "model_run.json":
        yield from _trial_flags(_field(document, "flag_search", "trials"), "flag_search.trials")
        yield (
            "flag_search.runtime_flags",
            _strings(_field(document, "flag_search", "runtime_flags")),
        )
        yield from _trial_flags(_field(document, "split", "flags", "trials"), "split.flags.trials")


_FLAG_FILES = ("results.json", "handoff.json", "run_options.json", "model_run.json")
# The files whose options name a database.
_DATABASE_FILES = ("run_options.json", "model_run.json")


def _folder_files(run_dir: Path) -> list[Path]:
    """Return the folder's files that carry flags or a database, its own first."""
    found = [
        Path(folder) / name
        for folder, _, files in os.walk(run_dir)
        for name in files
        if name in _FLAG_FILES
    ]
    return sorted(found, key=lambda path: (len(path.parts), str(path)))


def check_folder_trust(run_dir: Path, command: str, given: GivenAgain = GivenAgain()) -> None:
    """Refuse, before anything runs or is written, a run folder that would make `command` run
    or write something of the folder's own choosing (see the module's docstring)."""
    refuse_links(run_dir)
    repeating = command in _FLAG_COMMANDS
    documents = [(path, read_json_file(path)) for path in _folder_files(run_dir)]
    if given.flags and repeating:
        _check_given_flags(run_dir, documents, given.flags)
    for path, document in documents:
        for field, flags in _flag_fields(path.name, document):
            check_folder_flags(flags, f"{path}: {field}", given.flags, command if repeating else "")
        database = _field(document, "options", "database_path")
        if (
            command in _DATABASE_COMMANDS
            and path.name in _DATABASE_FILES
            and database
            and given.database_path is None
        ):
            raise IreetuneError(
                f"{path}: options.database_path names {database}: a run folder does not choose "
                f"the database; a run tuned with --db {shlex.quote(str(database))} continues with "
                f"`ireetune {command} RUN --db {shlex.quote(str(database))}`"
            )


def _check_given_flags(
    run_dir: Path, documents: list[tuple[Path, Any]], flags: tuple[str, ...]
) -> None:
    """Refuse `--flags` that the run does not carry: they allow its own flags, they add none."""
    carried = {
        flag
        for path, document in documents
        for _, field_flags in _flag_fields(path.name, document)
        for flag in field_flags
    }
    for flag in flags:
        if flag not in carried:
            raise IreetuneError(
                f"--flags: {run_dir} was not tuned with {flag!r}; `--flags` repeats the flags "
                "the run was started with, it adds none"
            )
