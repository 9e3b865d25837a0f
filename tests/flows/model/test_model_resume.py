"""Kill a real `ireetune tune` of the two-layer perceptron at a phase boundary (SIGKILL, the
moment model_run.json says the phase is saved); `ireetune continue` then runs only the phases
after it and finishes the run. Each refusal of a folder that cannot be continued is one line.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ireetune.cli import main
from ireetune.flows.model.run import PHASES
from ireetune.flows.model.state import MODEL_RUN_FORMAT, MODEL_RUN_NAME, read_model_run
from tests.conftest import REPOSITORY

EXAMPLES = REPOSITORY / "examples"
USER_FLAG = "--iree-opt-level=O3"

State = dict[str, Any]


def _tune(model: Path, output: Path) -> list[str]:
    return [
        sys.executable, "-m", "ireetune.cli", "tune", str(model), "--output-dir", str(output),
        "--num-candidates", "3", "--candidates-per-dispatch", "1", "--rounds", "2",
        "--max-dispatches", "2", "--flags", USER_FLAG,
        # One set for the flag phase to compile and judge: the phase runs, and runs briefly.
        "--try-flags", "--iree-llvmcpu-enable-ukernels=none",
    ]  # fmt: skip


def _state(run_dir: Path) -> State:
    try:
        state: State = json.loads((run_dir / MODEL_RUN_NAME).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return state


def _tune_and_kill(
    model: Path, output: Path, database: Path, saved: Callable[[State], bool]
) -> Path:
    """Start a real tune and SIGKILL it as soon as its saved state satisfies `saved`."""
    # A killed run cannot remove its scratch folders: they stay beside its output.
    scratch = output.with_name(f"{output.name}_scratch")
    scratch.mkdir(exist_ok=True)
    process = subprocess.Popen(
        _tune(model, output),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "IREETUNE_DB": str(database), "TMPDIR": str(scratch)},
    )
    deadline = time.monotonic() + 600
    while True:
        folders = list(output.glob("model_*"))
        if folders and saved(_state(folders[0])):
            break
        assert process.poll() is None, "the run ended before the kill point"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    return folders[0]


def _continue(run_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ireetune.cli", "continue", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=900,
        env=dict(os.environ),
    )


def _mtimes(run_dir: Path, *names: str) -> dict[str, int]:
    return {name: (run_dir / name).stat().st_mtime_ns for name in names}


def _finished_tunings(run_dir: Path) -> dict[str, int]:
    """The tune-dispatch folders that finished, by name, with their results.json's mtime."""
    finished = {}
    for results in (run_dir / "tuning").glob("*/results.json"):
        if json.loads(results.read_text()).get("outcome") not in (None, "running", "failed"):
            finished[results.parent.name] = results.stat().st_mtime_ns
    return finished


def _check_complete(run_dir: Path, completed: subprocess.CompletedProcess[str]) -> None:
    assert completed.returncode == 0, completed.stderr
    assert _state(run_dir)["progress"]["done"] == [phase.value for phase in PHASES]
    report = (run_dir / "report.txt").read_text()
    assert completed.stdout.startswith(report)
    assert "flag phase (" in report and "--iree-llvmcpu-enable-ukernels=none" in report
    assert (run_dir / "tuned_flags.txt").read_text().splitlines()[0] == USER_FLAG
    assert json.loads((run_dir / "report.json").read_text())["flags"][0] == USER_FLAG


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("model") / "mlp.mlir"
    shutil.copy(EXAMPLES / "mlp.mlir", path)
    return path


@pytest.fixture(scope="module")
def after_flags(model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of a run killed once its flag phase was saved (the refusals edit copies of it)."""
    output = tmp_path_factory.mktemp("killed")
    # Module-scoped, so made before the per-test database: a database of its own.
    database = tmp_path_factory.mktemp("db") / "tuning.sqlite"
    run_dir = _tune_and_kill(
        model, output, database, lambda state: "flags" in state.get("progress", {}).get("done", [])
    )
    pristine = tmp_path_factory.mktemp("pristine") / run_dir.name
    shutil.copytree(run_dir, pristine, symlinks=True)
    return pristine


def test_a_run_killed_after_its_flag_phase_continues_without_redoing_it(
    after_flags: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / after_flags.name
    shutil.copytree(after_flags, run_dir, symlinks=True)
    earlier = ("default.vmfb", "default_outputs.npz", "flags/trials.json", "flags/0.vmfb")
    before = _mtimes(run_dir, *earlier)
    assert _state(run_dir)["progress"]["done"][:2] == ["prepare", "flags"]

    completed = _continue(run_dir)

    _check_complete(run_dir, completed)
    assert _mtimes(run_dir, *earlier) == before
    assert len(_finished_tunings(run_dir)) == 2


def test_a_dispatch_phase_cut_short_goes_on_with_the_dispatches_not_tuned(
    model: Path, tmp_path: Path, private_database: Path
) -> None:
    run_dir = _tune_and_kill(
        model,
        tmp_path / "runs",
        private_database,
        lambda state: len(state.get("dispatches_done", [])) == 1,
    )
    state = _state(run_dir)
    assert state["progress"]["done"] == ["prepare", "flags", "profile"]
    earlier = ("default.vmfb", "flags/trials.json", "profile.json")
    before, tuned_before = _mtimes(run_dir, *earlier), _finished_tunings(run_dir)
    assert len(tuned_before) == 1

    completed = _continue(run_dir)

    _check_complete(run_dir, completed)
    assert _mtimes(run_dir, *earlier) == before
    tuned_after = _finished_tunings(run_dir)
    # The dispatch done before the kill is read back, not tuned again; the other is tuned once.
    assert len(tuned_after) == 2
    assert {k: v for k, v in tuned_after.items() if k in tuned_before} == tuned_before
    done = _state(run_dir)["dispatches_done"]
    assert sorted(done) == ["mlp_dispatch_0", "mlp_dispatch_1"]
    assert done[0] == state["dispatches_done"][0]


def _refusal(run_dir: Path, capsys: pytest.CaptureFixture[str], command: str = "continue") -> str:
    status = main([command, str(run_dir)])
    error = capsys.readouterr().err
    assert status == 2
    assert error.count("\n") == 1, error
    return error.strip()


def _edited_copy(after_flags: Path, tmp_path: Path, edit: Callable[[State], None]) -> Path:
    run_dir = tmp_path / after_flags.name
    shutil.copytree(after_flags, run_dir, symlinks=True)
    state = _state(run_dir)
    edit(state)
    (run_dir / MODEL_RUN_NAME).write_text(json.dumps(state))
    return run_dir


def test_a_finished_run_is_refused(
    after_flags: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    final = {"default_ms": 1.0, "tuned_ms": 1.0}
    run_dir = _edited_copy(
        after_flags,
        tmp_path,
        lambda s: s.update(progress={"done": [p.value for p in PHASES]}, final=final),
    )
    error = _refusal(run_dir, capsys)
    assert error.endswith(f"{run_dir} is finished (every phase done): nothing to continue; its "
                          f"report is {run_dir / 'report.txt'}")  # fmt: skip


def test_a_run_stopped_before_its_prepare_phase_finished_is_refused(
    after_flags: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # What `tune` saves before its first phase: the options, nothing done.
    run_dir = _edited_copy(
        after_flags,
        tmp_path,
        lambda s: s.update(progress={"done": []}, model=None, default_vmfb=""),
    )
    error = _refusal(run_dir, capsys)
    assert f"{run_dir} was stopped before its prepare phase finished" in error


def test_a_run_whose_model_changed_is_refused(
    after_flags: Path, model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    changed = tmp_path / "mlp.mlir"
    changed.write_text(model.read_text() + "// changed\n")
    run_dir = _edited_copy(
        after_flags, tmp_path, lambda s: s["options"].update(model_path=str(changed))
    )
    error = _refusal(run_dir, capsys)
    assert f"{changed} changed (or is gone) since the run started" in error


def test_a_model_run_file_of_format_1_is_refused_by_its_version(
    after_flags: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = _edited_copy(after_flags, tmp_path, lambda s: s.update(format="ireetune-model-run/1"))
    error = _refusal(run_dir, capsys)
    assert error.endswith(
        f"{run_dir / MODEL_RUN_NAME} has format ireetune-model-run/1, written by another "
        f"ireetune; this one reads {MODEL_RUN_FORMAT}: write the folder again with this ireetune"
    )


def test_a_model_run_file_of_format_2_is_read_as_this_format(
    after_flags: Path, tmp_path: Path
) -> None:
    # Format 2 is this layout, of in-process runs only, before split runs kept the same file.
    run_dir = _edited_copy(after_flags, tmp_path, lambda s: s.update(format="ireetune-model-run/2"))
    assert _state(after_flags)["format"] == MODEL_RUN_FORMAT
    assert read_model_run(run_dir) == read_model_run(after_flags)


def test_a_path_leading_out_of_the_run_folder_is_refused(
    after_flags: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "outside.vmfb").write_bytes(b"")
    run_dir = _edited_copy(
        after_flags, tmp_path, lambda s: s.update(default_vmfb="../outside.vmfb")
    )
    error = _refusal(run_dir, capsys)
    assert error.endswith(
        f"{run_dir / MODEL_RUN_NAME}: default_vmfb must be a path inside the run folder, got "
        '"../outside.vmfb"'
    )


def test_resume_points_a_model_run_to_continue(
    after_flags: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    error = _refusal(after_flags, capsys, "resume")
    assert error.endswith(
        f"{after_flags} is a model run (`ireetune tune`): continue it with "
        f"`ireetune continue {after_flags}`"
    )


def test_a_split_import_the_model_does_not_hold_is_refused(
    after_flags: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A run that never switched to the split import, whose file says it did: the report and the
    # ONNX Runtime comparison would look for the split import's files.
    estimate = {"speedup": 1.5, "low": 1.4, "high": 1.6, "rounds": 6, "basis": "model",
                "baseline_ms": 10.0, "candidate_ms": 6.7}  # fmt: skip
    run_dir = _edited_copy(after_flags, tmp_path, lambda s: s.update(import_split=estimate))
    error = _refusal(run_dir, capsys)
    assert error.endswith(
        f"{run_dir / MODEL_RUN_NAME}: import_split is set, but the model's MLIR is not in "
        "import_split/"
    )
