"""The two verbs that continue a run (flows/continue_folder.py): `ireetune continue RUN_DIR` on
the compile host for every kind of run folder, `ireetune measure FOLDER` on a runtime-only device
host for both kinds of folder that ask for the device."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ireetune.cli import main
from ireetune.core.errors import IreetuneError
from ireetune.flows.continue_folder import FolderKind, read_device_kind, read_folder_kind
from ireetune.flows.handoff.manifest import RESULTS_NAME
from ireetune.flows.handoff.model_folder import results_name
from tests.conftest import FAST_RUN_ARGS, REPOSITORY
from tests.flows.handoff.test_handoff import runtime_only_environment

EXAMPLES = REPOSITORY / "examples"
IN_PROCESS_RUN, SPLIT_RUN = "model_run.json:in-process", "model_run.json:split"


@pytest.mark.parametrize(
    ("files", "kind"),
    [
        (("run_options.json", "results.json"), FolderKind.DISPATCH_RUN),
        (("run_options.json", "results.json", "handoff.json"), FolderKind.DISPATCH_FOLDER),
        (("model_run.json",), FolderKind.MODEL_RUN),
        ((IN_PROCESS_RUN,), FolderKind.MODEL_RUN),
        ((SPLIT_RUN,), FolderKind.SPLIT_MODEL_RUN),
        ((SPLIT_RUN, "device_step.json"), FolderKind.SPLIT_MODEL_RUN),
        # A split run of the earlier file: a split run, refused by its version where it is read.
        (("split.json",), FolderKind.SPLIT_MODEL_RUN),
    ],
)
def test_a_folder_is_told_apart_by_the_files_it_holds(
    files: tuple[str, ...], kind: FolderKind, tmp_path: Path
) -> None:
    for name in files:
        name, _, mode = name.partition(":")
        (tmp_path / name).write_text(json.dumps({"mode": mode}) if mode else "{}")
    assert read_folder_kind(tmp_path) is kind


def test_a_folder_of_no_kind_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text("{}")
    with pytest.raises(IreetuneError) as excinfo:
        read_folder_kind(tmp_path)
    assert str(excinfo.value) == (
        f"{tmp_path} is not a model run folder, nor a dispatch one: it holds none of "
        "run_options.json (tune-dispatch), handoff.json (tune-dispatch --stop-after compile) "
        "and model_run.json (tune, with or without --stop-after compile)"
    )


@pytest.mark.parametrize(
    ("files", "kind"),
    [
        (("run_options.json", "results.json", "handoff.json"), FolderKind.DISPATCH_FOLDER),
        (("model_run.json", "device_step.json"), FolderKind.SPLIT_MODEL_RUN),
        (("run_options.json", "results.json"), None),
        (("model_run.json",), None),
    ],
)
def test_the_device_host_measures_only_a_folder_that_asks_for_it(
    files: tuple[str, ...], kind: FolderKind | None, tmp_path: Path
) -> None:
    for name in files:
        (tmp_path / name).write_text("{}")
    if kind is not None:
        assert read_device_kind(tmp_path) is kind
        return
    with pytest.raises(IreetuneError) as excinfo:
        read_device_kind(tmp_path)
    assert "asks the device host for nothing" in str(excinfo.value)


def test_a_split_run_of_the_earlier_file_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "split.json").write_text(json.dumps({"format": "ireetune-split-run/1"}))
    assert main(["continue", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"ireetune: error: {tmp_path / 'split.json'} is a split run of format "
        "ireetune-split-run/1, written before split runs kept model_run.json "
        "(ireetune-model-run/3): finish it with the ireetune that started it, or start a new one "
        "with `ireetune tune MODEL --stop-after compile`\n"
    )


def test_a_dispatch_folder_is_finished_without_flags_or_a_database_given_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("run_options.json", "results.json", "handoff.json"):
        (tmp_path / name).write_text("{}")
    assert main(["continue", str(tmp_path), "--db", str(tmp_path / "tuning.sqlite")]) == 2
    assert capsys.readouterr().err == (
        f"ireetune: error: {tmp_path} is a dispatch folder compiled with --stop-after compile: "
        "it is finished with the flags it was compiled with and no database (leave out --flags "
        "and --db)\n"
    )


def test_continue_resumes_a_killed_dispatch_run(
    matmul_benchmark: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run saved after its measure stage (as a kill during the checks leaves it) is checked
    and decided again, as `resume` does."""
    tune = ["tune-dispatch", str(matmul_benchmark), "--num-candidates", "3", *FAST_RUN_ARGS]
    arguments = [*tune, "--output-dir", str(tmp_path / "runs"), "--no-db", "--no-progress"]
    assert main(arguments) == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    saved = json.loads((run_dir / "results.json").read_text())
    saved.update(progress={"done": ["specs", "compile", "measure"]}, outcome="running")
    (run_dir / "results.json").write_text(json.dumps(saved))
    (run_dir / "best_spec.mlir").unlink(missing_ok=True)
    capsys.readouterr()

    assert main(["continue", str(run_dir)]) == 0

    results = json.loads((run_dir / "results.json").read_text())
    assert results["progress"]["done"][-1] == "decide" and results["outcome"] in (
        "improved",
        "no-improvement",
    )
    assert (run_dir / "best_spec.mlir").exists() == (results["outcome"] == "improved")
    assert f"run folder: {run_dir}\n" in capsys.readouterr().out


def test_measure_then_continue_a_split_dispatch_folder(
    matmul_benchmark: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`measure` benchmarks the folder with only the runtime (as `benchmark-folder`); `continue`
    finishes it (as `finish`: the same verdict and summary)."""
    tune = ["tune-dispatch", str(matmul_benchmark), "--num-candidates", "3", *FAST_RUN_ARGS]
    arguments = [*tune, "--output-dir", str(tmp_path / "runs"), "--no-db", "--no-progress"]
    assert main([*arguments, "--stop-after", "compile", "--references", "all"]) == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    capsys.readouterr()
    # Not measured yet: the compile host has nothing to do.
    assert main(["continue", str(run_dir)]) == 2
    assert capsys.readouterr().err == (
        f"ireetune: error: {run_dir} waits for the device host (it has no {RESULTS_NAME}): run "
        "`ireetune measure` on it there, then `ireetune continue` here\n"
    )

    measured = subprocess.run(
        [sys.executable, "-m", "ireetune.cli", "measure", str(run_dir), "--devices", "local-task"],
        env=runtime_only_environment(tmp_path), capture_output=True, text=True, check=False,
        timeout=600,
    )  # fmt: skip
    assert measured.returncode == 0, measured.stderr
    assert measured.stdout == (
        f"results: {run_dir / RESULTS_NAME}\nnext: ireetune continue {run_dir}\n"
    )
    finished_copy = tmp_path / "copy" / run_dir.name
    shutil.copytree(run_dir, finished_copy)
    assert main(["finish", str(finished_copy)]) == 0
    finished_out = capsys.readouterr().out

    assert main(["continue", str(run_dir)]) == 0

    continued_out = capsys.readouterr().out
    assert continued_out == finished_out.replace(str(finished_copy), str(run_dir))
    results = json.loads((run_dir / "results.json").read_text())
    assert results["outcome"] in ("improved", "no-improvement")
    assert (run_dir / "best_spec.mlir").exists() == (results["outcome"] == "improved")


def test_measure_then_continue_a_split_model_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`measure` runs a split model run's device step with only the runtime (as
    `device-step`); `continue` takes its results and goes on to the next round trip."""
    status = main(
        [
            "tune", str(EXAMPLES / "mlp.mlir"), "--stop-after", "compile",
            "--output-dir", str(tmp_path / "runs"), "--num-candidates", "2",
            "--candidates-per-dispatch", "1", "--rounds", "2", "--no-db", "--no-progress",
            "--no-flag-search",
        ]
    )  # fmt: skip
    assert status == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    stored = json.loads((run_dir / "model_run.json").read_text())
    assert (stored["mode"], stored["split"]["round_trip"]) == ("split", 1)
    capsys.readouterr()

    measured = subprocess.run(
        [sys.executable, "-m", "ireetune.cli", "measure", str(run_dir)],
        env=runtime_only_environment(tmp_path), capture_output=True, text=True, check=False,
        timeout=600,
    )  # fmt: skip
    assert measured.returncode == 0, measured.stderr
    assert measured.stdout == (
        f"results: {run_dir / results_name(1)}\nnext: ireetune continue {run_dir}\n"
    )

    assert main(["continue", str(run_dir)]) == 0

    stored = json.loads((run_dir / "model_run.json").read_text())
    state = stored["split"]
    assert state["round_trip"] == 2 and stored["progress"]["pause"] == {"round_trip": 2}
    assert stored["progress"]["done"] == ["prepare", "flags", "profile", "dispatches"]
    # The split mode's state is model_run.json alone.
    assert not (run_dir / "split.json").exists()
    assert "round trip 2: copy the folder to the GPU host" in capsys.readouterr().out
