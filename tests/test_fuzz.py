"""Property-based bad input: one clear error line, a non-zero exit, stored results untouched."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ireetune.cli import main
from ireetune.database.exchange import results_to_json
from ireetune.database.store import ResultKey, StoredResult, TuningDatabase

# Text a file or a database can hold: lone surrogates have no UTF-8 encoding, so writing them
# fails in the test itself, before the code under test reads anything.
CHARACTERS = st.characters(blacklist_categories=("Cs",))

FUZZ = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture()
def stored_database(tmp_path: Path) -> Path:
    path = tmp_path / "keep.sqlite"
    with TuningDatabase(path) as database:
        key = ResultKey("v", "cpu#x", "local-task", "{}", "matmul_1x1x1_f32_f32_f32")
        database.write(
            StoredResult(
                key,
                '{"vec_m": 1}',
                "",
                "verified",
                "",
                (1.0,),
                1.0,
                1.0,
                1.0,
                0.0,
                2.0,
                2.0,
                "s",
                "now",
            )
        )
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _assert_clean_failure(status: int, stderr: str) -> None:
    assert status == 2
    assert stderr.startswith("ireetune: error: ") and stderr.count("\n") == 1, stderr
    assert "Traceback" not in stderr


@FUZZ
@given(cut=st.floats(min_value=0.0, max_value=0.97))
def test_truncated_dispatch_files_are_rejected_cleanly(
    cut: float,
    matmul_benchmark: Path,
    stored_database: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = matmul_benchmark.read_text()
    broken = tmp_path / "broken_benchmark.mlir"
    broken.write_text(text[: int(len(text) * cut)])
    before = _digest(stored_database)
    status = main(
        [
            "tune-dispatch",
            str(broken),
            "--db",
            str(stored_database),
            "--output-dir",
            str(tmp_path / "runs"),
        ]
    )
    _assert_clean_failure(status, capsys.readouterr().err)
    assert _digest(stored_database) == before


@FUZZ
@given(noise=st.binary(min_size=1, max_size=400))
def test_garbage_mlir_is_rejected_cleanly(
    noise: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "garbage.mlir"
    path.write_bytes(b"func.func @x(" + noise)
    status = main(["tune-dispatch", str(path), "--no-db", "--output-dir", str(tmp_path / "runs")])
    _assert_clean_failure(status, capsys.readouterr().err)


@FUZZ
@given(content=st.binary(max_size=600), keep=st.integers(min_value=1, max_value=4000))
def test_truncated_or_foreign_database_is_rejected_and_untouched(
    content: bytes,
    keep: int,
    stored_database: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    damaged = tmp_path / "damaged.sqlite"
    damaged.write_bytes(stored_database.read_bytes()[:keep] + content)
    before = _digest(damaged)
    status = main(["db", "--db", str(damaged), "list"])
    stderr = capsys.readouterr().err
    if status == 0:
        # A prefix that happens to hold the whole first page is still a readable database.
        assert stderr == ""
        return
    _assert_clean_failure(status, stderr)
    assert _digest(damaged) == before


@FUZZ
@given(document=st.one_of(st.text(CHARACTERS, max_size=300), st.binary(max_size=300)))
def test_malformed_import_files_never_change_stored_results(
    document: str | bytes, stored_database: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "import.json"
    if isinstance(document, bytes):
        source.write_bytes(document)
    else:
        source.write_text(document)
    before = _digest(stored_database)
    status = main(["db", "--db", str(stored_database), "import", str(source)])
    _assert_clean_failure(status, capsys.readouterr().err)
    assert _digest(stored_database) == before


FLAG_WORDS = st.sampled_from(
    [
        "tune-dispatch",
        "db",
        "list",
        "export",
        "--target",
        "--num-candidates",
        "--jobs",
        "-1",
        "0",
        "abc",
        "--format",
        "xml",
        "--seed",
        "x.mlir",
        "--devices",
        "--repetitions",
        "--frobnicate",
        "--db",
    ]
)


@FUZZ
@given(argv=st.lists(FLAG_WORDS, min_size=0, max_size=6))
def test_nonsense_flags_give_one_clear_line(
    argv: list[str],
    stored_database: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("IREETUNE_DB", str(stored_database))
    before = _digest(stored_database)
    status = main(argv)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    if status != 0:
        _assert_clean_failure(status, captured.err)
    assert _digest(stored_database) == before


SPEC_TEXT = """module attributes {transform.with_named_sequence, iree_codegen.tuning_spec_with_default_entrypoint} {
  transform.named_sequence @__kernel_config(%arg0: !transform.any_op {transform.consumed}) -> !transform.any_op attributes {iree_codegen.tuning_spec_entrypoint} {
    transform.yield %arg0 : !transform.any_op
  }
}
"""


@FUZZ
@given(
    cut=st.integers(min_value=0, max_value=len(SPEC_TEXT) - 2),
    # Without a closing brace the truncated module can never become valid again.
    noise=st.text(
        alphabet=st.characters(blacklist_characters="}", blacklist_categories=("Cs",)), max_size=20
    ),
)
def test_malformed_specs_are_rejected_cleanly(
    cut: int, noise: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "spec.mlir"
    spec.write_text(SPEC_TEXT[:cut] + noise)
    for command in (["spec", "check", str(spec)], ["spec", "show", str(spec)]):
        status = main(command)
        captured = capsys.readouterr()
        assert status != 0
        assert "Traceback" not in captured.err and "Traceback" not in captured.out


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(CHARACTERS, max_size=30),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(CHARACTERS, max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
ROW_FIELDS = st.sampled_from(
    [
        "config",
        "compilation_info",
        "status",
        "reason",
        "times_ms",
        "median_ms",
        "speedup",
        "speedup_low",
        "outputs_match",
        "verdict",
        "session",
        "key.problem",
        "key.signature",
        "key",
    ]
)


@FUZZ
@given(field=ROW_FIELDS, value=JSON_VALUES)
def test_any_value_in_an_import_row_is_stored_validly_or_refused_cleanly(
    field: str,
    value: object,
    stored_database: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tests.database.test_database import stored_result

    (row,) = json.loads(results_to_json([stored_result({"vec_m": 2}, "verified", 2.0)]))[
        "ireetune_results"
    ]
    where = row["key"] if field.startswith("key.") else row
    where[field.removeprefix("key.")] = value
    source = tmp_path / "rows.json"
    source.write_text(json.dumps({"ireetune_results": [row]}))
    before = _digest(stored_database)
    status = main(["db", "--db", str(stored_database), "import", str(source)])
    captured = capsys.readouterr()
    if status != 0:
        _assert_clean_failure(status, captured.err)
        assert captured.err.startswith("ireetune: error: rows.json: row 0: "), captured.err
        assert _digest(stored_database) == before
        return
    # Accepted: then every reader copes with it.
    for command in (["list"], ["show", ""], ["export", "--format", "json"]):
        assert main(["db", "--db", str(stored_database), *command]) == 0
    assert capsys.readouterr().err == ""


SQL_VALUES = st.one_of(
    st.none(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.text(CHARACTERS, max_size=30),
    st.binary(max_size=30),
)
STORED_COLUMNS = st.sampled_from(
    [
        "signature",
        "config",
        "status",
        "reason",
        "times_ms",
        "median_ms",
        "speedup",
        "speedup_low",
        "speedup_high",
        "outputs_match",
        "real_input_speedup",
        "verdict",
        "origin",
    ]
)


@FUZZ
@given(column=STORED_COLUMNS, value=SQL_VALUES)
def test_list_and_show_never_crash_on_a_stored_value(
    column: str,
    value: object,
    stored_database: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    connection = sqlite3.connect(stored_database)
    try:
        connection.execute(f"UPDATE results SET {column} = ?", (value,))
        connection.commit()
    except sqlite3.IntegrityError:
        assume(False)  # NOT NULL columns cannot hold it.
    finally:
        connection.close()
    for command in (["list"], ["show", ""]):
        assert main(["db", "--db", str(stored_database), *command]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and len(captured.out.splitlines()) == 2
