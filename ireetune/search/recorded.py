"""Recorded spaces: large measured samples of one problem's search space, with provenance.

A recorded space is what a tuning run with the random order measured, kept compactly so that
orderings and cost models can be evaluated and trained without a device (bench/ordering_eval.py)
and the dataset can live in the repository (data/spaces/). One gzipped JSON file per problem:

    {"format": "ireetune-recorded-space", "version": 1, "name": "matmul_256x384x512_f32",
     "target": "cpu#3f2a...", "target_name": "cpu", "device": "local-task (AMD EPYC, 2 cores)",
     "problem": {<the problem record's fields, as in the database key>},
     "facts": {<what the target's features need to know about the machine>},
     "provenance": {"machine": ..., "date": ..., "compiler_version": ..., "load_average_before": ...},
     "knob_names": ["dist_m", "dist_n", "vec_k", "vec_m", "vec_n"],
     "baseline": {"knobs": [64, 64, 16, 8, 16], "status": "measured", "min_ms": 1.60,
                  "median_ms": 1.71, "speedup": 1.0, "confirmed": true, "binary": "3a5700b8..."},
     "columns": ["knobs", "status", "min_ms", "median_ms", "speedup", "confirmed", "binary"],
     "rows": [[[259, 16, 2, 7, 16], "measured", 2.14, 2.17, 0.79, false, "f95f1d60..."], ...],
     "remeasured": {"3a5700b8...": [1.61, 1.63, 1.60, 1.64, 1.62], ...}}

`min_ms` and `median_ms` summarise the candidate's repetitions: those of the first pass, or,
for the leaders re-timed in interleaved rounds with the default (`confirmed`), those of the
rounds. `speedup` is what the tuner reported, against the default timed alongside. Replays rank
by `min_ms`: on a shared machine other jobs only ever slow a repetition down, so the fastest
repetition is the estimate they disturb least (on the 2-core development machine the default's
median moved 61% between the first and the last minutes of one recording, and speedups against
it moved with it). `binary` is the first 16 hex digits of the compiled binary's hash: a
`duplicate` row costs no benchmark and runs as fast as the measured row with the same binary; a
`not-applied` row runs the default's binary. GPU spaces use the same format with their own
knob names and facts.

**Re-measured leaders (version 2).** One pass of repetitions per candidate leaves the top of a
sample partly to luck: on a loaded machine the fastest candidate was often a single lucky timing.
`bench/remeasure_spaces.py` therefore times the leading binaries of a sample (and the default's)
again in several rounds, each round in a fresh shuffled order, so that every leader meets the
same disturbances. `remeasured` maps a binary's hash to its fastest repetition in each round, and
the provenance's `remeasure` entry says when, how and which binaries. A re-measured binary's
time is its fastest repetition over all rounds: other jobs only ever slow a repetition down, so
the more repetitions a binary gets, the nearer its fastest comes to its undisturbed time, and
every leader gets the same number in the same rounds. (The median of the rounds would keep
whatever disturbed most rounds: on the loaded development machine round-to-round spreads were
60-150%.) Leaders thereby get more chances than the rest of the sample, which kept their first
pass; the selection (`select_leaders`, bench/space_files.py) keeps every binary within a margin of the best, so what is
left out was well behind. Version 1 files (no `remeasured`) still read.
"""

from __future__ import annotations

import gzip
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ireetune.core.candidate import Knobs, make_knobs
from ireetune.core.errors import IreetuneError
from ireetune.core.input_files import check_input_folder, parse_input_json, read_input_bytes
from ireetune.core.records import CandidateStatus, status_values
from ireetune.problem.root_op import Problem, problem_from_fields

FORMAT_NAME = "ireetune-recorded-space"
FORMAT_VERSION = 2
READABLE_VERSIONS = frozenset({1, 2})
COLUMNS = ("knobs", "status", "min_ms", "median_ms", "speedup", "confirmed", "binary")
# A row whose binary is another's (a duplicate, or the default's): it runs in that one's time.
_DUPLICATE_OF_ANOTHER = status_values({CandidateStatus.DUPLICATE, CandidateStatus.NOT_APPLIED})

FactValue = int | float | str


@dataclass(frozen=True)
class RecordedRow:
    """One candidate of a recorded space: its knobs, its fate and its first-pass time."""

    knobs: Knobs
    status: str
    min_ms: float | None
    median_ms: float | None = None
    speedup: float | None = None
    confirmed: bool = False
    binary: str = ""


@dataclass(frozen=True)
class RecordedSpace:
    """A measured sample of one problem's space on one target and machine."""

    name: str
    target: str
    device: str
    problem: Problem
    facts: Mapping[str, FactValue]
    provenance: Mapping[str, object]
    rows: tuple[RecordedRow, ...]
    baseline: RecordedRow | None = None
    target_name: str = "cpu"
    knob_names: tuple[str, ...] = field(default=())
    # A binary's fastest repetition in each round of re-measurement (bench/remeasure_spaces.py).
    remeasured: Mapping[str, tuple[float, ...]] = field(default_factory=dict)

    def effective_times(self, use_remeasured: bool = True) -> list[float | None]:
        """Return each row's time (ms) as the tuner would see it (None where nothing runs): the
        fastest of its binary's re-measured rounds where there are some (unless `use_remeasured`
        is false), else its first pass's fastest repetition, scaled by `conditions_factor` so
        that both describe the machine as the re-measurement found it.

        A duplicate runs as fast as the measured row with its binary; a config that did not apply
        runs the default's binary.
        """
        by_binary: dict[str, float] = {}
        for row in (*self.rows, *(() if self.baseline is None else (self.baseline,))):
            if row.binary and row.min_ms is not None:
                by_binary.setdefault(row.binary, row.min_ms)
        factor = 1.0
        if use_remeasured and self.remeasured:
            factor = self.conditions_factor()
            by_binary = {binary: time * factor for binary, time in by_binary.items()}
            by_binary.update(self.remeasured_times())
        times: list[float | None] = []
        for row in self.rows:
            time = None if row.min_ms is None else row.min_ms * factor
            if row.binary in by_binary and (
                time is not None or row.status in _DUPLICATE_OF_ANOTHER
            ):
                time = by_binary[row.binary]
            times.append(time)
        return times

    def conditions_factor(self) -> float:
        """Return how much slower the re-measured binaries ran than in their first pass (the
        median ratio; 1.0 without a re-measurement).

        The first pass and the re-measurement may find the shared machine under very different
        load (a 2-thread dispatch on 2 busy cores runs 2-3x slower), so the rest of the sample is
        scaled by this factor to be compared with the leaders. The leaders were chosen for fast
        first passes, so the factor errs high, which keeps the rest behind them.
        """
        first: dict[str, float] = {}
        for row in (*self.rows, *(() if self.baseline is None else (self.baseline,))):
            if row.binary and row.min_ms is not None:
                first[row.binary] = min(row.min_ms, first.get(row.binary, row.min_ms))
        ratios = [
            time / first[binary]
            for binary, time in self.remeasured_times().items()
            if binary in first
        ]
        return statistics.median(ratios) if ratios else 1.0

    def remeasured_times(self) -> dict[str, float]:
        """Return each re-measured binary's time: its fastest repetition over all rounds."""
        return {binary: min(rounds) for binary, rounds in self.remeasured.items() if rounds}


def finite_number(value: object) -> float | None:
    """Return a positive finite time as a float; anything else reads as not measured (None)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and number > 0 else None


# The file's typed model. Rows are positional (COLUMNS); their time and status columns are read
# leniently, as they always were (a time that is not a positive number reads as "not measured").
KnobValues = list[Annotated[int, Field(strict=True)] | Annotated[str, Field(strict=True)]]
Row = tuple[KnobValues, Any, Any, Any, Any, Any, Any]
PositiveTime = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class RecordedSpaceFile(BaseModel):
    """A recorded space's JSON form (format and version checked before it)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    name: Any = ""
    target: Any = ""
    target_name: Any = "cpu"
    device: Any = ""
    problem: dict[str, Any]
    facts: dict[str, Any]
    provenance: dict[str, Any]
    knob_names: list[Annotated[str, Field(strict=True)]]
    baseline: dict[str, Any] | None = None
    rows: list[Row]
    remeasured: dict[str, list[Annotated[PositiveTime, Field(strict=True)]]] = {}

    @model_validator(mode="after")
    def _check_knob_counts(self) -> RecordedSpaceFile:
        rows = [*self.rows, *([] if self.baseline is None else [self._baseline_row()])]
        if any(len(row[0]) != len(self.knob_names) for row in rows):
            raise ValueError(f"a row's knobs must list {len(self.knob_names)} values")
        return self

    def _baseline_row(self) -> Row:
        assert self.baseline is not None
        knobs = self.baseline.get("knobs")
        if not isinstance(knobs, list):
            raise ValueError(f"a row's knobs must list {len(self.knob_names)} values")
        if not all(isinstance(v, int | str) and not isinstance(v, bool) for v in knobs):
            raise ValueError("knob values must be integers or text")
        values = [self.baseline.get(column) for column in COLUMNS[1:]]
        return (knobs, *values)  # type: ignore[return-value]


def _describe_space_error(error: ValidationError, knob_count: int) -> str:
    """Word the first of a recorded space's problems as the refusal names it."""
    first = error.errors(include_url=False)[0]
    location = first["loc"]
    if first["type"] == "value_error":
        return str(first["ctx"]["error"])
    if location[0] == "rows" and (
        len(location) == 2 or first["type"] in ("missing", "too_long", "too_short")
    ):
        return f"a row must be a list of {len(COLUMNS)} values"
    if location[0] == "rows" and len(location) == 3:
        return f"a row's knobs must list {knob_count} values"
    if location[0] == "rows":
        return "knob values must be integers or text"
    return {
        "knob_names": "knob_names must be a list of names",
        "rows": "rows must be a list",
        "problem": "problem must be an object",
        "facts": "facts and provenance must be objects",
        "provenance": "facts and provenance must be objects",
        "baseline": "baseline must be an object or null",
        "remeasured": "remeasured must map binaries to lists of positive times",
    }[str(location[0])]


def _decode_row(values: Row, knob_names: Sequence[str]) -> RecordedRow:
    knob_values, status, min_ms, median_ms, speedup, confirmed, binary = values
    return RecordedRow(
        knobs=make_knobs(dict(zip(knob_names, knob_values, strict=True))),
        status=str(status),
        min_ms=finite_number(min_ms),
        median_ms=finite_number(median_ms),
        speedup=finite_number(speedup),
        confirmed=confirmed is True,
        binary=str(binary or ""),
    )


def decode_recorded_space(data: object, where: str) -> RecordedSpace:
    """Read the JSON form back, checking its format; `where` names the source in errors."""
    if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
        raise IreetuneError(f"{where} is not a recorded space ({FORMAT_NAME})")
    if data.get("version") not in READABLE_VERSIONS:
        raise IreetuneError(
            f"{where}: recorded-space version {data.get('version')!r} is not one of "
            f"{sorted(READABLE_VERSIONS)}"
        )
    try:
        stored = RecordedSpaceFile.model_validate(data)
    except ValidationError as error:
        names = data.get("knob_names")
        count = len(names) if isinstance(names, list) else 0
        raise IreetuneError(f"{where}: {_describe_space_error(error, count)}") from None
    knob_names = tuple(stored.knob_names)
    return RecordedSpace(
        name=str(stored.name),
        target=str(stored.target),
        target_name=str(stored.target_name),
        device=str(stored.device),
        problem=problem_from_fields(stored.problem),
        facts=stored.facts,
        provenance=stored.provenance,
        rows=tuple(_decode_row(row, knob_names) for row in stored.rows),
        baseline=None
        if stored.baseline is None
        else _decode_row(stored._baseline_row(), knob_names),
        knob_names=knob_names,
        remeasured={binary: tuple(rounds) for binary, rounds in stored.remeasured.items()},
    )


def load_recorded_space(path: Path) -> RecordedSpace:
    """Read one `*.json.gz` (or plain `*.json`) recorded space."""
    raw = read_input_bytes(path, "recorded space")
    try:
        text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode("utf-8")
    except (OSError, EOFError, gzip.BadGzipFile, UnicodeDecodeError) as error:
        raise IreetuneError(f"cannot read recorded space {path}: {error}") from None
    data = parse_input_json(text, path, "recorded space")
    return decode_recorded_space(data, str(path))


def load_recorded_spaces(folder: Path) -> list[RecordedSpace]:
    """Read every recorded space under `folder` (recursively), sorted by name."""
    check_input_folder(folder, "folder of recorded spaces")
    paths = sorted({*folder.rglob("*.json.gz"), *folder.rglob("*.json")})
    if not paths:
        raise IreetuneError(f"{folder} holds no recorded spaces (*.json.gz)")
    return sorted((load_recorded_space(path) for path in paths), key=lambda s: s.name)
