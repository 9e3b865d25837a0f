"""bench/model_zoo.py: how a `tune` run's end is classified, and a CI subset of the zoo (issue 37).

The subset runs the script on five small models with `--no-flag-search` and on one tiny model
with the flag search on, each through the real `ireetune tune` with a small budget and few
candidates (CI has two cores); every one must end with a result or one line, never a defect.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import REPOSITORY

BENCH = REPOSITORY / "bench"
sys.path.insert(0, str(BENCH))

import model_zoo  # noqa: E402

# The fast settings of the other model-run tests: two candidates, two timing rounds, two compiles
# at a time.
FAST = ["--", "--num-candidates", "2", "--rounds", "2", "--max-flag-sets", "2", "--jobs", "2"]
# Small models of every source: a package model, several inputs and outputs, external data, an
# integer matmul and a module of two functions (the last two are refused in one line today).
SUBSET = ["test_Linear", "multi_io", "external_data", "matmul_integer", "two_functions"]
TRACEBACK = 'Traceback (most recent call last):\n  File "x.py", line 1\nIndexError: list index\n'


@pytest.mark.parametrize(
    ("exit_status", "stderr", "timed_out", "expected"),
    [
        (0, "", False, (model_zoo.RESULT, "")),
        (0, "warning: slow\n", False, (model_zoo.RESULT, "")),
        (2, "ireetune: error: bad input\n", False, (model_zoo.ONE_LINE, "ireetune: error: bad input")),
        (2, "\nireetune: error: bad input\n\n", False, (model_zoo.ONE_LINE, "ireetune: error: bad input")),
        (2, "ireetune: error: one\nireetune: error: two\n", False,
         (model_zoo.DEFECT, "exit status 2 with 2 lines on stderr")),
        (2, "", False, (model_zoo.DEFECT, "exit status 2 with 0 lines on stderr")),
        (2, "error: bad\n", False, (model_zoo.DEFECT,
         "exit status 2 with a line not starting 'ireetune: error:': error: bad")),
        (1, "ireetune: error: bad input\n", False,
         (model_zoo.DEFECT, "exit status 1: ireetune: error: bad input")),
        (-9, "", False, (model_zoo.DEFECT, "exit status -9")),
        (0, TRACEBACK, False, (model_zoo.DEFECT, "traceback: IndexError: list index")),
        (2, TRACEBACK, False, (model_zoo.DEFECT, "traceback: IndexError: list index")),
        (-9, "", True, (model_zoo.DEFECT, "hang: still running at the timeout, killed")),
    ],
)  # fmt: skip
def test_classify_end(
    exit_status: int, stderr: str, timed_out: bool, expected: tuple[str, str]
) -> None:
    assert model_zoo.classify_end(exit_status, stderr, timed_out) == expected


def test_every_model_is_listed_once() -> None:
    names = [model.name for model in model_zoo.list_zoo()]
    sources = {model.source for model in model_zoo.list_zoo()}
    assert len(names) == len(set(names))
    assert sources == {"light", "pytorch-converted", "simple", "variant"}
    assert {"light_resnet50", "light_zfnet512", "test_Linear", "two_functions"} <= set(names)


def test_an_unknown_model_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert model_zoo.main(["--models", "multi_io,no_such_model", "--list"]) == 2
    assert capsys.readouterr().err == "model_zoo: no model named no_such_model: see --list\n"


def _run_subset(arguments: list[str], out: Path) -> list[dict[str, object]]:
    status = model_zoo.main([*arguments, "--out", str(out), *FAST])
    outcomes: list[dict[str, object]] = json.loads((out / model_zoo.RESULTS_NAME).read_text())[
        "models"
    ]
    defects = [
        (o["name"], o["line"], o["stderr_tail"]) for o in outcomes if o["outcome"] == "defect"
    ]
    assert defects == []
    assert status == 0
    return outcomes


def test_small_models_end_with_a_result_or_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outcomes = _run_subset(
        ["--models", ",".join(SUBSET), "--time-budget", "10", "--no-flag-search"], tmp_path
    )
    assert [o["name"] for o in outcomes] == SUBSET
    by_name = {str(o["name"]): o for o in outcomes}
    # The command each got: the real CLI with the budget, the model's own options, the passthrough.
    command = by_name["two_functions"]["command"]
    assert isinstance(command, list)
    assert command[1:3] == ["tune", str(tmp_path / "models/two_functions/two_functions.mlir")]
    assert command[-11:] == [
        "--no-flag-search", "--function", "large",
        "--num-candidates", "2", "--rounds", "2", "--max-flag-sets", "2", "--jobs", "2",
    ]  # fmt: skip
    assert "--time-budget" in command and command[command.index("--time-budget") + 1] == "10"
    # A model whose tune succeeds has its report read from its run folder.
    multi_io = by_name["multi_io"]
    assert multi_io["outcome"] == "result"
    report = multi_io["report"]
    assert isinstance(report, dict)
    assert report["speedup"] is not None and report["dispatches_profiled"] >= 1
    assert Path(str(multi_io["run_folder"])).parent == tmp_path / "runs" / "multi_io"
    assert multi_io["inputs"] == "32x128xf32, 32x128xf32"
    assert list((tmp_path / "runs/multi_io").rglob("*.vmfb")) == []  # Removed once read.
    # The markdown table has a row per model and says how many ended which way.
    table = capsys.readouterr().out
    assert "| model | source | inputs / dtype | time s | outcome | speedup, or the line |" in table
    assert "| multi_io | variant | 32x128xf32, 32x128xf32 |" in table
    assert "0 defect." in table


def test_a_tiny_model_with_the_flag_search_ends_with_a_result(tmp_path: Path) -> None:
    (outcome,) = _run_subset(["--models", "tiny_matmul", "--time-budget", "15"], tmp_path)
    assert outcome["outcome"] == "result"
    assert "--no-flag-search" not in outcome["command"]  # type: ignore[operator]
    report = outcome["report"]
    assert isinstance(report, dict)
    assert report["flag_sets_tried"] >= 1


def test_a_run_past_the_timeout_is_killed_and_is_a_defect(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arguments = ["--models", "tiny_matmul", "--timeout", "3", "--out", str(tmp_path), *FAST]
    assert model_zoo.main(arguments) == 1
    (outcome,) = json.loads((tmp_path / model_zoo.RESULTS_NAME).read_text())["models"]
    assert (outcome["outcome"], outcome["line"]) == (
        "defect",
        "hang: still running at the timeout, killed",
    )
    assert outcome["exit_status"] == -9 and outcome["wall_s"] < 30
    assert "| tiny_matmul | variant | 64x64xf32, 64x64xf32 |" in capsys.readouterr().out
