"""The tuning database's schema: every table ireetune keeps in the file, its version, and how an
older file is upgraded. Every command that reads or writes the file goes through here.

Tables (schema 3):

- `meta`: `schema_version` and nothing else ireetune reads.
- `results`: one row per candidate measured for a dispatch (`database/store.py`).
- `model_results`: one row per tuned model, its flags and spec (`database/model_results.py`).

History: schema 2 added columns to `results`; schema 3 added `model_results`, which the flag phase
of a schema-2 ireetune had already created in some files, so a schema-2 file may hold it.

A file is inspected read-only before anything opens it for writing, and a refused file is left
byte for byte as it was, with no `-wal`/`-shm` file created beside it.
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ireetune.core.errors import IreetuneError

SCHEMA_VERSION = 3
BUSY_TIMEOUT_MS = 30_000

_RESULTS_TABLE = """
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
)
"""

_MODEL_RESULTS_TABLE = """
CREATE TABLE IF NOT EXISTS model_results (
    compiler_version TEXT NOT NULL,
    target TEXT NOT NULL,
    device TEXT NOT NULL,
    model_sha256 TEXT NOT NULL,
    model_name TEXT NOT NULL,
    flags TEXT NOT NULL,
    flag_speedup REAL,
    flag_low REAL,
    flag_high REAL,
    rule TEXT NOT NULL,
    spec TEXT NOT NULL,
    combined_speedup REAL,
    combined_low REAL,
    combined_high REAL,
    run_dir TEXT NOT NULL,
    written_at TEXT NOT NULL,
    PRIMARY KEY (compiler_version, target, device, model_sha256)
)
"""

_CREATE_STATEMENTS = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    _RESULTS_TABLE,
    "CREATE INDEX IF NOT EXISTS results_by_problem ON results (signature, target, device)",
    _MODEL_RESULTS_TABLE,
)

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


def _column_names(table: str) -> tuple[str, ...]:
    """Read the column names out of a CREATE TABLE statement."""
    body = table.split("(", 1)[1]
    lines = (line.strip() for line in body.strip().splitlines())
    return tuple(
        line.split()[0] for line in lines if line and not line.startswith(("PRIMARY", ")"))
    )


_SCHEMA_2_RESULT_COLUMNS = _column_names(_RESULTS_TABLE)
RESULT_COLUMNS = {
    1: _SCHEMA_2_RESULT_COLUMNS[: -len(_SCHEMA_2_COLUMNS)],
    2: _SCHEMA_2_RESULT_COLUMNS,
    3: _SCHEMA_2_RESULT_COLUMNS,
}
MODEL_RESULT_COLUMNS = _column_names(_MODEL_RESULTS_TABLE)

# Every table of each schema: those it must hold, and those it may hold.
_REQUIRED_TABLES = {
    1: frozenset({"meta", "results"}),
    2: frozenset({"meta", "results"}),
    3: frozenset({"meta", "results", "model_results"}),
}
_OWN_TABLES = frozenset({"meta", "results", "model_results"})
# Everything else an ireetune database's sqlite_master may hold; anything more is another
# program's (a trigger, a view, another index).
_OWN_OTHER_ENTRIES = frozenset(
    {
        ("index", "results_by_problem"),
        ("index", "sqlite_autoindex_meta_1"),
        ("index", "sqlite_autoindex_results_1"),
        ("index", "sqlite_autoindex_model_results_1"),
    }
)

# An SQLite file starts with this; bytes 18 and 19 are 2 in a file in WAL mode.
_SQLITE_HEADER = b"SQLite format 3\x00"


def _is_quiet_wal_file(path: Path) -> bool:
    """Say whether a file is an SQLite file in WAL mode that no connection has open (no `-wal`
    file beside it): reading it needs no WAL, and opening it normally would create one."""
    try:
        with path.open("rb") as handle:
            header = handle.read(20)
    except OSError:
        return False
    wal_file = path.with_name(path.name + "-wal")
    return (
        header.startswith(_SQLITE_HEADER) and header[18:20] == b"\x02\x02" and not wal_file.exists()
    )


def _read_only_uri(path: Path) -> str:
    """Name a file for a read-only SQLite connection (percent-encoded, so any name is safe).

    Even a read-only connection creates `-wal` and `-shm` files beside a WAL-mode file and cannot
    remove them; a WAL-mode file nobody has open is read as immutable instead, which creates none.
    """
    uri = f"{path.resolve().as_uri()}?mode=ro"
    return uri + "&immutable=1" if _is_quiet_wal_file(path) else uri


def is_lock_error(error: sqlite3.Error) -> bool:
    """Say whether SQLite failed because another connection holds the file (busy or locked)."""
    code = getattr(error, "sqlite_errorcode", None)
    if code is None:
        return False
    return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def locked_error(path: Path) -> IreetuneError:
    """The one line for a database another process holds locked past the busy timeout."""
    return IreetuneError(
        f"the database {path} is locked (busy) by another process; try again when it is done"
    )


def describe_database_error(path: Path, error: sqlite3.Error, message: str) -> IreetuneError:
    """The one line for a failed SQLite call: the lock's, else `message` with SQLite's words."""
    return locked_error(path) if is_lock_error(error) else IreetuneError(f"{message} ({error})")


def connect_read_only(path: Path) -> sqlite3.Connection:
    """Open a file for reading only: nothing in or beside it is created or changed."""
    try:
        return sqlite3.connect(_read_only_uri(path), uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
    except sqlite3.Error as error:
        raise describe_database_error(path, error, f"cannot read {path}") from error


def inspect_database_file(path: Path) -> int:
    """Check, through a read-only connection, that a file is an ireetune database this version
    reads, and return its schema version (0 for an empty database).

    Nothing is written: a foreign SQLite file, a damaged one, garbage or a newer schema is
    refused with an IreetuneError and left byte for byte as it was.
    """
    connection = connect_read_only(path)
    try:
        return _inspect(connection, path)
    except sqlite3.DatabaseError as error:
        raise describe_database_error(path, error, f"{path} is not an ireetune database") from error
    finally:
        connection.close()


def open_database_read_only(path: Path) -> sqlite3.Connection:
    """Open an existing database for reading only: the file, and the folder it is in, are left
    as they were (no `-wal`/`-shm` file, no upgrade, no schema written into an empty file).

    An empty file, or one that is not an ireetune database, is refused in one line. A file of an
    older schema is copied into memory and upgraded there, so every query reads today's columns.
    """
    if not path.is_file():
        raise IreetuneError(f"database path is not a file: {path}")
    if path.stat().st_size == 0:
        raise IreetuneError(f"{path} is an empty file, not an ireetune database")
    version = inspect_database_file(path)
    connection = connect_read_only(path)
    if version == SCHEMA_VERSION:
        return connection
    try:
        in_memory = sqlite3.connect(":memory:", isolation_level=None)
        connection.backup(in_memory)
        _create_or_upgrade(in_memory, path)
    except sqlite3.Error as error:
        raise describe_database_error(path, error, f"cannot read {path}") from error
    finally:
        connection.close()
    return in_memory


def _columns(connection: sqlite3.Connection, table: str) -> tuple[str, ...]:
    return tuple(row[1] for row in connection.execute(f"PRAGMA table_info({table})"))


def _foreign(path: Path, what: str) -> IreetuneError:
    return IreetuneError(f"{path} is an SQLite file of another program ({what})")


def _inspect(connection: sqlite3.Connection, path: Path) -> int:
    entries = {
        (kind, name)
        for kind, name in connection.execute("SELECT type, name FROM sqlite_master")
        if not (kind == "table" and name.startswith("sqlite_"))
    }
    if not entries:
        return 0
    tables = {name for kind, name in entries if kind == "table"}
    others = sorted(
        f"{kind} {name}" for kind, name in entries - _OWN_OTHER_ENTRIES if kind != "table"
    )
    table_list = ", ".join(sorted(tables))
    if not _REQUIRED_TABLES[1] <= tables <= _OWN_TABLES:
        raise _foreign(path, f"tables: {table_list}")
    if others:
        raise _foreign(path, f"tables: {table_list}; also {', '.join(others)}")
    meta_columns = _columns(connection, "meta")
    if meta_columns != ("key", "value"):
        raise _foreign(path, f"its meta table has columns {', '.join(meta_columns)}")
    stored = connection.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()
    version_text = stored[0][0] if len(stored) == 1 else None
    if not (isinstance(version_text, str) and version_text.isdigit()):
        raise IreetuneError(f"{path} is not an ireetune database (no schema version)")
    version = int(version_text)
    if version > SCHEMA_VERSION:
        raise IreetuneError(
            f"{path} has database schema {version}; this ireetune reads {SCHEMA_VERSION} "
            "(a newer ireetune wrote it)"
        )
    if version < 1:
        raise IreetuneError(f"{path} is not an ireetune database (schema version {version})")
    if not _REQUIRED_TABLES[version] <= tables:
        raise _foreign(path, f"tables: {table_list}, unlike ireetune's schema {version}")
    for table, expected in (
        ("results", RESULT_COLUMNS[version]),
        ("model_results", MODEL_RESULT_COLUMNS),
    ):
        columns = _columns(connection, table) if table in tables else expected
        if columns != expected:
            raise _foreign(
                path,
                f"its {table} table has columns {', '.join(columns)}, "
                f"unlike ireetune's schema {version}",
            )
    problems = [row[0] for row in connection.execute("PRAGMA quick_check")]
    if problems != ["ok"]:
        raise IreetuneError(f"{path} is a damaged database ({problems[0]})")
    return version


def check_database_file(path: Path) -> None:
    """Refuse, before any work and without creating or changing anything, a database path that
    ireetune would refuse when it opens it: a folder, or an existing file that is not an ireetune
    database of this or an older schema."""
    if path.exists() and not path.is_file():
        raise IreetuneError(f"database path is not a file: {path}")
    if path.is_file() and path.stat().st_size > 0:
        inspect_database_file(path)


def _require_writable_folder(folder: Path) -> None:
    """Create the database's folder if needed and check that files can be made in it (the
    database, its WAL and shared-memory files)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise IreetuneError(
            f"cannot create the database folder {folder}: {error.strerror}"
        ) from error
    try:
        # A real probe rather than os.access, which says yes to root on a read-only folder.
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise IreetuneError(
            f"the database folder {folder} is not writable ({error.strerror})"
        ) from error


@contextmanager
def transaction(connection: sqlite3.Connection) -> Iterator[None]:
    """Run the block in one immediate transaction: committed if it ends, rolled back if not."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


def open_database(path: Path) -> sqlite3.Connection:
    """Open a database file for reading and writing, creating it or upgrading an older schema.

    An existing file is inspected read-only first; only an ireetune database of this or an older
    schema is then opened for writing (switched to WAL, created or upgraded). The connection is
    in autocommit mode: group writes with `transaction`.
    """
    check_database_file(path)
    _require_writable_folder(path.parent)
    try:
        connection = sqlite3.connect(
            str(path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None
        )
    except sqlite3.Error as error:
        raise IreetuneError(f"cannot open {path} for writing ({error})") from error
    try:
        connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute("PRAGMA synchronous = NORMAL")
        _create_or_upgrade(connection, path)
    except sqlite3.DatabaseError as error:
        connection.close()
        raise describe_database_error(path, error, f"{path} is not an ireetune database") from error
    except IreetuneError:
        connection.close()
        raise
    return connection


def _create_or_upgrade(connection: sqlite3.Connection, path: Path) -> None:
    """Create the tables in a new file, or upgrade an older schema, in one transaction (a process
    that starts at the same time sees all of it or nothing)."""
    with transaction(connection):
        tables = connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        if not tables.fetchall():
            for statement in _CREATE_STATEMENTS:
                connection.execute(statement)
            connection.execute(
                "INSERT INTO meta (key, value) VALUES ('schema_version', ?)",
                (str(SCHEMA_VERSION),),
            )
        stored = connection.execute("SELECT value FROM meta WHERE key = 'schema_version'")
        version_text = (stored.fetchone() or (None,))[0]
        if not (isinstance(version_text, str) and version_text.isdigit()):
            raise IreetuneError(f"{path} changed while it was opened; try again")
        version = int(version_text)
        if version not in range(1, SCHEMA_VERSION + 1):
            # The read-only inspection passed; only a change since then gets here.
            raise IreetuneError(f"{path} changed while it was opened; try again")
        for older in range(version, SCHEMA_VERSION):
            _UPGRADES[older](connection)
        if version != SCHEMA_VERSION:
            connection.execute(
                "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),)
            )


def _upgrade_from_schema_1(connection: sqlite3.Connection) -> None:
    """Add schema 2's columns; old rows get no verdict, so they are re-decided, never reused."""
    present = set(_columns(connection, "results"))
    for column in _SCHEMA_2_COLUMNS:
        if column.split()[0] not in present:
            connection.execute(f"ALTER TABLE results ADD COLUMN {column}")


def _upgrade_from_schema_2(connection: sqlite3.Connection) -> None:
    """Add the model_results table (a schema-2 file whose flag phase ran has it already)."""
    connection.execute(_MODEL_RESULTS_TABLE)


# How a file of each older schema reaches the next one.
_UPGRADES: dict[int, Callable[[sqlite3.Connection], None]] = {
    1: _upgrade_from_schema_1,
    2: _upgrade_from_schema_2,
}
