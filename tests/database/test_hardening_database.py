"""One tuning database for every command (issue 22, defects 1, 2 and the database items of 6).

The flag phase's `model_results` table is part of ireetune's schema: a file it was added to is
still every command's database, and a file written by this version holds it from the start.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from ireetune.cli import main
from ireetune.database.exchange import results_to_json
from ireetune.database.model_results import ModelKey, ModelResult, record_model_result
from ireetune.database.schema import MODEL_RESULT_COLUMNS, SCHEMA_VERSION, open_database
from ireetune.database.store import TuningDatabase, compiler_version
from tests.database.test_database import KEY, stored_result

# The model_results table exactly as the flag phase of a schema-2 ireetune created it.
SCHEMA_2_MODEL_RESULTS = """
CREATE TABLE IF NOT EXISTS model_results (
    compiler_version TEXT NOT NULL, target TEXT NOT NULL, device TEXT NOT NULL,
    model_sha256 TEXT NOT NULL, model_name TEXT NOT NULL, flags TEXT NOT NULL,
    flag_speedup REAL, flag_low REAL, flag_high REAL, rule TEXT NOT NULL, spec TEXT NOT NULL,
    combined_speedup REAL, combined_low REAL, combined_high REAL, run_dir TEXT NOT NULL,
    written_at TEXT NOT NULL,
    PRIMARY KEY (compiler_version, target, device, model_sha256)
);
"""
MODEL_KEY = ModelKey(compiler_version(), "cpu#abc", "local-task", "0" * 64)
MODEL_RESULT = ModelResult(
    "mm64.mlir", ("--iree-opt-level=O3",), 1.1, 1.05, 1.2, "flag-rule", "", None, None, None,
    "out/run", "2026-11-25T00:00:00+00:00",
)  # fmt: skip


def lookup_model_result(database_path: Path, key: ModelKey) -> ModelResult | None:
    """Return the model's stored row, or None (the reader the tuner does not need yet)."""
    if not database_path.exists():
        return None
    connection = open_database(database_path)
    try:
        row = connection.execute(
            "SELECT model_name, flags, flag_speedup, flag_low, flag_high, rule, spec, "
            "combined_speedup, combined_low, combined_high, run_dir, written_at "
            "FROM model_results WHERE compiler_version = ? AND target = ? AND device = ? "
            "AND model_sha256 = ?",
            (key.compiler_version, key.target, key.device, key.model_sha256),
        ).fetchone()
    finally:
        connection.close()
    if row is None:
        return None
    return ModelResult(
        row[0], tuple(json.loads(row[1])), row[2], row[3], row[4], row[5], row[6], row[7], row[8],
        row[9], row[10], row[11],
    )  # fmt: skip


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_schema_2_file(path: Path, with_model_results: bool) -> None:
    """Write a schema-2 database holding one row, as a schema-2 ireetune left it (its flag phase
    added `model_results` beside the tables it created)."""
    with TuningDatabase(path) as database:
        database.write(stored_result({"vec_m": 8}, "measured", 1.2))
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA journal_mode = DELETE")
    connection.execute("DROP TABLE IF EXISTS model_results")
    connection.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    if with_model_results:
        connection.executescript(SCHEMA_2_MODEL_RESULTS)
    connection.commit()
    connection.close()


def write_newer_schema_file(path: Path, wal: bool = False) -> None:
    """Write an ireetune database of a schema newer than this version reads; with `wal`, leave
    it in WAL mode with no `-wal` file beside it (as a closed WAL database is)."""
    with TuningDatabase(path) as database:
        database.write(stored_result({"vec_m": 8}, "measured", 1.2))
    connection = sqlite3.connect(path)
    connection.execute(f"PRAGMA journal_mode = {'WAL' if wal else 'DELETE'}")
    connection.execute(
        "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),)
    )
    connection.commit()
    connection.close()
    assert not path.with_name(path.name + "-wal").exists()


def write_wal_foreign_file(path: Path) -> None:
    """Write another program's SQLite file in WAL mode, closed (no `-wal` file beside it)."""
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("CREATE TABLE customers (name TEXT)")
    connection.commit()
    connection.close()
    assert path.read_bytes()[18:20] == b"\x02\x02"


def test_a_database_the_flag_phase_wrote_to_is_still_every_commands_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "r.sqlite"
    with TuningDatabase(path) as database:
        database.write(stored_result({"vec_m": 8}, "measured", 1.2))
    record_model_result(path, MODEL_KEY, MODEL_RESULT)
    capsys.readouterr()

    assert main(["db", "--db", str(path), "list"]) == 0
    assert main(["db", "--db", str(path), "show", "matmul"]) == 0
    assert main(["db", "--db", str(path), "report"]) == 0

    captured = capsys.readouterr()
    assert (captured.err, captured.out.count(KEY.signature)) == ("", 3)
    found = lookup_model_result(path, MODEL_KEY)
    assert found is not None
    assert replace(found, written_at=MODEL_RESULT.written_at) == MODEL_RESULT


@pytest.mark.parametrize("with_model_results", [False, True])
def test_a_schema_2_file_is_upgraded_with_its_model_results_kept(
    with_model_results: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "old.sqlite"
    write_schema_2_file(path, with_model_results)
    if with_model_results:
        record_model_result_schema_2 = sqlite3.connect(path)
        record_model_result_schema_2.execute(
            "INSERT INTO model_results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                *(MODEL_KEY.compiler_version, MODEL_KEY.target, MODEL_KEY.device),
                MODEL_KEY.model_sha256, MODEL_RESULT.model_name,
                json.dumps(list(MODEL_RESULT.flags)), 1.1, 1.05, 1.2, "flag-rule", "", None,
                None, None, "out/run", "2026-11-25T00:00:00+00:00",
            ),
        )  # fmt: skip
        record_model_result_schema_2.commit()
        record_model_result_schema_2.close()

    before = path.read_bytes()
    # Reading leaves the old file as it is (issue 37 part 2); the first write upgrades it.
    assert main(["db", "--db", str(path), "list"]) == 0
    assert "matmul" in capsys.readouterr().out
    assert path.read_bytes() == before
    export = tmp_path / "nothing.json"
    export.write_text(json.dumps({"ireetune_results": []}))
    assert main(["db", "--db", str(path), "import", str(export)]) == 0

    connection = sqlite3.connect(path)
    version = connection.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    columns = tuple(row[1] for row in connection.execute("PRAGMA table_info(model_results)"))
    connection.close()
    assert (version, columns) == ((str(SCHEMA_VERSION),), MODEL_RESULT_COLUMNS)
    expected = MODEL_RESULT if with_model_results else None
    assert lookup_model_result(path, MODEL_KEY) == expected


def test_a_new_database_holds_every_table_of_the_schema(tmp_path: Path) -> None:
    path = tmp_path / "new.sqlite"
    TuningDatabase(path).close()
    connection = sqlite3.connect(path)
    tables = sorted(row[0] for row in connection.execute("SELECT name FROM sqlite_master"))
    connection.close()
    assert tables == [
        "meta",
        "model_results",
        "results",
        "results_by_problem",
        "sqlite_autoindex_meta_1",
        "sqlite_autoindex_model_results_1",
        "sqlite_autoindex_results_1",
    ]


def test_recording_a_model_result_refuses_a_newer_schema_and_leaves_it(tmp_path: Path) -> None:
    from ireetune.core.errors import IreetuneError

    path = tmp_path / "newer.sqlite"
    write_newer_schema_file(path)
    before = _digest(path)
    with pytest.raises(IreetuneError) as excinfo:
        record_model_result(path, MODEL_KEY, MODEL_RESULT)
    assert "a newer ireetune wrote it" in str(excinfo.value)
    assert _digest(path) == before


@pytest.mark.parametrize("command", [["list"], ["show", "matmul"], ["report"]])
def test_a_refused_wal_file_gets_no_wal_or_shm_files(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "newer.sqlite"
    write_newer_schema_file(path, wal=True)
    before = _digest(path)
    assert main(["db", "--db", str(path), *command]) == 2
    assert "a newer ireetune wrote it" in capsys.readouterr().err
    assert (sorted(p.name for p in tmp_path.iterdir()), _digest(path)) == (
        ["newer.sqlite"],
        before,
    )


def test_a_failed_import_does_not_create_the_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "rows.json"
    source.write_text(json.dumps({"ireetune_results": [{"key": {}}]}))
    target = tmp_path / "sub" / "new.sqlite"
    assert main(["db", "--db", str(target), "import", str(source)]) == 2
    assert "rows.json: row 0" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.json"]


def test_db_report_and_list_show_an_imported_rows_terminal_escapes_as_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hostile = replace(
        stored_result({"vec_m": 4}, "verified", 1.4, verdict="winner"),
        key=replace(KEY, signature="matmul\x1b[2J\x1b]0;owned\x07", device="cpu\rdevice"),
    )
    source = tmp_path / "rows.json"
    source.write_text(results_to_json([hostile]))
    path = tmp_path / "db.sqlite"
    assert main(["db", "--db", str(path), "import", str(source)]) == 0
    capsys.readouterr()

    assert main(["db", "--db", str(path), "report"]) == 0
    assert main(["db", "--db", str(path), "list"]) == 0

    shown = capsys.readouterr().out
    assert [c for c in shown if not c.isprintable() and c != "\n"] == []
    assert "matmul\\x1b[2J\\x1b]0;owned\\x07" in shown
