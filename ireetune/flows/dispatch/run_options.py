"""run_options.json: the options a dispatch run was started with, for `ireetune continue`.

Written when the run folder starts (flows/dispatch/start.py); read back as untrusted data by
flows/dispatch/resume.py, its format checked first (a folder of another version is refused in one line
naming the format found).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, ClassVar

from pydantic import TypeAdapter, ValidationError

from ireetune.core.errors import IreetuneError
from ireetune.core.files import write_text_atomically
from ireetune.core.options import check_option_numbers
from ireetune.database.run_files import FileModel, RunFileError, dump_document, read_model_file
from ireetune.flows.dispatch.options import TuneOptions

OPTIONS_NAME = "run_options.json"
_OPTIONS = TypeAdapter(TuneOptions)


class RunOptionsFile(FileModel):
    """run_options.json: the options a dispatch run was started with (paths made absolute)."""

    FORMAT: ClassVar[str] = "ireetune-dispatch-options/1"

    options: dict[str, Any]


def write_run_options(run_dir: Path, options: TuneOptions) -> None:
    """Write the run's options into its folder, for `ireetune continue`."""
    absolute = dataclasses.replace(
        options,
        input_path=options.input_path.resolve(),
        output_dir=options.output_dir.resolve(),
        database_path=options.database_path.resolve() if options.database_path else None,
    )
    document = {"format": RunOptionsFile.FORMAT, "options": _OPTIONS.dump_python(absolute, mode="json")}  # fmt: skip
    write_text_atomically(run_dir / OPTIONS_NAME, dump_document(RunOptionsFile, document))


def read_run_options(run_dir: Path) -> TuneOptions:
    """Read run_options.json back; refuse a folder without it, or of another format, in one
    line naming the format found."""
    path = run_dir / OPTIONS_NAME
    if not path.is_file():
        raise IreetuneError(
            f"{run_dir} has no {OPTIONS_NAME}: not a tune-dispatch run folder of this version "
            "(run the same tune-dispatch command again: the database restores what was measured)"
        )
    stored = read_model_file(path, RunOptionsFile, run_dir)
    try:
        options = _OPTIONS.validate_json(json.dumps(stored.options), strict=True)
        # Each number within its command-line bounds (a folder is data).
        check_option_numbers(options, "options")
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise RunFileError(f"{path}: options.{where}: {first['msg']}") from None
    except ValueError as error:
        raise RunFileError(f"{path}: {error}") from None
    return options
