"""A model run's options as its run file holds them: derived from `ModelTuneOptions`, read back
as untrusted data (strict types; each number passes the command line's argument type, checked by
the file that holds them with `check_option_numbers`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from pydantic import ConfigDict
from pydantic.dataclasses import dataclass as pydantic_dataclass

from ireetune.flows.model.options import ModelTuneOptions


# The options' own declaration serves the file: no field is declared again here.
@pydantic_dataclass(frozen=True, config=ConfigDict(strict=True, extra="forbid"))
class ModelOptionsFile(ModelTuneOptions):
    """The options the run was started with, checked as untrusted data."""


def options_of(stored: ModelOptionsFile, jobs: int, database_path: Path | None) -> ModelTuneOptions:
    """Return a run file's options as the flow takes them, with `jobs` and `database_path`."""
    fields = {f.name: getattr(stored, f.name) for f in dataclasses.fields(stored)}
    return ModelTuneOptions(**{**fields, "jobs": jobs, "database_path": database_path})
