"""`ireetune db`: bad imports and refused files through the real command line, and what it shows."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from ireetune.cli import main
from ireetune.database.exchange import results_to_json
from ireetune.database.store import StoredResult, TuningDatabase
from tests.database.test_database import CONV_INFO, CONV_KEY, KEY, stored_result


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """Return the one `ireetune: error:` line the command printed, without its prefix."""
    captured = capsys.readouterr()
    assert captured.err.startswith("ireetune: error: ") and captured.err.count("\n") == 1, (
        captured.err
    )
    return captured.err.removeprefix("ireetune: error: ").removesuffix("\n")


@pytest.fixture()
def database_file(tmp_path: Path) -> Path:
    path = tmp_path / "keep.sqlite"
    with TuningDatabase(path) as database:
        database.write(stored_result({"vec_m": 8}, "measured", 1.2))
    return path


def _export_row(result: StoredResult) -> dict[str, object]:
    (row,) = json.loads(results_to_json([result]))["ireetune_results"]
    assert isinstance(row, dict)
    return row


GOOD = stored_result({"vec_m": 4}, "verified", 1.4, verdict="winner")
MISSING = object()
CONTRACTION_FIELDS = json.loads(KEY.problem)
BAD_ROWS: list[tuple[str, object, str]] = [
    ("speedup", "fast", "speedup must be a finite number >= 0 or null, got 'fast'"),
    ("speedup", [1.0], "speedup must be a finite number >= 0 or null, got [1.0]"),
    ("speedup", -1.0, "speedup must be a finite number >= 0 or null, got -1.0"),
    ("speedup", float("nan"), "speedup must be a finite number >= 0 or null, got nan"),
    (
        "speedup",
        10**400,
        "speedup must be a finite number >= 0 or null, got 1000000000000000000000000000000000000...",
    ),
    ("median_ms", float("inf"), "median_ms must be a finite number >= 0 or null, got inf"),
    ("speedup_low", True, "speedup_low must be a finite number >= 0 or null, got True"),
    ("baseline_ms", {}, "baseline_ms must be a finite number >= 0 or null, got {}"),
    ("times_ms", "1.0", "times_ms must be a list of finite numbers >= 0, got '1.0'"),
    ("times_ms", [1.0, -2.0], "times_ms must be a list of finite numbers >= 0, got [1.0, -2.0]"),
    ("times_ms", [1.0, None], "times_ms must be a list of finite numbers >= 0, got [1.0, None]"),
    ("times_ms", None, "times_ms must not be null"),
    (
        "status",
        "great",
        "status must be one of 'benchmark-failed', 'benchmark-timed-out', 'compile-failed', "
        "'compile-timed-out', 'compiled', 'crashed', 'device-error', 'duplicate', 'measured', "
        "'not-applied', 'unverified', 'verified', 'wrong', got 'great'",
    ),
    (
        "verdict",
        "champion",
        "verdict must be one of '', 'beaten', 'rejected', 'winner', got 'champion'",
    ),
    ("verdict", None, "verdict must be one of '', 'beaten', 'rejected', 'winner', got None"),
    (
        "compilation_info",
        "#iree_codegen.compilation_info<",
        "compilation_info does not parse: error: \"#iree_codegen.compilation_info<\":1:31: unbalanced '<' character in pretty dialect name",
    ),
    (
        "compilation_info",
        "42 : i64",
        "compilation_info must be an #iree_codegen.compilation_info, got '42 : i64'",
    ),
    ("compilation_info", None, "compilation_info must not be null"),
    ("config", "{", "config is not JSON: '{'"),
    (
        "config",
        "[1, 2]",
        "config must be a JSON object of integer or text knobs, or null, got '[1, 2]'",
    ),
    (
        "config",
        '{"vec_m": 4.5}',
        "config must be a JSON object of integer or text knobs, or null, got '{\"vec_m\": 4.5}'",
    ),
    (
        "config",
        '{"vec_n": 4, "vec_m": 8}',
        'config is not in canonical form (sorted keys), got \'{"vec_n": 4, "vec_m": 8}\'',
    ),
    ("config", {"vec_m": 4}, "config must be text, got {'vec_m': 4}"),
    ("session", None, "session must not be null"),
    ("written_at", MISSING, "written_at is missing"),
    ("reason", 5, "reason must be text, got 5"),
    ("outputs_match", "yes", "outputs_match must be true, false or null, got 'yes'"),
    ("extra", 1, "unknown field 'extra'"),
    ("key", "k", "key must be an object, got 'k'"),
    ("key.signature", "", "signature must be non-empty text, got ''"),
    ("key.target", None, "target must not be null"),
    ("key.device", 3, "device must be non-empty text, got 3"),
    ("key.problem", "not json", "problem cannot be read: the problem is not JSON"),
    (
        "key.problem",
        "{}",
        "problem cannot be read: a problem has the fields of no known op family: ",
    ),
    (
        "key.problem",
        json.dumps({**CONTRACTION_FIELDS, "loop_sizes": ["a", 1, 2]}, sort_keys=True),
        "problem cannot be read: problem field 'loop_sizes' holds 'a'",
    ),
    (
        "key.problem",
        json.dumps(
            {**CONTRACTION_FIELDS, "indexing_maps": ["(d0) -> (d7)", "x", "y"]}, sort_keys=True
        ),
        "problem cannot be read: the indexing map '(d0) -> (d7)' does not parse",
    ),
    (
        "key.problem",
        json.dumps(CONTRACTION_FIELDS, sort_keys=True, indent=1),
        "problem cannot be read: the problem is not in canonical form",
    ),
]


@pytest.mark.parametrize(("field", "value", "expected"), BAD_ROWS)
def test_import_refuses_the_whole_file_at_the_first_bad_field(
    field: str,
    value: object,
    expected: str,
    database_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bad = _export_row(stored_result({"vec_m": 2}, "verified", 9.99, verdict="winner"))
    where = bad["key"] if field.startswith("key.") else bad
    assert isinstance(where, dict)
    name = field.removeprefix("key.")
    if value is MISSING:
        del where[name]
    else:
        where[name] = value
    source = tmp_path / "rows.json"
    source.write_text(json.dumps({"ireetune_results": [_export_row(GOOD), bad]}))
    before = _digest(database_file)
    assert main(["db", "--db", str(database_file), "import", str(source)]) == 2
    message = _one_error_line(capsys)
    assert message.startswith(f"rows.json: row 1: {expected}"), message
    assert _digest(database_file) == before


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ("[]", "rows.json is neither an ireetune database nor a results JSON export (no "),
        ('{"ireetune_results": {}}', "rows.json is neither an ireetune database nor a results"),
        ('{"ireetune_results": [3]}', "rows.json: row 0: a row must be an object, got 3"),
        ("[" * 100_000, "rows.json is neither an ireetune database nor a results JSON export"),
    ],
)
def test_import_refuses_a_file_that_is_no_results_list(
    document: str,
    expected: str,
    database_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    source = tmp_path / "rows.json"
    source.write_text(document)
    before = _digest(database_file)
    assert main(["db", "--db", str(database_file), "import", str(source)]) == 2
    assert str(tmp_path / expected) in str(tmp_path / _one_error_line(capsys))
    assert _digest(database_file) == before


def _foreign_tables(path: Path) -> None:
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE customers (name TEXT)")
    connection.commit()
    connection.close()


def _wrong_columns(path: Path) -> None:
    connection = sqlite3.connect(path)
    connection.executescript(
        "CREATE TABLE meta (key TEXT, value TEXT); CREATE TABLE results (id INTEGER);"
        "INSERT INTO meta VALUES ('schema_version', '2');"
    )
    connection.close()


def _ireetune_file_plus(statement: str) -> Callable[[Path], None]:
    def build(path: Path) -> None:
        with TuningDatabase(path) as database:
            database.write(stored_result({"vec_m": 8}, "measured", 1.2))
        connection = sqlite3.connect(path)
        connection.execute("PRAGMA journal_mode = DELETE")
        connection.execute(statement)
        connection.commit()
        connection.close()

    return build


def _garbage(path: Path) -> None:
    path.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 8)


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (_foreign_tables, "is an SQLite file of another program (tables: customers)"),
        (_wrong_columns, "is an SQLite file of another program (its results table has columns id"),
        (
            _ireetune_file_plus("CREATE TABLE notes (text TEXT)"),
            "is an SQLite file of another program (tables: meta, model_results, notes, results)",
        ),
        (
            _ireetune_file_plus(
                "CREATE TRIGGER wipe AFTER INSERT ON results BEGIN DELETE FROM meta; END"
            ),
            "is an SQLite file of another program (tables: meta, model_results, results; also trigger wipe)",
        ),
        (
            _ireetune_file_plus("UPDATE meta SET value = '4' WHERE key = 'schema_version'"),
            "has database schema 4; this ireetune reads 3 (a newer ireetune wrote it)",
        ),
        (_garbage, "is not an ireetune database (file is not a database)"),
    ],
)
@pytest.mark.parametrize("command", [["list"], ["show", "matmul"], ["import", "{source}"]])
def test_refused_database_files_are_left_byte_for_byte(
    build: Callable[[Path], None],
    expected: str,
    command: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "refused.sqlite"
    build(path)
    header = path.read_bytes()[18:20]
    before = _digest(path)
    source = tmp_path / "rows.json"
    source.write_text(json.dumps({"ireetune_results": [_export_row(GOOD)]}))
    arguments = [word.format(source=source) for word in command]
    assert main(["db", "--db", str(path), *arguments]) == 2
    assert _one_error_line(capsys).startswith(f"{path} {expected}")
    assert (_digest(path), path.read_bytes()[18:20]) == (before, header)


def test_a_refused_import_source_is_left_byte_for_byte(
    database_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "other.sqlite"
    _ireetune_file_plus("UPDATE meta SET value = '4' WHERE key = 'schema_version'")(source)
    before = (_digest(source), _digest(database_file))
    assert main(["db", "--db", str(database_file), "import", str(source)]) == 2
    assert _one_error_line(capsys) == (
        f"{source} has database schema 4; this ireetune reads 3 (a newer ireetune wrote it)"
    )
    assert (_digest(source), _digest(database_file)) == before


def _unwritable_folder(tmp_path: Path) -> Path:
    """Return a folder this process cannot create files in."""
    folder = tmp_path / "read_only"
    folder.mkdir()
    folder.chmod(0o500)
    for candidate in (folder, Path("/sys")):
        try:
            with tempfile.TemporaryFile(dir=candidate):
                pass
        except OSError:
            return candidate
    pytest.skip("no folder refuses writes to this user (root without /sys)")


def test_a_database_in_an_unwritable_folder_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _unwritable_folder(tmp_path)
    source = tmp_path / "rows.json"
    source.write_text(json.dumps({"ireetune_results": [_export_row(GOOD)]}))
    path = folder / "tuning.sqlite"
    assert main(["db", "--db", str(path), "import", str(source)]) == 2
    assert _one_error_line(capsys).startswith(f"the database folder {folder} is not writable (")
    assert not path.exists()


def test_db_takes_db_after_the_action_too(
    database_file: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IREETUNE_DB", str(database_file.with_name("elsewhere.sqlite")))
    assert main(["db", "list", "--db", str(database_file)]) == 0
    after = capsys.readouterr().out
    assert main(["db", "--db", str(database_file), "list"]) == 0
    before = capsys.readouterr().out
    assert (
        after
        == before
        == (
            f"{KEY.signature}  {KEY.target}  {KEY.device}  {KEY.compiler_version}: no winner; "
            "measured 1\n"
        )
    )


def test_list_and_show_give_interval_verdict_and_origin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.sqlite"
    winner = replace(
        stored_result({"vec_m": 4}, "verified", 1.4, verdict="winner"),
        speedup_low=1.3,
        speedup_high=1.5,
    )
    claimed = stored_result({"vec_m": 2}, "verified", 9.99, verdict="winner")
    source = tmp_path / "claims.json"
    source.write_text(json.dumps({"ireetune_results": [_export_row(claimed)]}))
    with TuningDatabase(path) as database:
        database.write(winner)
        database.write(stored_result({"vec_m": 8}, "wrong", None, verdict="rejected"))
    assert main(["db", "--db", str(path), "import", str(source)]) == 0
    assert capsys.readouterr().out.startswith("imported 1 of 1 results (0 already present)")
    assert main(["db", "--db", str(path), "list"]) == 0
    assert capsys.readouterr().out == (
        f"{KEY.signature}  {KEY.target}  {KEY.device}  {KEY.compiler_version}: winner 1.400x "
        "[1.300-1.500]; verified 2, wrong 1; 1 imported (candidates to measure again)\n"
    )
    assert main(["db", "--db", str(path), "show", "matmul"]) == 0
    lines = capsys.readouterr().out.splitlines()
    origins = [line.split("  origin ")[1].split("@")[0] for line in lines]
    assert [line.split()[2:6] for line in lines] == [
        ["verified", "winner", "9.990x", "1.0000"],
        ["verified", "winner", "1.400x", "[1.300-1.500]"],
        ["wrong", "rejected", "-", "1.0000"],
    ]
    assert origins == ["imported:claims.json", "local", "local"]


def test_list_and_show_survive_any_stored_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # What the old `db import` let in: text and lists where numbers belong, a BLOB for a name.
    path = tmp_path / "t.sqlite"
    with TuningDatabase(path) as database:
        database.write(stored_result({"vec_m": 4}, "verified", 1.4, verdict="winner"))
    connection = sqlite3.connect(path)
    connection.execute(
        "UPDATE results SET speedup = 'fast', median_ms = '[1]', times_ms = ?, "
        "speedup_low = X'00', outputs_match = 'yes', reason = ?, verdict = 7",
        ("[" * 100_000, "line one\nline two \x1b[31mred"),
    )
    connection.commit()
    connection.close()
    assert main(["db", "--db", str(path), "list"]) == 0
    assert main(["db", "--db", str(path), "show", ""]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[1].endswith("origin local  (line one\\nline two \\x1b[31mred)")
    assert lines[1].split()[2:5] == ["verified", "7", "-"]


def test_export_to_a_missing_folder_fails_before_any_work(
    database_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "nodir" / "x.csv"
    assert (
        main(["db", "--db", str(database_file), "export", "--format", "csv", "-o", str(output)])
        == 2
    )
    assert (
        _one_error_line(capsys) == f"cannot write {output}: folder {output.parent} does not exist"
    )


def test_spec_export_of_a_convolution_winner(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.sqlite"
    with TuningDatabase(path) as database:
        conv = stored_result({"vec_f": 8}, "verified", 1.2, CONV_KEY, "winner")
        database.write(replace(conv, compilation_info=CONV_INFO))
    assert main(["db", "--db", str(path), "export", "--format", "spec"]) == 0
    spec = capsys.readouterr().out
    assert "transform.iree.match.convolution" in spec
    assert "@match_conv_2x32x16x16x16x3x3_f32_f32_f32 -> @apply_op_config" in spec
