"""The tuning database: every candidate's fate, in SQLite, written as results arrive.

One row per (compiler version, target, device, problem, config). The key's parts are canonical
text: the problem as the JSON of its record, the config as the JSON of its sorted knobs (`null`
for the compiler's default). Each row keeps every check's outcome separately (dispatch-level
speedup with its interval, outputs equal, real-input speedup with its interval) and the verdict
that the decision rule named in `rule` reached; only a `winner` under the current rule, measured
here (`origin` = local), is ever reused. WAL mode and a busy timeout let several tuner processes share one
file; every write is its own short transaction, so a killed process loses at most the row it was
writing.
"""

from __future__ import annotations

import datetime
import json
import os
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ireetune.errors import IreetuneError
from ireetune.problem.root_op import Problem
from ireetune.search.candidate import Knobs

SCHEMA_VERSION = 2
BUSY_TIMEOUT_MS = 30_000
DB_VARIABLE = "IREETUNE_DB"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS results (
    compiler_version TEXT NOT NULL,
    target TEXT NOT NULL,
    device TEXT NOT NULL,
    problem TEXT NOT NULL,
    signature TEXT NOT NULL,
    config TEXT NOT NULL,
    compilation_info TEXT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT NOT NULL,
    times_ms TEXT NOT NULL,
    median_ms REAL,
    min_ms REAL,
    max_ms REAL,
    spread REAL,
    baseline_ms REAL,
    speedup REAL,
    session TEXT NOT NULL,
    written_at TEXT NOT NULL,
    speedup_low REAL,
    speedup_high REAL,
    basis TEXT NOT NULL DEFAULT '',
    confirmed INTEGER NOT NULL DEFAULT 0,
    rounds_ms TEXT NOT NULL DEFAULT '[]',
    outputs_match INTEGER,
    real_input_speedup REAL,
    real_input_low REAL,
    real_input_high REAL,
    verdict TEXT NOT NULL DEFAULT '',
    rule TEXT NOT NULL DEFAULT '',
    origin TEXT NOT NULL DEFAULT 'local',
    PRIMARY KEY (compiler_version, target, device, problem, config)
);
CREATE INDEX IF NOT EXISTS results_by_problem ON results (signature, target, device);
"""

# Columns schema 2 added to schema 1's results table; a schema-1 file is upgraded in place.
_SCHEMA_2_COLUMNS = (
    "speedup_low REAL",
    "speedup_high REAL",
    "basis TEXT NOT NULL DEFAULT ''",
    "confirmed INTEGER NOT NULL DEFAULT 0",
    "rounds_ms TEXT NOT NULL DEFAULT '[]'",
    "outputs_match INTEGER",
    "real_input_speedup REAL",
    "real_input_low REAL",
    "real_input_high REAL",
    "verdict TEXT NOT NULL DEFAULT ''",
    "rule TEXT NOT NULL DEFAULT ''",
    "origin TEXT NOT NULL DEFAULT 'local'",
)
LOCAL_ORIGIN = "local"

# Statuses after which a candidate needs no more work in a later run of the same command.
FINAL_STATUSES = frozenset(
    {
        "compile-failed",
        "compile-timed-out",
        "not-applied",
        "duplicate",
        "measured",
        "benchmark-failed",
        "benchmark-timed-out",
        "crashed",
        "verified",
        "wrong",
    }
)
MEASURED_STATUSES = frozenset({"measured", "verified", "wrong"})


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
class StoredResult:
    """One row of the results table."""

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
    speedup_low: float | None = None
    speedup_high: float | None = None
    basis: str = ""
    confirmed: bool = False
    rounds_ms: tuple[tuple[float, ...], ...] = ()
    outputs_match: bool | None = None
    real_input_speedup: float | None = None
    real_input_low: float | None = None
    real_input_high: float | None = None
    verdict: str = ""
    rule: str = ""
    origin: str = LOCAL_ORIGIN

    @property
    def knobs(self) -> Knobs | None:
        return parse_config_key(self.config)


class TuningDatabase:
    """A connection to one database file; safe to use from several processes at once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if path.exists() and not path.is_file():
            raise IreetuneError(f"database path is not a file: {path}")
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._connection = sqlite3.connect(
                str(path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None
            )
            self._connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._refuse_foreign_file()
            self._connection.execute("PRAGMA journal_mode = WAL")
            self._connection.execute("PRAGMA synchronous = NORMAL")
            self._check_or_create_schema()
        except sqlite3.DatabaseError as error:
            raise IreetuneError(f"{path} is not an ireetune database ({error})") from error

    def _tables(self) -> set[str]:
        rows = self._connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        return {row[0] for row in rows}

    def _refuse_foreign_file(self) -> None:
        """Refuse, before writing anything, an SQLite file that some other program made."""
        tables = self._tables()
        if tables and not {"meta", "results"} <= tables:
            raise IreetuneError(
                f"{self.path} is an SQLite file of another program (tables: {', '.join(sorted(tables))})"
            )

    def _check_or_create_schema(self) -> None:
        tables = self._tables()
        if not tables:
            # CREATE ... IF NOT EXISTS makes a race between two new processes harmless.
            self._connection.executescript(_SCHEMA)
        self._connection.execute(
            "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)",
            (str(SCHEMA_VERSION),),
        )
        stored = self._connection.execute(
            "SELECT value FROM meta WHERE key = 'schema_version'"
        ).fetchone()
        if stored is not None and stored[0] == "1":
            self._upgrade_from_schema_1()
            stored = (str(SCHEMA_VERSION),)
        if stored is None or stored[0] != str(SCHEMA_VERSION):
            raise IreetuneError(
                f"{self.path} has database schema {stored[0] if stored else '?'}; this ireetune reads {SCHEMA_VERSION}"
            )

    def _upgrade_from_schema_1(self) -> None:
        """Add schema 2's columns; old rows get no verdict, so they are re-decided, never reused."""
        with self._transaction():
            present = {row[1] for row in self._connection.execute("PRAGMA table_info(results)")}
            for column in _SCHEMA_2_COLUMNS:
                if column.split()[0] not in present:
                    self._connection.execute(f"ALTER TABLE results ADD COLUMN {column}")
            self._connection.execute(
                "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),)
            )

    class _Transaction:
        def __init__(self, connection: sqlite3.Connection) -> None:
            self._connection = connection

        def __enter__(self) -> None:
            self._connection.execute("BEGIN IMMEDIATE")

        def __exit__(self, kind: object, value: object, traceback: object) -> None:
            self._connection.execute("COMMIT" if kind is None else "ROLLBACK")

    def _transaction(self) -> TuningDatabase._Transaction:
        return TuningDatabase._Transaction(self._connection)

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> TuningDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def write(self, result: StoredResult) -> None:
        """Insert or replace one result, in its own transaction."""
        row = _row(result)
        with self._transaction():
            self._connection.execute(
                f"INSERT OR REPLACE INTO results ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})",
                tuple(row.values()),
            )

    def lookup(self, key: ResultKey) -> dict[str, StoredResult]:
        """Return this problem's results on this compiler, target and device, by config key."""
        rows = self._connection.execute(
            "SELECT * FROM results WHERE compiler_version = ? AND target = ? AND device = ? AND problem = ?",
            (key.compiler_version, key.target, key.device, key.problem),
        )
        return {result.config: result for result in map(_result, _dicts(rows))}

    def lookup_stale(self, key: ResultKey) -> list[StoredResult]:
        """Return results for this problem, target and device worth measuring again here: the
        winners of other compiler versions, and rows imported from elsewhere (their verdicts
        were reached on another machine, so they are candidates, never local verdicts)."""
        rows = self._connection.execute(
            "SELECT * FROM results WHERE target = ? AND device = ? AND problem = ? "
            "AND ((compiler_version != ? AND verdict = 'winner') OR origin != 'local') "
            "ORDER BY speedup DESC",
            (key.target, key.device, key.problem, key.compiler_version),
        )
        return [_result(row) for row in _dicts(rows)]

    def all_results(self) -> Iterator[StoredResult]:
        rows = self._connection.execute(
            "SELECT * FROM results ORDER BY signature, target, device, speedup DESC"
        )
        yield from map(_result, _dicts(rows))

    def best_results(
        self, current_compiler_only: bool = True, rule: str | None = None
    ) -> list[StoredResult]:
        """Return the winner per (compiler, target, device, problem): rows measured here whose
        verdict is `winner` (under `rule` when given), the fastest first by deciding speedup."""
        best: dict[tuple[str, str, str, str], StoredResult] = {}
        for result in self.all_results():
            if not is_local_winner(result, rule):
                continue
            if current_compiler_only and result.key.compiler_version != compiler_version():
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
        """Add results from elsewhere; an existing row wins over an imported one. Return count added."""
        added = 0
        with self._transaction():
            for result in results:
                row = _row(result)
                cursor = self._connection.execute(
                    f"INSERT OR IGNORE INTO results ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})",
                    tuple(row.values()),
                )
                added += cursor.rowcount
        return added


def is_local_winner(result: StoredResult, rule: str | None = None) -> bool:
    """Tell whether a row is a verdict this machine reached: a local `winner` (under `rule`)."""
    return (
        result.verdict == "winner"
        and result.origin == LOCAL_ORIGIN
        and (rule is None or result.rule == rule)
    )


def deciding_speedup(result: StoredResult) -> float:
    """Return the speedup that decided a row: real-input where measured, else dispatch-level."""
    if result.real_input_speedup is not None:
        return result.real_input_speedup
    return result.speedup or 0.0


def _row(result: StoredResult) -> dict[str, Any]:
    return {
        "compiler_version": result.key.compiler_version,
        "target": result.key.target,
        "device": result.key.device,
        "problem": result.key.problem,
        "signature": result.key.signature,
        "config": result.config,
        "compilation_info": result.compilation_info,
        "status": result.status,
        "reason": result.reason,
        "times_ms": json.dumps(list(result.times_ms)),
        "median_ms": result.median_ms,
        "min_ms": result.min_ms,
        "max_ms": result.max_ms,
        "spread": result.spread,
        "baseline_ms": result.baseline_ms,
        "speedup": result.speedup,
        "session": result.session,
        "written_at": result.written_at,
        "speedup_low": result.speedup_low,
        "speedup_high": result.speedup_high,
        "basis": result.basis,
        "confirmed": int(result.confirmed),
        "rounds_ms": json.dumps([list(r) for r in result.rounds_ms]),
        "outputs_match": None if result.outputs_match is None else int(result.outputs_match),
        "real_input_speedup": result.real_input_speedup,
        "real_input_low": result.real_input_low,
        "real_input_high": result.real_input_high,
        "verdict": result.verdict,
        "rule": result.rule,
        "origin": result.origin,
    }


def _dicts(cursor: sqlite3.Cursor) -> Iterator[dict[str, Any]]:
    names = [description[0] for description in cursor.description]
    for values in cursor:
        yield dict(zip(names, values, strict=True))


def _result(row: dict[str, Any]) -> StoredResult:
    return StoredResult(
        key=ResultKey(
            row["compiler_version"], row["target"], row["device"], row["problem"], row["signature"]
        ),
        config=row["config"],
        compilation_info=row["compilation_info"],
        status=row["status"],
        reason=row["reason"],
        times_ms=tuple(json.loads(row["times_ms"])),
        median_ms=row["median_ms"],
        min_ms=row["min_ms"],
        max_ms=row["max_ms"],
        spread=row["spread"],
        baseline_ms=row["baseline_ms"],
        speedup=row["speedup"],
        session=row["session"],
        written_at=row["written_at"],
        speedup_low=row["speedup_low"],
        speedup_high=row["speedup_high"],
        basis=row["basis"],
        confirmed=bool(row["confirmed"]),
        rounds_ms=tuple(tuple(r) for r in json.loads(row["rounds_ms"])),
        outputs_match=None if row["outputs_match"] is None else bool(row["outputs_match"]),
        real_input_speedup=row["real_input_speedup"],
        real_input_low=row["real_input_low"],
        real_input_high=row["real_input_high"],
        verdict=row["verdict"],
        rule=row["rule"],
        origin=row["origin"],
    )


def now_utc() -> str:
    """Return the current time as ISO-8601 UTC text."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
