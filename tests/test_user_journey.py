"""A new user's journey on one tuning database, through the real command line (issue 22).

`tune` (flag phase on), `tune-dispatch`, `db list/show/export/import/report`, `replay`, `report`
and `compile` run one after another on the same database; none may be refused, and what one
command stored is what the next one sees. The journey runs twice: on a database named with
`--db`, and on the default database under a temporary HOME. Everything is kept small (a 64^3
matmul, two candidates, two flag sets, two timing rounds), because CI runs on two cores.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from ireetune.cli import main
from ireetune.database.schema import SCHEMA_VERSION
from ireetune.flags.file import FLAGS_FILE_NAME
from tests.conftest import MATMUL_MODEL

MM64_MODEL = """
func.func @main(%lhs: tensor<64x64xf32>, %rhs: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<64x64xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<64x64xf32>) -> tensor<64x64xf32>
  %r = linalg.matmul ins(%lhs, %rhs : tensor<64x64xf32>, tensor<64x64xf32>)
                     outs(%init : tensor<64x64xf32>) -> tensor<64x64xf32>
  return %r : tensor<64x64xf32>
}
"""
# What `tune` tunes (the model above) and what `tune-dispatch` tunes (conftest's MATMUL_MODEL).
TUNE_PROBLEM = "matmul_64x64x64_f32_f32_f32"
DISPATCH_PROBLEM = "matmul_64x128x96_f32_f32_f32"


def _run(arguments: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run one command; it must succeed. Return what it printed."""
    capsys.readouterr()
    status = main(arguments)
    captured = capsys.readouterr()
    assert status == 0, f"ireetune {' '.join(arguments)}: {captured.err}"
    assert "error" not in captured.err, captured.err
    return captured.out


def _only(folder: Path, pattern: str) -> Path:
    (path,) = sorted(folder.glob(pattern))
    return path


def _walk_the_journey(
    work: Path,
    database: Path,
    db_option: list[str],
    benchmark: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    model = work / "mm64.mlir"
    model.write_text(MM64_MODEL)
    fast = ["--no-progress", "--jobs", "2", "--seed", "1"]

    _run(
        # The flag phase runs but keeps no set (a threshold no set clears): a kept set such as
        # data tiling would turn the matmul into other dispatches, and the journey below reads
        # the database for the matmul's problem.
        ["tune", str(model), "--num-candidates", "2", "--max-flag-sets", "2", "--rounds", "2",
         "--flag-threshold", "1000", "--output-dir", str(work / "runs"), *db_option, *fast],
        capsys,
    )  # fmt: skip
    model_run = _only(work / "runs", "model_mm64_*")
    assert database.is_file()

    tune_dispatch_out = _run(
        ["tune-dispatch", str(benchmark), "--num-candidates", "2", "--repetitions", "2",
         "--confirm-rounds", "1", "--min-repetition-time", "0.002",
         "--output-dir", str(work / "dispatch_runs"), *db_option, *fast],
        capsys,
    )  # fmt: skip
    dispatch_run = _only(work / "dispatch_runs", f"{DISPATCH_PROBLEM}_*")
    assert f"run folder: {dispatch_run}" in tune_dispatch_out

    # Both runs' results are in the one database, and every db command reads it.
    listed = _run(["db", *db_option, "list"], capsys)
    assert sorted(line.split()[0] for line in listed.splitlines()) == sorted(
        [TUNE_PROBLEM, DISPATCH_PROBLEM]
    )
    shown = _run(["db", *db_option, "show", DISPATCH_PROBLEM], capsys)
    assert shown and all(line.startswith(DISPATCH_PROBLEM) for line in shown.splitlines())

    exported = work / "exported" / "results.json"
    exported.parent.mkdir()
    _run(["db", *db_option, "export", "--format", "json", "-o", str(exported)], capsys)
    rows = json.loads(exported.read_text())["ireetune_results"]
    assert {row["key"]["signature"] for row in rows} == {TUNE_PROBLEM, DISPATCH_PROBLEM}
    csv_path = work / "exported" / "results.csv"
    _run(["db", *db_option, "export", "--format", "csv", "-o", str(csv_path)], capsys)
    assert len(csv_path.read_text().splitlines()) == len(rows) + 1

    imported = _run(["db", *db_option, "import", str(exported)], capsys)
    assert imported.startswith(f"imported 0 of {len(rows)} results ({len(rows)} already present)")

    report_page = work / "exported" / "database.html"
    reported = _run(["db", *db_option, "report", "-o", str(report_page)], capsys)
    assert TUNE_PROBLEM in reported and DISPATCH_PROBLEM in reported
    assert report_page.is_file()

    candidate = min(
        int(path.stem) for path in (dispatch_run / "binaries").glob("*.vmfb") if path.stem != "0"
    )
    replayed = _run(
        ["replay", str(dispatch_run), "--candidate", str(candidate), "--rounds", "2",
         "--repetitions", "2"],
        capsys,
    )  # fmt: skip
    assert f"candidate {candidate} vs default" in replayed

    run_page = work / "exported" / "run.html"
    _run(["report", str(model_run), "-o", str(run_page)], capsys)
    assert run_page.is_file()

    # The model whose dispatch tune-dispatch tuned, with that run's spec and tune's flags.
    dispatch_model = work / "matmul.mlir"
    dispatch_model.write_text(MATMUL_MODEL)
    flags_file = model_run / FLAGS_FILE_NAME
    binary = work / "exported" / "tuned.vmfb"
    _run(
        ["compile", str(dispatch_model), "--target", "cpu",
         "--spec", str(dispatch_run / "specs" / f"{candidate}_spec.mlir"),
         *(["--flags-file", str(flags_file)] if flags_file.is_file() else []),
         "-o", str(binary)],
        capsys,
    )  # fmt: skip
    assert binary.stat().st_size > 0

    # The flag phase's row sits in the same file, under the schema every command knows.
    connection = sqlite3.connect(database)
    version = connection.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    models = connection.execute("SELECT model_name FROM model_results").fetchall()
    connection.close()
    assert (version, models) == ((str(SCHEMA_VERSION),), [("mm64.mlir",)])


def test_the_journey_on_one_named_database(
    matmul_benchmark: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = tmp_path / "journey.sqlite"
    _walk_the_journey(tmp_path, database, ["--db", str(database)], matmul_benchmark, capsys)


def test_the_journey_on_the_default_database_under_a_new_home(
    matmul_benchmark: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("IREETUNE_DB", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    database = home / ".cache" / "ireetune" / "tuning.sqlite"
    work = tmp_path / "work"
    work.mkdir()
    _walk_the_journey(work, database, [], matmul_benchmark, capsys)
