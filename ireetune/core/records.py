"""The record of one candidate's fate, and its CSV and JSON forms."""

from __future__ import annotations

import csv
import enum
import io
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ireetune.core.candidate import Knobs, format_knobs
from ireetune.core.files import write_text_atomically

# The format of a dispatch run's results.json (run_files.DispatchRunFile reads it); a file
# without the field was written before it existed, in this same layout.
RESULTS_FORMAT = "ireetune-dispatch-run/1"
# The formats of a model run's files (report/run_view.py reads them; same rule for old files).
MODEL_REPORT_FORMAT = "ireetune-model-report/1"
MODEL_PROFILE_FORMAT = "ireetune-model-profile/1"
FLAG_TRIALS_FORMAT = "ireetune-flag-trials/1"


class CandidateStatus(enum.Enum):
    """Where a candidate's journey ended (or stands, while the run is under way)."""

    GENERATED = "generated"
    COMPILED = "compiled"
    COMPILE_FAILED = "compile-failed"
    COMPILE_TIMED_OUT = "compile-timed-out"
    NOT_APPLIED = "not-applied"
    DUPLICATE = "duplicate"
    MEASURED = "measured"
    BENCHMARK_FAILED = "benchmark-failed"
    BENCHMARK_TIMED_OUT = "benchmark-timed-out"
    CRASHED = "crashed"
    DEVICE_ERROR = "device-error"
    VERIFIED = "verified"
    # A contender whose outputs were never compared with the default's: its reference program
    # did not build or run, or compiled to the default's own binary (the config did not apply
    # there). It is never the winner, yet nothing says its outputs differ.
    UNVERIFIED = "unverified"
    # A contender whose outputs were compared with the default's and differ.
    WRONG = "wrong"


# The statuses of a candidate whose timings were taken (the checks after them aside).
TIMED_STATUSES = frozenset(
    {
        CandidateStatus.MEASURED,
        CandidateStatus.VERIFIED,
        CandidateStatus.UNVERIFIED,
        CandidateStatus.WRONG,
    }
)
# The statuses of a candidate that did not build or did not run to its end: what a learned order
# learns to avoid.
FAILED_STATUSES = frozenset(
    {
        CandidateStatus.COMPILE_FAILED,
        CandidateStatus.COMPILE_TIMED_OUT,
        CandidateStatus.CRASHED,
        CandidateStatus.BENCHMARK_FAILED,
        CandidateStatus.BENCHMARK_TIMED_OUT,
    }
)
# The statuses after which a candidate needs no more work in a later run of the same command. A
# generated or compiled candidate is not measured yet, and a device error is the device's, not the
# candidate's: it is measured again.
FINAL_STATUSES = frozenset(CandidateStatus) - {
    CandidateStatus.GENERATED,
    CandidateStatus.COMPILED,
    CandidateStatus.DEVICE_ERROR,
}


def status_values(statuses: Iterable[CandidateStatus]) -> frozenset[str]:
    """Return the statuses as run files and database rows spell them."""
    return frozenset(status.value for status in statuses)


@dataclass(frozen=True, kw_only=True)
class CandidateChecks:
    """The decision stage's facts and conclusion about a candidate (ireetune/decision), the same
    in a run's records and in the database's rows: the speedup's confidence interval and what it
    was measured on, the confirmation rounds, the output check, the real-input check where the
    target decides there, and the verdict."""

    speedup_low: float | None = None
    speedup_high: float | None = None
    basis: str = ""
    confirmed: bool = False
    rounds_ms: tuple[tuple[float, ...], ...] = ()
    # True: compared and equal; False: compared and different; None: not compared (a record's
    # status says whether a comparison was due: `unverified` when it could not be made).
    outputs_match: bool | None = None
    real_input_speedup: float | None = None
    real_input_low: float | None = None
    real_input_high: float | None = None
    verdict: str = ""


CHECK_FIELDS = tuple(f.name for f in fields(CandidateChecks))
# The checks the check and decide stages write (the others come with the measurements).
DECISION_CHECKS = (
    "outputs_match",
    "real_input_speedup",
    "real_input_low",
    "real_input_high",
    "verdict",
)


def check_values(checks: CandidateChecks, names: Sequence[str] = CHECK_FIELDS) -> dict[str, Any]:
    """Return a record's checks (all, or those `names`) by name, to carry into another record or
    a database row."""
    return {name: getattr(checks, name) for name in names}


def place_checks_after(data: dict[str, Any], field_name: str) -> dict[str, Any]:
    """Return a record's `asdict` form with its checks (first there, as the base class's fields)
    moved after `field_name`, where the files have always had them."""
    placed: dict[str, Any] = {}
    for name, value in data.items():
        if name not in CHECK_FIELDS:
            placed[name] = value
        if name == field_name:
            placed.update((check, data[check]) for check in CHECK_FIELDS)
    return placed


@dataclass(frozen=True)
class CandidateRecord(CandidateChecks):
    """Everything known about one candidate. Candidate 0 is the compiler's default; its checks
    (the base class's fields, keyword-only) follow its timings in results.json."""

    candidate_id: int
    knobs: Knobs | None
    status: CandidateStatus
    heuristic_score: float | None = None
    reason: str = ""
    spec_path: str = ""
    binary_path: str = ""
    binary_hash: str = ""
    compile_seconds: float | None = None
    device: str = ""
    times_ms: tuple[float, ...] = field(default_factory=tuple)
    median_ms: float | None = None
    min_ms: float | None = None
    max_ms: float | None = None
    spread: float | None = None
    speedup: float | None = None
    stopped_early: bool = False
    max_abs_error: float | None = None
    # How the times were taken (benchmark/timing.py) and how many dispatches one timed call held.
    # Keyword-only, as the checks are: results.json holds these two after the checks, and
    # pydantic checks keyword-only fields after the others, so a file's candidates are checked
    # (and the first bad field named) in the order the file holds them.
    timing: str = field(default="", kw_only=True)
    batch: int = field(default=0, kw_only=True)

    @property
    def is_baseline(self) -> bool:
        return self.candidate_id == 0


def _cell(value: float | None, digits: int = 6) -> str:
    return "" if value is None else f"{value:.{digits}g}"


# Each CSV column, in order, and how a record fills it.
_CSV_CELLS: tuple[tuple[str, Callable[[CandidateRecord], str]], ...] = (
    ("candidate_id", lambda record: str(record.candidate_id)),
    ("is_baseline", lambda record: "yes" if record.is_baseline else "no"),
    ("status", lambda record: record.status.value),
    ("reason", lambda record: record.reason),
    ("knobs", lambda record: format_knobs(record.knobs)),
    ("heuristic_score", lambda record: _cell(record.heuristic_score, 4)),
    ("median_ms", lambda record: _cell(record.median_ms)),
    ("min_ms", lambda record: _cell(record.min_ms)),
    ("max_ms", lambda record: _cell(record.max_ms)),
    ("spread", lambda record: _cell(record.spread, 3)),
    ("speedup", lambda record: _cell(record.speedup, 4)),
    ("speedup_low", lambda record: _cell(record.speedup_low, 4)),
    ("speedup_high", lambda record: _cell(record.speedup_high, 4)),
    ("basis", lambda record: record.basis),
    (
        "outputs_match",
        lambda record: "" if record.outputs_match is None else str(record.outputs_match).lower(),
    ),
    ("real_input_speedup", lambda record: _cell(record.real_input_speedup, 4)),
    ("real_input_low", lambda record: _cell(record.real_input_low, 4)),
    ("real_input_high", lambda record: _cell(record.real_input_high, 4)),
    ("verdict", lambda record: record.verdict),
    ("repetitions", lambda record: str(len(record.times_ms))),
    ("timing", lambda record: record.timing),
    ("batch", lambda record: str(record.batch) if record.batch else ""),
    ("stopped_early", lambda record: "yes" if record.stopped_early else "no"),
    ("device", lambda record: record.device),
    ("compile_seconds", lambda record: _cell(record.compile_seconds, 3)),
    ("binary_hash", lambda record: record.binary_hash[:16]),
    ("max_abs_error", lambda record: _cell(record.max_abs_error, 3)),
    ("spec_path", lambda record: record.spec_path),
)
CSV_COLUMNS = tuple(name for name, _ in _CSV_CELLS)


def render_csv(records: Sequence[CandidateRecord]) -> str:
    """Render records as CSV text, one row per candidate in id order."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for record in sorted(records, key=lambda r: r.candidate_id):
        writer.writerow({name: cell(record) for name, cell in _CSV_CELLS})
    return buffer.getvalue()


def record_to_json(record: CandidateRecord) -> dict[str, Any]:
    """Return a JSON-ready dict of a record (knobs as a mapping, status as its value)."""
    data = place_checks_after(asdict(record), "max_abs_error")
    data["status"] = record.status.value
    data["knobs"] = dict(record.knobs) if record.knobs is not None else None
    data["times_ms"] = list(record.times_ms)
    data["rounds_ms"] = [list(r) for r in record.rounds_ms]
    return data


def write_results(path: Path, run_info: dict[str, Any], records: Sequence[CandidateRecord]) -> None:
    """Write results.json: the run's facts and every candidate's record."""
    payload = {
        **run_info,
        # After the run's facts: a folder read from an older file is written back as this one.
        "format": RESULTS_FORMAT,
        "candidates": [record_to_json(r) for r in sorted(records, key=lambda r: r.candidate_id)],
    }
    write_text_atomically(path, json.dumps(payload, indent=2) + "\n")


@dataclass(frozen=True)
class DispatchOutcome:
    """What happened to one hot dispatch of a model run (model_report.json's `dispatches`)."""

    name: str
    problem: str
    invocations: int
    share: float
    default_ms: float | None
    tuned_ms: float | None
    kept_spec: str | None
    note: str
