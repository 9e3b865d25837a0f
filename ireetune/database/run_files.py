"""One reading path for the JSON files a run folder holds, read as untrusted data.

A run folder travels: it is copied to a benchmarking host and back, and a user may be handed
one. Every JSON file in it is read here, through the same three checks, before any field is
used:

1. size: a file over its limit is refused before a byte of it is parsed;
2. depth: nesting deeper than a small limit is refused by scanning the text without recursion
   (the standard parser would end in a RecursionError on a crafted file);
3. fields: a typed model (pydantic) checks each field's type and bounds, and every path it names
   must stay inside the folder (relative, no `..`, no symlink that leads out).

Each refusal is one line that names the file and the field. Runtime-only: nothing here imports
the IREE compiler or z3 (`benchmark-folder` runs on hosts with only the runtime and NumPy).
"""

from __future__ import annotations

import dataclasses
import json
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    GetPydanticSchema,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic.dataclasses import dataclass as pydantic_dataclass
from pydantic_core import core_schema

from ireetune.benchmark.campaign import CampaignResult, CandidateMeasurement, DeviceBaseline
from ireetune.benchmark.runner import BenchmarkStatus
from ireetune.benchmark.timing import TimingKind
from ireetune.core.candidate import Knobs, make_knobs
from ireetune.core.errors import IreetuneError
from ireetune.core.fields import NonNegativeInt, Seconds
from ireetune.core.input_files import measure_depth
from ireetune.core.records import RESULTS_FORMAT, CandidateRecord
from ireetune.core.run_dir import is_inside_folder
from ireetune.decision.stats import Basis

# The largest file of a real run folder is a results.json of some thousands of candidates with
# their timings: a few megabytes.
MAX_FILE_BYTES = 64 * 2**20
# Our own files nest at most about eight levels (a campaign's rounds of timings in a report).
MAX_DEPTH = 32
# Bounds on the counts a folder may claim, so a tampered number cannot make us allocate.
MAX_CANDIDATE_ID = 2**31 - 1
MAX_BATCH = 2**31 - 1

ModelT = TypeVar("ModelT", bound="FileModel")
RecordT = TypeVar("RecordT")


class RunFileError(IreetuneError, ValueError):
    """A run folder's file that is too big, too deep, not JSON or not of its model.

    A ValueError too, so the runtime-only readers that turn ValueError into one line (the
    manifest's) handle it the same way.
    """


def read_json_text(path: Path, max_bytes: int = MAX_FILE_BYTES, max_depth: int = MAX_DEPTH) -> str:
    """Return the text of a run folder's JSON file after its size and depth checks."""
    try:
        # A named pipe would block the open below, a device would never end: plain files only.
        if not stat.S_ISREG(path.stat().st_mode):
            raise RunFileError(f"cannot read {path}: not a plain file")
        with path.open("rb") as handle:
            size = handle.seek(0, 2)
            if size > max_bytes:
                raise RunFileError(
                    f"{path} is {size} bytes, more than the {max_bytes} a run folder's file may hold"
                )
            handle.seek(0)
            raw = handle.read(max_bytes + 1)
    except FileNotFoundError:
        raise RunFileError(f"{path} is missing") from None
    except IsADirectoryError:
        raise RunFileError(f"cannot read {path}: it is a folder") from None
    except OSError as error:
        raise RunFileError(f"cannot read {path}: {error.strerror}") from None
    if len(raw) > max_bytes:
        raise RunFileError(
            f"{path} is more than the {max_bytes} bytes a run folder's file may hold"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise RunFileError(f"cannot read {path}: not UTF-8 text ({error.reason})") from None
    if measure_depth(text, max_depth) > max_depth:
        raise RunFileError(
            f"{path} nests deeper than {max_depth} levels: not a file ireetune wrote"
        )
    return text


def read_json_file(path: Path, max_bytes: int = MAX_FILE_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """Read a run folder's JSON file (size and depth checked); return the parsed value."""
    text = read_json_text(path, max_bytes, max_depth)
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise RunFileError(f"cannot read {path}: {error}") from None
    except RecursionError:
        # Unreachable after the depth scan; kept so no parser path can end in a traceback.
        raise RunFileError(f"{path} nests too deeply: not a file ireetune wrote") from None


def read_json_object(path: Path, max_bytes: int = MAX_FILE_BYTES) -> dict[str, Any]:
    """Read a run folder's JSON file that must hold one object."""
    document = read_json_file(path, max_bytes)
    if not isinstance(document, dict):
        raise RunFileError(f"{path} does not hold a JSON object")
    return document


# What a JSON user reads for pydantic's error types (the rest keep pydantic's own words).
_PHRASES = {
    "missing": "is missing",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "finite_number": "must be a finite number",
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "list_type": "must be an array",
    "tuple_type": "must be an array",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    # A record declared once as a dataclass and validated by pydantic directly (the profiler's
    # manifest entries) reports a non-object under this name.
    "dataclass_type": "must be an object",
    "extra_forbidden": "is not a field of this file",
    "unexpected_keyword_argument": "is not a field of this file",
}

# The bounds a value broke: pydantic's error type -> (the words, with the bound's place; the
# bound's name in the error's context).
_BOUNDS = {
    "greater_than_equal": ("must be at least {:g}", "ge"),
    "greater_than": ("must be more than {:g}", "gt"),
    "less_than_equal": ("must be at most {:g}", "le"),
    "string_too_short": ("must have at least {} characters", "min_length"),
    "string_too_long": ("must have at most {} characters", "max_length"),
    "too_short": ("must hold at least {} items", "min_length"),
}


def _phrase(error: Mapping[str, Any]) -> str:
    """Say what is wrong with one field, in the words of the JSON file."""
    kind = error["type"]
    context = error.get("ctx") or {}
    if kind in _PHRASES:
        return _PHRASES[kind]
    if kind == "value_error":
        return str(context.get("error", error["msg"]))
    if kind in _BOUNDS:
        template, name = _BOUNDS[kind]
        return template.format(context[name])
    if kind in ("enum", "literal_error"):
        return f"must be {context.get('expected', 'one of the known values')}"
    message = str(error["msg"])
    return message[:1].lower() + message[1:]


def describe_validation_error(path: Path, error: ValidationError) -> str:
    """Turn pydantic's report into one line: the file, the first bad field and what is wrong."""
    first = error.errors(include_url=False)[0]
    # A union's member names (`int`, `str`) are pydantic's, not the file's: leave them out.
    parts = [part for part in first["loc"] if part not in ("int", "str", "float", "[key]")]
    field = "".join(
        f"[{part}]"
        if isinstance(part, int)
        else f".{part}"
        if part.isidentifier()
        else f"[{json.dumps(part)}]"
        for part in parts
    )
    value = first.get("input")
    got = ""
    if value is None or isinstance(value, str | int | float | bool):
        shown = json.dumps(value)
        got = f", got {shown if len(shown) <= 200 else shown[:197] + '...'}"
    where = f"{field.lstrip('.')} " if field else ""
    return f"{path}: {where}{_phrase(first)}{got}"


# Each declaration's validator, built once: building one reads the whole type.
_ADAPTERS: dict[type, TypeAdapter[Any]] = {}


def _adapter(record_type: type[RecordT]) -> TypeAdapter[RecordT]:
    """Return the validator of a declaration (a FileModel, or a dataclass whose fields carry
    their checks)."""
    adapter = _ADAPTERS.get(record_type)
    if adapter is None:
        adapter = _ADAPTERS[record_type] = TypeAdapter(record_type)
    return adapter


def validate_record(
    path: Path, record_type: type[RecordT], document: object, run_dir: Path | None = None
) -> RecordT:
    """Check an already read document against its declaration (a FileModel, or a dataclass
    whose fields carry their checks); paths are confined to `run_dir`."""
    try:
        # Validated from JSON text: strict mode then takes enums from their values and arrays
        # for tuples, and still refuses "5" for 5 and true for 1.
        return _adapter(record_type).validate_json(
            json.dumps(document), strict=True, context={"run_dir": run_dir}
        )
    except ValidationError as error:
        raise RunFileError(describe_validation_error(path, error)) from None


def validate_document(
    path: Path, model: type[ModelT], document: object, run_dir: Path | None = None
) -> ModelT:
    """Check an already read document against its model (its format first, where the model
    names one); paths are confined to `run_dir`."""
    if model.FORMAT:
        check_format(path, document, model.FORMAT, "file", unversioned=True)
    return validate_record(path, model, document, run_dir)


def read_model_file(
    path: Path, model: type[ModelT], run_dir: Path | None = None, max_bytes: int = MAX_FILE_BYTES
) -> ModelT:
    """Read a run folder's JSON file into its typed model (size, depth and fields checked)."""
    return validate_document(path, model, read_json_file(path, max_bytes), run_dir)


def read_versioned_file(
    path: Path,
    record_type: type[RecordT],
    expected: str,
    kind: str,
    run_dir: Path,
    max_bytes: int = MAX_FILE_BYTES,
) -> RecordT:
    """Read a run folder's JSON file that must name its format `expected` (`kind` names the file
    in the refusal) into its typed declaration."""
    document = read_json_file(path, max_bytes)
    check_format(path, document, expected, kind)
    return validate_record(path, record_type, document, run_dir)


def check_format(
    path: Path, document: object, expected: str, kind: str, unversioned: bool = False
) -> None:
    """Refuse a file that is not of format `expected` ("name/version"), in one line.

    A file of the same name but another version says both versions, so a folder written by
    another ireetune is refused for what it is. `unversioned`: a file without a format field was
    written before the field existed, in the layout of version 1, and is read as version 1.
    """
    name, _, version = expected.rpartition("/")
    found = document.get("format") if isinstance(document, dict) else None
    if found is None and unversioned and isinstance(document, dict):
        if version != "1":
            raise RunFileError(
                f"{path} has no format version (written before version {version}); this "
                f"ireetune reads {expected}: write the folder again with this ireetune"
            )
        return
    if found == expected:
        return
    if isinstance(found, str) and found.rpartition("/")[0] == name:
        raise RunFileError(
            f"{path} has format {found}, written by another ireetune; this one reads "
            f"{expected}: write the folder again with this ireetune"
        )
    raise RunFileError(f"{path} is not a {expected} {kind}")


def dump_document(record_type: type[object], document: Mapping[str, Any]) -> str:
    """Return `document` as JSON text after checking it against the declaration its reader uses.

    The writer and the reader share one definition of the file: what is written is what will be
    read back. A document that fails its declaration is a defect of ours, so the error is not
    turned into a user's one-line message.
    """
    text = json.dumps(document, indent=2) + "\n"
    _adapter(record_type).validate_json(text, strict=True)
    return text


def dump_record(record_type: type[RecordT], record: RecordT) -> dict[str, Any]:
    """Return a record as its file holds it: JSON values, fields in order, by their file names."""
    dumped: dict[str, Any] = _adapter(record_type).dump_python(record, mode="json", by_alias=True)
    return dumped


def check_inside_run_dir(value: str, info: ValidationInfo) -> str:
    """Accept "" (no file) or a relative path that resolves inside the run folder."""
    run_dir = (info.context or {}).get("run_dir")
    if not value:
        return value
    relative = Path(value)
    if relative.is_absolute() or ".." in relative.parts:
        raise ValueError("must be a path inside the run folder")
    if run_dir is not None and not is_inside_folder(run_dir, value):
        raise ValueError("leads outside the run folder")
    return value


# A path a folder's file names: relative, and inside the folder once symlinks are followed.
InsidePath = Annotated[str, AfterValidator(check_inside_run_dir)]
CandidateId = Annotated[int, Field(ge=0, le=MAX_CANDIDATE_ID)]
Count = Annotated[int, Field(ge=0, le=MAX_BATCH)]
Times = tuple[float, ...]


class FileModel(BaseModel):
    """A file that crosses a boundary: typed, strict (no "5" for 5, no true for 1), immutable;
    fields a newer writer added are ignored."""

    model_config = ConfigDict(frozen=True, strict=True, extra="ignore")

    # The "name/version" a file of this model carries in its `format` field (checked before its
    # fields); "" for the parts of a file and the files whose reader checks the format itself.
    FORMAT: ClassVar[str] = ""


# results.json of a dispatch run (report/recorder.py writes it).


def _knobs_from_mapping(knobs: dict[str, int | str] | None) -> Knobs | None:
    return make_knobs(knobs) if knobs is not None else None


# A candidate's knobs as results.json holds them: an object of names to values, checked as
# such (so a bad value is named by its knob) and then frozen into the record's sorted pairs.
FileKnobs = Annotated[
    Knobs | None,
    GetPydanticSchema(
        lambda _source, handler: core_schema.no_info_after_validator_function(
            _knobs_from_mapping, handler(dict[str, int | str] | None)
        )
    ),
]


# The record's own declaration serves the file: pydantic validates the dataclass's fields, and
# this subclass only narrows the ones the file checks further (ids and counts within bounds,
# paths inside the folder, knobs from their JSON object).
@pydantic_dataclass(frozen=True, config=ConfigDict(strict=True, extra="forbid"))
class CandidateRecordFile(CandidateRecord):
    """One candidate of results.json: a CandidateRecord, checked as untrusted data."""

    candidate_id: CandidateId
    knobs: FileKnobs
    spec_path: InsidePath = ""
    binary_path: InsidePath = ""
    batch: Count = dataclasses.field(default=0, kw_only=True)


class DecisionFile(FileModel):
    """The run-level verdict in results.json: what `replay` re-measures."""

    winner: CandidateId | None = None
    basis: Basis | None = None


class TimeBudgetFile(FileModel):
    """results.json's `time_budget` (flows/dispatch/budget.py): the run's `--time-budget`, the
    seconds it spent, whether the budget ended it and the candidates it started."""

    budget_s: Seconds
    spent_s: Seconds
    ended_run: bool
    tried: NonNegativeInt


class DispatchRunFile(FileModel):
    """A dispatch run's results.json: the run's facts and every candidate."""

    FORMAT: ClassVar[str] = RESULTS_FORMAT

    candidates: tuple[CandidateRecordFile, ...]
    devices: tuple[str, ...] = ()
    timing_basis: Basis | None = None
    decision: DecisionFile | None = None
    time_budget: TimeBudgetFile | None = None


# benchmark_results.json (flows/handoff/benchmark_folder.py writes it; `finish` reads it).


class DeviceBaselineFile(FileModel):
    device: str
    batch: Count
    before_ms: Times
    after_ms: Times
    confirmed_ms: Times
    drift: float | None
    error: str = ""
    confirmed_rounds_ms: tuple[Times, ...] = ()
    timing: TimingKind | None = None
    brackets_ms: tuple[Times, ...] = ()

    @model_validator(mode="after")
    def _check_measured(self) -> DeviceBaselineFile:
        if not self.error and not (self.confirmed_ms or self.before_ms + self.after_ms):
            raise ValueError("a baseline without an error must hold its times")
        return self


class MeasurementFile(FileModel):
    candidate_id: CandidateId
    device: str
    status: BenchmarkStatus
    reason: str
    times_ms: Times
    speedup: float | None
    stopped_early: bool
    confirmed: bool
    rounds_ms: tuple[Times, ...] = ()
    timing: TimingKind | None = None
    batch: Count = 0
    reference_ms: Times = ()

    @model_validator(mode="after")
    def _check_measured(self) -> MeasurementFile:
        if self.status is BenchmarkStatus.MEASURED and not self.times_ms:
            raise ValueError("a measured candidate must hold its times")
        return self


class CampaignFile(FileModel):
    """A measuring campaign as benchmark/campaign.py's `campaign_to_json` writes it."""

    baselines: tuple[DeviceBaselineFile, ...]
    candidates: tuple[MeasurementFile, ...]
    notes: tuple[str, ...] = ()
    seconds: float
    measured_per_second: float = 0.0


def campaign_from_file(stored: CampaignFile) -> CampaignResult:
    """Rebuild a campaign's result from its checked file form (whose fields are the records')."""
    baselines = {b.device: DeviceBaseline(**dict(b)) for b in stored.baselines}
    candidates = {c.candidate_id: CandidateMeasurement(**dict(c)) for c in stored.candidates}
    return CampaignResult(
        baselines, candidates, stored.notes, stored.seconds, stored.measured_per_second
    )


class VerdictFile(FileModel):
    """One contender's output check: `verified` (compared, equal), `wrong` (compared, differ)
    or `unverified` (not compared: no reference program, or one that did not run or is the
    default's own binary; older folders wrote `wrong` for a reference that did not build)."""

    status: Literal["verified", "wrong", "unverified"]
    reason: str = ""
    max_abs_error: float | None = None

    @property
    def outputs_match(self) -> bool | None:
        """Say whether the outputs equal the default's; None where they were not compared."""
        return {"verified": True, "wrong": False}.get(self.status)


class RealInputTimingsFile(FileModel):
    repetitions: Annotated[int, Field(ge=1, le=10**6)]
    times_ms: dict[str, Times]


class VerificationFile(FileModel):
    verdicts: dict[str, VerdictFile] = {}
    pending: tuple[CandidateId, ...] | None = None
    baseline_error: str | None = None
    model_level_baseline_ms: float | None = None
    real_input_timings: RealInputTimingsFile | None = None

    def verdict_ids(self) -> Iterator[int]:
        """Yield the candidate ids the verdicts name (their keys are decimal ids)."""
        for key in self.verdicts:
            yield int(key)


class BenchmarkResultsFile(FileModel):
    """benchmark_results.json: the campaign, the contenders and their output checks."""

    FORMAT: ClassVar[str] = "ireetune-benchmark-results/1"

    devices: tuple[str, ...]
    campaign: CampaignFile
    contenders: tuple[CandidateId, ...] = ()
    verification: VerificationFile = VerificationFile()
    baseline_ms_by_device: dict[str, float] = {}
    manifest_sha256: str | None = None
    # The last stage saved: "measure" (timed, output checks not run or cut short) or "check"
    # (complete). A file without it was written complete, by an older version.
    stage: Literal["measure", "check"] = "check"


def check_id_keys(path: Path, field: str, keys: Mapping[str, object]) -> None:
    """Refuse an object keyed by candidate ids whose keys are not decimal ids."""
    for key in keys:
        if not key.isdigit() or int(key) > MAX_CANDIDATE_ID:
            raise RunFileError(f"{path}: {field} has a key that is not a candidate id: {key!r}")
