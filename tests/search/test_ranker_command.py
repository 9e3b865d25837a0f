"""`ireetune ranker train|explain` (and its old name, `ireetune model`) through the command line."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from ireetune.search.recorded import RecordedRow
from ireetune.targets.llvm_cpu.features import FEATURE_FAMILY
from tests.search.test_recorded_spaces import SPACE, _knobs, write_recorded_space


def _ireetune(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ireetune.cli", *arguments],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ},
    )


def _write_spaces(folder: Path) -> None:
    """Three small recorded spaces in which more accumulator rows run faster."""
    for index in range(3):
        rows = tuple(
            RecordedRow(_knobs(16 * (index + 1), vec_m), "measured", 8.0 / vec_m, 8.0 / vec_m)
            for vec_m in (1, 2, 4, 8)
        )
        write_recorded_space(replace(SPACE, name=f"space_{index}", rows=rows), folder)


def test_train_then_explain(tmp_path: Path) -> None:
    _write_spaces(tmp_path / "spaces")
    database = tmp_path / "db" / "tuning.sqlite"
    trained = _ireetune(
        "ranker", "train", "--spaces", str(tmp_path / "spaces"), "--db", str(database)
    )
    assert trained.returncode == 0, trained.stderr
    model_path = tmp_path / "db" / "models" / f"{FEATURE_FAMILY.replace('/', '_')}.json"
    assert trained.stdout.startswith(
        f"{FEATURE_FAMILY}: 3 problems, 12 candidates -> {model_path} ("
    )
    explained = _ireetune("ranker", "explain", "--db", str(database))
    assert explained.returncode == 0, explained.stderr
    lines = explained.stdout.splitlines()
    assert lines[0].startswith(f"{model_path.name}: {FEATURE_FAMILY}, trained ")
    assert " on 3 problems (12 candidates), " in lines[0]
    # Only the register block differs between candidates, so only its features can matter.
    assert {line.split()[-1] for line in lines[1:] if "the other" not in line} <= {
        "log_vec_m", "accumulator_registers", "register_use", "intensity", "l1_use",
        "heuristic_score", "padding_m",
    }  # fmt: skip


def test_explain_without_a_model_is_one_line_and_status_2(tmp_path: Path) -> None:
    result = _ireetune("ranker", "explain", "--db", str(tmp_path / "tuning.sqlite"))
    assert result.returncode == 2
    assert result.stderr == (
        f"ireetune: error: no cost model in {tmp_path / 'models'}: run `ireetune ranker train "
        "--spaces DIR`, or tune until the database holds enough measured problems\n"
    )


def test_train_with_nothing_to_learn_from_is_one_line(tmp_path: Path) -> None:
    result = _ireetune("model", "train", "--db", str(tmp_path / "tuning.sqlite"))
    assert result.returncode == 2
    assert result.stderr.startswith("ireetune: error: nothing to train on:")
    assert result.stderr.count("\n") == 1


def test_a_spaces_folder_that_is_not_one_is_refused(tmp_path: Path) -> None:
    result = _ireetune("model", "train", "--spaces", str(tmp_path / "nowhere"), "--db", str(tmp_path / "t.sqlite"))  # fmt: skip
    assert result.returncode == 2
    assert (
        result.stderr
        == f"ireetune: error: folder of recorded spaces not found: {tmp_path / 'nowhere'}\n"
    )
