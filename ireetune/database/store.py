"""The tuning database: every candidate's fate, in SQLite, written as results arrive.

One row per (compiler version, target, device, problem, config). The key's parts are canonical
text: the problem as the JSON of its record, the config as the JSON of its sorted knobs (`null`
for the compiler's default). Each row keeps every check's outcome separately (dispatch-level
speedup with its interval, outputs equal, real-input speedup with its interval) and the verdict
that the decision rule named in `rule` reached; only a `winner` under the current rule, measured
here (`origin` = local), is ever reused. WAL mode and a busy timeout let several tuner processes
share one file; every write is its own short transaction, so a killed process loses at most the
row it was writing. The file's tables and their versions live in `database/schema.py`.
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import os
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ireetune.core.candidate import Knobs
from ireetune.core.errors import IreetuneError
from ireetune.core.records import CandidateChecks, CandidateStatus
from ireetune.database.schema import (
    connect_read_only,
    inspect_database_file,
    open_database,
    open_database_read_only,
    transaction,
)
from ireetune.decision.rules import Verdict
from ireetune.problem.root_op import Problem

logger = logging.getLogger(__name__)

DB_VARIABLE = "IREETUNE_DB"

LOCAL_ORIGIN = "local"
# Imported rows' origin: `imported:<file name>@<time>`.
IMPORTED_ORIGIN = "imported"

# Every status a row can have: a candidate is written once it is past generation.
WRITTEN_STATUSES = frozenset(
    status.value for status in CandidateStatus if status is not CandidateStatus.GENERATED
)
# A row's verdict under its rule; empty while undecided.
VERDICTS = frozenset(verdict.value for verdict in Verdict)


def default_database_path() -> Path:
    """Return $IREETUNE_DB, else the user's cache folder (XDG_CACHE_HOME or ~/.cache)."""
    if os.environ.get(DB_VARIABLE):
        return Path(os.environ[DB_VARIABLE])
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "ireetune" / "tuning.sqlite"


def compiler_version() -> str:
    """Name the installed compiler release without importing it (importlib metadata)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"iree-base-compiler {version('iree-base-compiler')}"
    except PackageNotFoundError:
        return "iree-base-compiler unknown"


def problem_key(problem: Problem) -> str:
    """Serialise a problem canonically: op, sizes, dims, element types and indexing maps."""
    return json.dumps(asdict(problem), sort_keys=True)


def config_key(knobs: Knobs | None) -> str:
    """Serialise a configuration canonically (`null` is the compiler's default)."""
    return json.dumps(None if knobs is None else dict(knobs), sort_keys=True)


def parse_config_key(text: str) -> Knobs | None:
    """Turn a stored config key back into knobs."""
    values = json.loads(text)
    return None if values is None else tuple(sorted(values.items()))


@dataclass(frozen=True)
class ResultKey:
    """Where a result applies: which compiler, target and device, for which problem."""

    compiler_version: str
    target: str
    device: str
    problem: str
    signature: str


@dataclass(frozen=True)
class StoredResult(CandidateChecks):
    """One row of the results table; its checks (the base class's fields, keyword-only) are the
    candidate record's, with the rule that reached the verdict."""

    key: ResultKey
    config: str
    compilation_info: str
    status: str
    reason: str
    times_ms: tuple[float, ...]
    median_ms: float | None
    min_ms: float | None
    max_ms: float | None
    spread: float | None
    baseline_ms: float | None
    speedup: float | None
    session: str
    written_at: str
    rule: str = ""
    origin: str = LOCAL_ORIGIN

    @property
    def knobs(self) -> Knobs | None:
        return parse_config_key(self.config)


def read_database_rows(path: Path) -> list[dict[str, object]]:
    """Read every results row of another ireetune database file as raw column values, through a
    read-only connection: the file is neither switched to WAL nor upgraded. The values are
    untrusted; the caller validates them."""
    if inspect_database_file(path) == 0:
        return []
    connection = connect_read_only(path)
    try:
        return list(_dicts(connection.execute("SELECT * FROM results ORDER BY rowid")))
    except sqlite3.Error as error:
        raise IreetuneError(f"cannot read {path} ({error})") from error
    finally:
        connection.close()


class TuningDatabase:
    """A connection to one database file; safe to use from several processes at once.

    An existing file is inspected read-only first; only an ireetune database of this or an older
    schema is then opened for writing (`database/schema.py`).
    """

    def __init__(self, path: Path, read_only: bool = False) -> None:
        """Open `path` for reading and writing (created if missing), or, with `read_only`, an
        existing database for reading only: nothing in or beside the file changes."""
        self.path = path
        self._connection = open_database_read_only(path) if read_only else open_database(path)

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> TuningDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def write(self, result: StoredResult) -> None:
        """Insert or replace one result, in its own transaction."""
        row = _row(result)
        with transaction(self._connection):
            self._connection.execute(
                f"INSERT OR REPLACE INTO results ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})",
                tuple(row.values()),
            )

    def lookup(self, key: ResultKey) -> dict[str, StoredResult]:
        """Return this problem's results measured here on this compiler, target and device, by
        config key. Imported rows are left out: they are candidates (`lookup_stale`), never
        results a run may resume from."""
        rows = self._connection.execute(
            "SELECT * FROM results WHERE compiler_version = ? AND target = ? AND device = ? "
            "AND problem = ? AND origin = ?",
            (key.compiler_version, key.target, key.device, key.problem, LOCAL_ORIGIN),
        )
        return {result.config: result for result in map(_result, _dicts(rows))}

    def lookup_stale(self, key: ResultKey) -> list[StoredResult]:
        """Return results for this problem, target and device worth measuring again here: the
        winners of other compiler versions, and rows imported from elsewhere (their verdicts
        were reached on another machine, so they are candidates, never local verdicts)."""
        rows = self._connection.execute(
            "SELECT * FROM results WHERE target = ? AND device = ? AND problem = ? "
            "AND ((compiler_version != ? AND verdict = ?) OR origin != ?) "
            "ORDER BY speedup DESC",
            (
                key.target,
                key.device,
                key.problem,
                key.compiler_version,
                Verdict.WINNER.value,
                LOCAL_ORIGIN,
            ),
        )
        return [_result(row) for row in _dicts(rows)]

    def all_results(self) -> Iterator[StoredResult]:
        rows = self._connection.execute(
            "SELECT * FROM results ORDER BY signature, target, device, speedup DESC"
        )
        yield from map(_result, _dicts(rows))

    def best_results(self) -> list[StoredResult]:
        """Return the winner per (target, device, problem) of this compiler: rows measured here
        whose verdict is `winner`, the fastest first by deciding speedup."""
        best: dict[tuple[str, str, str, str], StoredResult] = {}
        for result in self.all_results():
            if not is_local_winner(result):
                continue
            if result.key.compiler_version != compiler_version():
                continue
            group = (
                result.key.compiler_version,
                result.key.target,
                result.key.device,
                result.key.problem,
            )
            if group not in best or deciding_speedup(best[group]) < deciding_speedup(result):
                best[group] = result
        return sorted(best.values(), key=lambda r: (r.key.signature, r.key.target, r.key.device))

    def import_results(self, results: Sequence[StoredResult]) -> int:
        """Add results from elsewhere, all or none; an existing row wins over an imported one.
        Return the count added. Only a row with the key of one already stored is skipped: any
        other failure (a NULL in a required column) is an error, never a silent skip."""
        added = 0
        with transaction(self._connection):
            for result in results:
                row = _row(result)
                cursor = self._connection.execute(
                    f"INSERT INTO results ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)}) "
                    "ON CONFLICT (compiler_version, target, device, problem, config) DO NOTHING",
                    tuple(row.values()),
                )
                added += cursor.rowcount
        return added


def is_local_winner(result: StoredResult, rule: str | None = None) -> bool:
    """Tell whether a row is a verdict this machine reached: a local `winner` (under `rule`)."""
    return (
        result.verdict == Verdict.WINNER.value
        and result.origin == LOCAL_ORIGIN
        and (rule is None or result.rule == rule)
    )


def deciding_speedup(result: StoredResult) -> float:
    """Return the speedup that decided a row: real-input where measured, else dispatch-level."""
    if result.real_input_speedup is not None:
        return result.real_input_speedup
    return result.speedup or 0.0


def find_reusable(stored: Mapping[str, StoredResult], rule: str) -> StoredResult | None:
    """Return the stored local winner under `rule`, if any."""
    winners = [r for r in stored.values() if is_local_winner(r, rule)]
    return max(winners, key=deciding_speedup, default=None)


def stale_candidates(
    database: TuningDatabase, key: ResultKey, candidates: list[tuple[Knobs, float | None]]
) -> list[tuple[Knobs, float | None]]:
    """Put other compilers' winners and imported results first: measured again like any
    candidate, never applied on trust."""
    known = {knobs for knobs, _ in candidates}
    stale = []
    for result in database.lookup_stale(key):
        knobs = result.knobs
        if knobs is not None and knobs not in known:
            stale.append((knobs, None))
            known.add(knobs)
    if stale:
        logger.warning("measuring %d stored result(s) from elsewhere again", len(stale))
    return [*stale, *candidates]


def _row(result: StoredResult) -> dict[str, Any]:
    """Return the results table's columns of a result: its key's fields and its own, the
    sequences as JSON text and the flags as integers."""
    row: dict[str, Any] = {**asdict(result.key), **asdict(result)}
    del row["key"]
    row["times_ms"] = json.dumps(list(result.times_ms))
    row["rounds_ms"] = json.dumps([list(r) for r in result.rounds_ms])
    row["confirmed"] = int(result.confirmed)
    row["outputs_match"] = None if result.outputs_match is None else int(result.outputs_match)
    return row


def _dicts(cursor: sqlite3.Cursor) -> Iterator[dict[str, Any]]:
    names = [description[0] for description in cursor.description]
    for values in cursor:
        yield dict(zip(names, values, strict=True))


def as_number(value: object) -> float | None:
    """Read a stored number (a column, or a run file's JSON value) as a finite float; anything
    else (null, NaN, text that an old `db import` let in) is missing."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def as_text(value: object) -> str:
    """Read a stored text (a column, or a run file's JSON value) whatever it holds: a BLOB, a
    number, NULL ("")."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


def _times(value: object) -> tuple[float, ...]:
    """Read the stored timings; a value that is not a JSON list of numbers reads as none."""
    try:
        times = json.loads(as_text(value))
    except (ValueError, RecursionError):
        return ()
    numbers = [as_number(t) for t in times] if isinstance(times, list) else [None]
    return tuple(n for n in numbers if n is not None) if None not in numbers else ()


def _rounds(value: object) -> tuple[tuple[float, ...], ...]:
    """Read stored rounds of timings; anything but a JSON list of lists of numbers is none."""
    try:
        rounds = json.loads(as_text(value))
    except (ValueError, RecursionError):
        return ()
    if not isinstance(rounds, list) or not all(isinstance(r, list) for r in rounds):
        return ()
    parsed = [_times(json.dumps(r)) for r in rounds]
    return (
        tuple(parsed) if all(len(p) == len(r) for p, r in zip(parsed, rounds, strict=True)) else ()
    )


def _result(row: dict[str, Any]) -> StoredResult:
    """Turn a stored row into a record. Rows are validated when they come in, but a file written
    by an older ireetune may hold anything, so every value is read defensively: no stored value
    can crash a reader."""
    outputs_match = row["outputs_match"]
    return StoredResult(
        key=ResultKey(
            as_text(row["compiler_version"]),
            as_text(row["target"]),
            as_text(row["device"]),
            as_text(row["problem"]),
            as_text(row["signature"]),
        ),
        config=as_text(row["config"]),
        compilation_info=as_text(row["compilation_info"]),
        status=as_text(row["status"]),
        reason=as_text(row["reason"]),
        times_ms=_times(row["times_ms"]),
        median_ms=as_number(row["median_ms"]),
        min_ms=as_number(row["min_ms"]),
        max_ms=as_number(row["max_ms"]),
        spread=as_number(row["spread"]),
        baseline_ms=as_number(row["baseline_ms"]),
        speedup=as_number(row["speedup"]),
        session=as_text(row["session"]),
        written_at=as_text(row["written_at"]),
        speedup_low=as_number(row["speedup_low"]),
        speedup_high=as_number(row["speedup_high"]),
        basis=as_text(row["basis"]),
        confirmed=row["confirmed"] == 1,
        rounds_ms=_rounds(row["rounds_ms"]),
        outputs_match=bool(outputs_match) if outputs_match in (0, 1) else None,
        real_input_speedup=as_number(row["real_input_speedup"]),
        real_input_low=as_number(row["real_input_low"]),
        real_input_high=as_number(row["real_input_high"]),
        verdict=as_text(row["verdict"]),
        rule=as_text(row["rule"]),
        origin=as_text(row["origin"]),
    )


def now_utc() -> str:
    """Return the current time as ISO-8601 UTC text."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
