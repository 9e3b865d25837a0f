"""`ireetune replay` re-measures a run's candidate against the default on the deciding signal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ireetune.cli import main


@pytest.fixture(scope="module")
def tuned_run(matmul_benchmark: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    output = tmp_path_factory.mktemp("replay")
    status = main(
        [
            "tune-dispatch", str(matmul_benchmark), "--num-candidates", "3", "--no-db",
            "--output-dir", str(output), "--repetitions", "2", "--confirm-rounds", "2",
            "--min-repetition-time", "0.005", "--no-progress",
        ]
    )  # fmt: skip
    assert status == 0
    (run_dir,) = output.iterdir()
    return run_dir


def test_replay_times_a_candidate_side_by_side_on_the_runs_basis(
    tuned_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = json.loads((tuned_run / "results.json").read_text())
    capsys.readouterr()
    status = main(
        ["replay", str(tuned_run), "--candidate", "1", "--rounds", "2", "--repetitions", "2"]
    )
    out = capsys.readouterr().out
    assert status == 0
    assert out.startswith("candidate 1 vs default, 2 rounds side by side on ")
    assert f"on {results['timing_basis']} timing" in out
    assert "x [" in out


def test_replay_without_a_winner_or_folder_is_one_line(
    tuned_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a run folder" in err
    results = json.loads((tuned_run / "results.json").read_text())
    if results["decision"]["winner"] is None:
        assert main(["replay", str(tuned_run)]) == 2
        assert "has no winner" in capsys.readouterr().err
