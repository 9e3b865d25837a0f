"""The tuning database: keys, WAL, foreign files, concurrency, export and import."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from ireetune.core.errors import IreetuneError
from ireetune.database.exchange import (
    problem_from_key,
    read_results_file,
    results_to_json,
)
from ireetune.database.store import (
    ResultKey,
    StoredResult,
    TuningDatabase,
    compiler_version,
    config_key,
    problem_key,
)
from ireetune.spec.export import render_linked_spec
from tests.conftest import MATMUL_64X128X96, nchw_conv_problem

PROBLEM = MATMUL_64X128X96
KEY = ResultKey(
    compiler_version(),
    "cpu#abc",
    "local-task (test cpu, 2 cores)",
    problem_key(PROBLEM),
    PROBLEM.signature,
)
INFO = (
    "#iree_codegen.compilation_info<lowering_config = #iree_cpu.lowering_config<distribution = [32, 64, 0], "
    "vector_common_parallel = [8, 16, 0], vector_reduction = [0, 0, 16]>, translation_info = "
    "#iree_codegen.translation_info<pipeline = #iree_cpu.pipeline<DoubleTilingExpert>>>"
)


def stored_result(
    config: dict[str, int] | None,
    status: str,
    speedup: float | None,
    key: ResultKey = KEY,
    verdict: str = "",
    origin: str = "local",
) -> StoredResult:
    """Make a row of the test problem with the given config, status and speedup."""
    return StoredResult(
        key,
        config_key(None if config is None else tuple(sorted(config.items()))),
        INFO,
        status,
        "",
        (1.0, 1.1),
        1.0,
        1.0,
        1.1,
        0.1,
        1.5,
        speedup,
        "session-a",
        "2026-11-23T00:00:00+00:00",
        verdict=verdict,
        rule="test-rule",
        origin=origin,
    )


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_write_then_lookup_returns_results_by_config(tmp_path: Path) -> None:
    with TuningDatabase(tmp_path / "t.sqlite") as database:
        database.write(stored_result({"vec_m": 8}, "measured", 1.2))
        database.write(stored_result({"vec_m": 4}, "verified", 1.4))
        database.write(
            stored_result({"vec_m": 4}, "wrong", None)
        )  # Same key: replaced, not duplicated.
        found = database.lookup(KEY)
        mode = database._connection.execute("PRAGMA journal_mode").fetchone()[0]
    assert sorted(found) == ['{"vec_m": 4}', '{"vec_m": 8}']
    assert found['{"vec_m": 4}'].status == "wrong"
    assert found['{"vec_m": 8}'].times_ms == (1.0, 1.1)
    assert mode == "wal"


def test_other_compiler_versions_are_stale_not_current(tmp_path: Path) -> None:
    old_key = ResultKey(
        "iree-base-compiler 3.12.0", KEY.target, KEY.device, KEY.problem, KEY.signature
    )
    with TuningDatabase(tmp_path / "t.sqlite") as database:
        database.write(stored_result({"vec_m": 2}, "verified", 1.3, old_key, verdict="winner"))
        # A verified row that lost under the rule is no result worth carrying across versions.
        database.write(stored_result({"vec_m": 4}, "verified", 1.5, old_key, verdict="beaten"))
        assert database.lookup(KEY) == {}
        assert [r.knobs for r in database.lookup_stale(KEY)] == [(("vec_m", 2),)]
        assert database.best_results() == []


def test_only_local_winners_are_best_results(tmp_path: Path) -> None:
    with TuningDatabase(tmp_path / "t.sqlite") as database:
        # Verified and fastest at dispatch level, but the rule did not choose it: never reused.
        database.write(stored_result({"vec_m": 8}, "verified", 1.9, verdict="beaten"))
        database.write(stored_result({"vec_m": 4}, "verified", 1.2, verdict="winner"))
        database.write(
            stored_result({"vec_m": 2}, "verified", 9.9, verdict="winner", origin="imported")
        )
        best = database.best_results()
        stale = database.lookup_stale(KEY)
    assert [r.knobs for r in best] == [(("vec_m", 4),)]
    assert [r.knobs for r in stale] == [(("vec_m", 2),)]


def write_schema_1_file(path: Path) -> None:
    """Write a database as schema 1 wrote it: one verified row, speedup 2.0, no verdict."""
    connection = sqlite3.connect(path)
    connection.executescript(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "INSERT INTO meta VALUES ('schema_version', '1');"
        "CREATE TABLE results (compiler_version TEXT NOT NULL, target TEXT NOT NULL, device TEXT "
        "NOT NULL, problem TEXT NOT NULL, signature TEXT NOT NULL, config TEXT NOT NULL, "
        "compilation_info TEXT NOT NULL, status TEXT NOT NULL, reason TEXT NOT NULL, times_ms TEXT "
        "NOT NULL, median_ms REAL, min_ms REAL, max_ms REAL, spread REAL, baseline_ms REAL, "
        "speedup REAL, session TEXT NOT NULL, written_at TEXT NOT NULL, PRIMARY KEY "
        "(compiler_version, target, device, problem, config));"
    )
    connection.execute(
        "INSERT INTO results VALUES (?, ?, ?, ?, ?, '{\"vec_m\": 4}', '', 'verified', '', "
        "'[1.0]', 1.0, 1.0, 1.0, 0.0, 2.0, 2.0, 's', 'then')",
        (KEY.compiler_version, KEY.target, KEY.device, KEY.problem, KEY.signature),
    )
    connection.commit()
    connection.close()


def test_schema_1_file_is_upgraded_and_its_rows_are_not_winners(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    write_schema_1_file(path)
    with TuningDatabase(path) as database:
        rows = list(database.lookup(KEY).values())
        best = database.best_results()
    assert [(r.status, r.verdict, r.origin) for r in rows] == [("verified", "", "local")]
    assert best == []


def test_foreign_sqlite_file_is_refused_and_left_unchanged(tmp_path: Path) -> None:
    foreign = tmp_path / "other.sqlite"
    connection = sqlite3.connect(foreign)
    connection.execute("CREATE TABLE customers (name TEXT)")
    connection.commit()
    connection.close()
    before = _digest(foreign)
    with pytest.raises(IreetuneError) as excinfo:
        TuningDatabase(foreign)
    assert "another program" in str(excinfo.value)
    assert _digest(foreign) == before


@pytest.mark.parametrize(
    "content", [b"", b"SQLite format 3\x00" + b"\x07" * 50, b"hello world" * 100]
)
def test_truncated_or_garbage_file_is_refused(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "broken.sqlite"
    path.write_bytes(content)
    if not content:
        # An empty file is a new database to SQLite: it becomes a valid, empty one.
        with TuningDatabase(path) as database:
            assert list(database.all_results()) == []
        return
    with pytest.raises(IreetuneError):
        TuningDatabase(path)
    assert path.read_bytes() == content


WRITER = """
import sys
from ireetune.database.store import ResultKey, StoredResult, TuningDatabase
path, worker = sys.argv[1], int(sys.argv[2])
key = ResultKey("v", "t", "d", "p", "s")
with TuningDatabase(__import__("pathlib").Path(path)) as database:
    for index in range(150):
        database.write(StoredResult(key, f"{worker}-{index}", "", "measured", "", (1.0,), 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, str(worker), "now"))
"""


def test_four_processes_write_at_once_without_loss_or_locking(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite"
    TuningDatabase(path).close()
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), str(worker)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for worker in range(4)
    ]
    errors = [writer.communicate(timeout=120)[1] for writer in writers]
    assert [writer.returncode for writer in writers] == [0, 0, 0, 0], errors
    with TuningDatabase(path) as database:
        configs = [r.config for r in database.all_results()]
        integrity = database._connection.execute("PRAGMA integrity_check").fetchone()[0]
    assert len(configs) == 600 and len(set(configs)) == 600
    assert integrity == "ok"


def test_export_json_then_import_adds_only_missing_rows(tmp_path: Path) -> None:
    source = tmp_path / "a.sqlite"
    with TuningDatabase(source) as database:
        database.write(stored_result({"vec_m": 8}, "measured", 1.2))
        database.write(stored_result({"vec_m": 4}, "verified", 1.4))
        exported = tmp_path / "export.json"
        exported.write_text(results_to_json(list(database.all_results())))
    with TuningDatabase(tmp_path / "b.sqlite") as target:
        target.write(stored_result({"vec_m": 8}, "wrong", None))
        assert target.import_results(read_results_file(exported, "then")) == 1
        assert target.import_results(read_results_file(source, "then")) == 0
        rows = {r.config: (r.status, r.origin) for r in target.all_results()}
    assert rows == {
        '{"vec_m": 4}': ("verified", "imported:export.json@then"),
        '{"vec_m": 8}': ("wrong", "local"),
    }


def test_linked_spec_export_has_one_matcher_per_best_problem(tmp_path: Path) -> None:
    with TuningDatabase(tmp_path / "t.sqlite") as database:
        database.write(stored_result({"vec_m": 8}, "verified", 1.2, verdict="winner"))
        database.write(stored_result({"vec_m": 4}, "verified", 1.4, verdict="winner"))
        database.write(stored_result({"vec_m": 2}, "verified", 1.9, verdict="beaten"))
        best = database.best_results()
    assert [r.speedup for r in best] == [1.4]
    spec = render_linked_spec(best)
    assert "@match_matmul_64x128x96_f32_f32_f32 -> @apply_op_config" in spec
    assert "transform.iree.match.dims_equal %k_dims, [96]" in spec


def test_import_rejects_a_file_that_is_neither_format(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"something": []}))
    with pytest.raises(IreetuneError) as excinfo:
        read_results_file(path)
    assert "neither an ireetune database nor a results JSON export" in str(excinfo.value)


CONV = nchw_conv_problem(2, 32, 16, 16, 3)
CONV_KEY = ResultKey(
    KEY.compiler_version, KEY.target, KEY.device, problem_key(CONV), CONV.signature
)
CONV_INFO = (
    "#iree_codegen.compilation_info<lowering_config = #iree_cpu.lowering_config<distribution = "
    "[1, 8, 16, 16, 0, 0, 0], vector_common_parallel = [1, 8, 1, 8, 0, 0, 0], vector_reduction = "
    "[0, 0, 0, 0, 8, 1, 1]>, translation_info = #iree_codegen.translation_info<pipeline = "
    "#iree_cpu.pipeline<ConvTileAndDecomposeExpert>>>"
)


def test_stored_problem_keys_keep_their_text_and_read_back_into_their_family() -> None:
    # Existing rows are found by this exact text: it must not change (no family field added).
    assert problem_key(PROBLEM) == (
        '{"batch_dims": [], "indexing_maps": ["(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> '
        '(d2, d1)", "(d0, d1, d2) -> (d0, d1)"], "k_dims": [2], "lhs_shape": [64, 96], '
        '"lhs_type": "f32", "loop_sizes": [64, 128, 96], "m_dims": [0], "n_dims": [1], '
        '"op_name": "linalg.matmul", "output_shape": [64, 128], "output_type": "f32", '
        '"rhs_shape": [96, 128], "rhs_type": "f32"}'
    )
    assert [problem_from_key(problem_key(p)) for p in (PROBLEM, CONV)] == [PROBLEM, CONV]


def test_spec_export_builds_convolution_and_contraction_matchers(tmp_path: Path) -> None:
    with TuningDatabase(tmp_path / "t.sqlite") as database:
        database.write(stored_result({"vec_m": 4}, "verified", 1.4, verdict="winner"))
        conv = stored_result({"vec_f": 8}, "verified", 1.2, CONV_KEY, "winner")
        database.write(replace(conv, compilation_info=CONV_INFO))
        spec = render_linked_spec(database.best_results())
    assert "@match_conv_2x32x16x16x16x3x3_f32_f32_f32 -> @apply_op_config" in spec
    assert "@match_matmul_64x128x96_f32_f32_f32 -> @apply_op_config" in spec
    assert "transform.iree.match.dims_equal %output_image_dims, [16, 16]" in spec


def _export_rows(*results: StoredResult) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = json.loads(results_to_json(list(results)))["ireetune_results"]
    return rows


def test_imported_verdicts_are_candidates_never_local_results(tmp_path: Path) -> None:
    # Another machine claims a verified 9.99x winner for this very key.
    claimed = stored_result({"vec_m": 2}, "verified", 9.99, verdict="winner")
    source = tmp_path / "claims.json"
    source.write_text(json.dumps({"ireetune_results": _export_rows(claimed)}))
    with TuningDatabase(tmp_path / "t.sqlite") as database:
        assert database.import_results(read_results_file(source, "then")) == 1
        best = database.best_results()
        resumable = database.lookup(KEY)
        candidates = [(r.knobs, r.verdict, r.origin) for r in database.lookup_stale(KEY)]
    assert (best, resumable) == ([], {})
    assert candidates == [((("vec_m", 2),), "winner", "imported:claims.json@then")]


def test_a_null_in_a_required_column_is_an_error_not_a_skipped_row(tmp_path: Path) -> None:
    with TuningDatabase(tmp_path / "t.sqlite") as database:
        with pytest.raises(sqlite3.IntegrityError) as excinfo:
            database.import_results(
                [replace(stored_result({"vec_m": 2}, "measured", 1.0), session=None)]
            )  # type: ignore[arg-type]
        assert list(database.all_results()) == []
    assert "NOT NULL constraint failed: results.session" in str(excinfo.value)


def _rollback_mode(path: Path) -> None:
    """Leave a file in rollback-journal mode (header bytes 18-19 = 1, 1), as most programs do."""
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA journal_mode = DELETE")
    connection.close()
    assert path.read_bytes()[18:20] == b"\x01\x01"


def test_importing_another_database_never_changes_it(tmp_path: Path) -> None:
    source = tmp_path / "other.sqlite"
    with TuningDatabase(source) as database:
        database.write(stored_result({"vec_m": 4}, "verified", 1.4, verdict="winner"))
    _rollback_mode(source)
    before = _digest(source)
    results = read_results_file(source, "then")
    assert [(r.knobs, r.origin) for r in results] == [
        ((("vec_m", 4),), "imported:other.sqlite@then")
    ]
    assert _digest(source) == before


def test_rows_of_another_database_are_validated_like_json_rows(tmp_path: Path) -> None:
    source = tmp_path / "other.sqlite"
    with TuningDatabase(source) as database:
        database.write(stored_result({"vec_m": 4}, "verified", 1.4))
        database.write(stored_result({"vec_m": 8}, "verified", 1.4))
    connection = sqlite3.connect(source)
    connection.execute("UPDATE results SET speedup = 'fast' WHERE config = '{\"vec_m\": 8}'")
    connection.commit()
    connection.close()
    with pytest.raises(IreetuneError) as excinfo:
        read_results_file(source)
    assert str(excinfo.value) == (
        "other.sqlite: row 1: speedup must be a finite number >= 0 or null, got 'fast'"
    )


def test_a_schema_1_import_source_is_read_without_upgrading_it(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    write_schema_1_file(path)
    before = _digest(path)
    (result,) = read_results_file(path, "now")
    assert (result.status, result.speedup, result.verdict, result.origin) == (
        "verified",
        2.0,
        "",
        "imported:old.sqlite@now",
    )
    assert _digest(path) == before


def test_a_database_whose_path_holds_uri_characters_is_inspected_and_opened(
    tmp_path: Path,
) -> None:
    # The read-only inspection names the file by URI: '?', '#' and '%' must not cut it short.
    path = tmp_path / "odd?dir #1%20" / "tuning?v=1#x%41.sqlite"
    with TuningDatabase(path) as database:
        database.write(stored_result({"vec_m": 8}, "measured", 1.2))
    with TuningDatabase(path) as database:
        assert [r.config for r in database.all_results()] == ['{"vec_m": 8}']
    assert [r.config for r in read_results_file(path)] == ['{"vec_m": 8}']
