"""The state file of a split model run (`split.json`): one typed model for its reader and writer.

The compile host writes `split.json` after every finished sub-step and reads it back on
`ireetune continue`, possibly after the folder went to the device host and back. It is read
as untrusted data: its format first (a folder of another ireetune version is refused with one
line naming both versions), then every field, and every path it names stays inside the folder.
The flow works on the typed state (`SplitStateFile`, updated in place as each sub-step
finishes); `save_state` writes it, checked against the same model its reader uses.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, model_validator

from ireetune.core.errors import IreetuneError
from ireetune.core.fields import NonNegativeInt, Seconds, bounded_as
from ireetune.core.files import write_text_atomically
from ireetune.core.options import check_option_numbers, value_type_of
from ireetune.database.run_files import (
    InsidePath,
    check_format,
    dump_document,
    dump_record,
    read_json_file,
    validate_record,
)
from ireetune.flags.trials import FlagTrial
from ireetune.flows.dispatch.options import TuneOptions
from ireetune.flows.handoff.model_folder import ProfileResultsFile
from ireetune.flows.model.options import ModelTuneOptions
from ireetune.flows.model.options_file import ModelOptionsFile


class SplitStage(enum.StrEnum):
    """Where a split run stands (the values stored in split.json)."""

    PREPARING = "preparing"
    AWAITING_DEVICE = "awaiting-device"
    DONE = "done"


STATE_NAME = "split.json"
STATE_FORMAT = "ireetune-split-run/1"


class StateFile(BaseModel):
    """A part of split.json: typed and strict as a FileModel, but updated in place by the flow
    (each sub-step records what it left as it finishes)."""

    model_config = ConfigDict(strict=True, extra="ignore")


class SplitModelFile(StateFile):
    source: str = ""
    mlir: InsidePath
    mlir_sha256: str
    function: str
    parameters: list[InsidePath] = []
    compile_timeout_s: Annotated[
        Seconds, bounded_as(value_type_of(TuneOptions, "compile_timeout_s"))
    ] = 1200.0


class SplitDispatchFile(StateFile):
    index: NonNegativeInt
    name: str
    benchmark: InsidePath
    vmfb: InsidePath
    problem: str
    tunable: bool
    invocations: NonNegativeInt
    flops: NonNegativeInt
    bytes: NonNegativeInt = 0


class SplitTimingFile(StateFile):
    phase: str
    host: str
    seconds: Seconds


class SplitVariantFile(StateFile):
    label: str
    specs: list[InsidePath]
    spec: InsidePath
    status: str
    reason: str = ""
    outputs_match: bool | None = None
    confirmed: bool = False
    speedup: float | None = None
    speedup_low: float | None = None
    speedup_high: float | None = None
    verdict: str = ""
    why: str = ""
    first_speedup: float | None = None


class SplitFlagsFile(StateFile):
    """The flag phase of a split run, sub-step by sub-step: the sets compiled and sorted by
    hash (`trials`), the round trip that timed them (`round_trip`, 0 before), the verdict
    (`decided`, the winner's trial id or None: the defaults stay)."""

    searched: bool
    why: str = ""
    trials: list[FlagTrial] = []
    round_trip: NonNegativeInt = 0
    decided: bool = False
    winner: NonNegativeInt | None = None
    notes: list[str] = []


class SplitStateFile(StateFile):
    """split.json: where a split run stands and what each finished sub-step left."""

    format: str
    phase: SplitStage
    round_trip: NonNegativeInt
    options: ModelOptionsFile
    devices: list[str]
    done_steps: list[str]
    # Dispatch problem -> its benchmark folder ("" when it could not be compiled).
    folders: dict[str, InsidePath]
    model: SplitModelFile | None = None
    dispatches: list[SplitDispatchFile] = []
    device_manifest_sha256: str | None = None
    timings: list[SplitTimingFile] = []
    profile: ProfileResultsFile | None = None
    folder_outcomes: dict[str, str] = {}
    notes: list[str] = []
    dispatch_notes: dict[str, str] = {}
    variants: list[SplitVariantFile] = []
    winner: str | None = None
    rule: str = ""
    # Absent in a folder written before the flag phase ran in the split flow.
    flags: SplitFlagsFile | None = None

    @model_validator(mode="after")
    def _check_numbers(self) -> SplitStateFile:
        check_option_numbers(self.options, "options")
        return self


def new_state(options: ModelTuneOptions, devices: list[str]) -> SplitStateFile:
    """Return the state of a new split run, before any of its sub-steps."""
    return SplitStateFile(
        format=STATE_FORMAT, phase=SplitStage.PREPARING, round_trip=0,
        options=validate_record(Path(STATE_NAME), ModelOptionsFile, options_to_json(options)),
        devices=devices, done_steps=[], folders={},
        flags=SplitFlagsFile(
            searched=options.search_flags, why="" if options.search_flags else "--no-flag-search"
        ),
    )  # fmt: skip


def read_state(run_dir: Path) -> SplitStateFile:
    """Read a split run's state (format, then every field)."""
    path = run_dir / STATE_NAME
    if not run_dir.is_dir():
        raise IreetuneError(f"run folder not found: {run_dir}")
    if not path.is_file():
        raise IreetuneError(
            f"{run_dir} is not a split model run (no {STATE_NAME}); start one with "
            "`ireetune tune MODEL --stop-after compile`"
        )
    state = read_json_file(path)
    check_format(path, state, STATE_FORMAT, "file")
    options = state.get("options") if isinstance(state, dict) else None
    if isinstance(options, dict):
        # A folder written before the split flow searched flags has no flag options: it was
        # not searched.
        options.setdefault("search_flags", False)
    return validate_record(path, SplitStateFile, state, run_dir)


def save_state(run_dir: Path, state: SplitStateFile) -> None:
    """Write the state, checked against the model its reader uses. A field never set and still
    at its default is left out, as the sub-step that sets it has not run (`flags` is absent in
    a folder written before the split flow's flag phase)."""
    document = {
        name: value
        for name, value in state.model_dump(mode="json").items()
        if name in state.model_fields_set
        or getattr(state, name)
        != SplitStateFile.model_fields[name].get_default(call_default_factory=True)
    }
    write_text_atomically(run_dir / STATE_NAME, dump_document(SplitStateFile, document))


def options_to_json(options: ModelTuneOptions) -> dict[str, Any]:
    """Return the run's options as split.json holds them."""
    return dump_record(ModelTuneOptions, options)
