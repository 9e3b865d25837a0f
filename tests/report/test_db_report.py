"""The report across runs, read from a real tuning database."""

from __future__ import annotations

from pathlib import Path

import pytest

from ireetune.cli import main
from ireetune.database.store import ResultKey, StoredResult, TuningDatabase
from ireetune.report.db_report import DatabaseSummary, GroupSummary, ProblemSummary

CPU = "cpu#b57d1d88ca88"
DEVICE = "local-task (test CPU)"


def _result(
    signature: str, compiler: str, status: str, speedup: float | None, config: str, session: str
) -> StoredResult:
    key = ResultKey(compiler, CPU, DEVICE, f"{signature}-key", signature)
    return StoredResult(
        key, config, "", status, "", (1.0,), 1.0, 1.0, 1.0, 0.0, 1.0, speedup, session, "now"
    )


def _fill(path: Path) -> None:
    with TuningDatabase(path) as database:
        for result in (
            # Two runs of one problem on 3.13: the best verified result wins; a faster wrong
            # result does not count.
            _result("matmul_a", "iree 3.13.0", "verified", 1.5, '{"t": 1}', "run-1"),
            _result("matmul_a", "iree 3.13.0", "verified", 2.0, '{"t": 2}', "run-2"),
            _result("matmul_a", "iree 3.13.0", "wrong", 3.0, '{"t": 3}', "run-2"),
            # A problem where nothing verified: it counts as 1x in the means.
            _result("matmul_b", "iree 3.13.0", "compile-failed", None, '{"t": 1}', "run-3"),
            # The same problem on an older compiler.
            _result("matmul_a", "iree 3.12.0", "verified", 1.21, '{"t": 1}', "run-0"),
        ):
            database.write(result)


def test_db_report_summarizes_per_problem_target_and_compiler(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ireetune.report.db_report import summarize_results

    path = tmp_path / "tuning.sqlite"
    _fill(path)
    with TuningDatabase(path) as database:
        summary = summarize_results(database.all_results())
    assert summary == DatabaseSummary(
        problems=(
            ProblemSummary("matmul_a", CPU, DEVICE, "iree 3.12.0", 1, 1, 1, 1.21),
            ProblemSummary("matmul_a", CPU, DEVICE, "iree 3.13.0", 2, 3, 2, 2.0),
            ProblemSummary("matmul_b", CPU, DEVICE, "iree 3.13.0", 1, 1, 0, None),
        ),
        by_target=(GroupSummary(f"cpu on {DEVICE}", 3, 2, pytest.approx((1.21 * 2.0) ** (1 / 3))),),
        by_compiler=(
            GroupSummary("iree 3.12.0", 1, 1, pytest.approx(1.21)),
            GroupSummary("iree 3.13.0", 2, 1, pytest.approx(2.0**0.5)),
        ),
    )

    output = tmp_path / "db.html"
    assert main(["db", "--db", str(path), "report", "-o", str(output)]) == 0
    text = capsys.readouterr().out
    assert "  matmul_b  cpu  local-task (test CPU)  iree 3.13.0: no verified result" in text
    assert "  iree 3.13.0: 1.414x over 2 problem(s), 1 improved" in text
    page = output.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") == 1
    assert "matmul_a (iree 3.12.0)" in page


def test_db_report_of_an_empty_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "empty.sqlite"
    TuningDatabase(path).close()
    assert main(["db", "--db", str(path), "report"]) == 0
    assert capsys.readouterr().out == "the database is empty\n"
