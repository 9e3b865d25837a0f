"""The one stage sequencer of every run (flows/sequence.py): stages in order, callbacks after
each, a stage that pauses for the device host stops the run after its callbacks."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from ireetune.executor.base import LocalExecutor
from ireetune.flows.dispatch.state import read_progress
from ireetune.flows.dispatch.state import save_run as save_dispatch_run
from ireetune.flows.model.options import ModelTuneOptions
from ireetune.flows.model.run import ModelTuningRun
from ireetune.flows.model.state import MODEL_RUN_NAME, Mode, ModelFile, Phase, read_run_file
from ireetune.flows.model.state_restore import new_split_section, save_after_phase
from ireetune.flows.model.state_restore import save_run as save_model_run
from ireetune.flows.sequence import Pause, RunProgress, named, run_sequence
from ireetune.report.recorder import RunRecorder
from ireetune.targets import parse_target


def test_the_sequencer_calls_every_callback_after_every_stage_in_order() -> None:
    seen: list[str] = []

    def generate(run: list[str]) -> None:
        run.append("generate ran")

    def compile_all(run: list[str]) -> None:
        run.append("compile ran")

    run_sequence(
        seen,
        named(generate, compile_all),
        (lambda run, stage: run.append(f"save after {stage}"),
         lambda run, stage: run.append(f"log after {stage}")),
    )  # fmt: skip

    assert seen == [
        "generate ran", "save after generate", "log after generate",
        "compile ran", "save after compile_all", "log after compile_all",
    ]  # fmt: skip


def test_a_stage_that_raises_ends_the_run_before_its_callbacks() -> None:
    seen: list[str] = []

    def measure(run: list[str]) -> None:
        raise RuntimeError("device lost")

    def decide(run: list[str]) -> None:
        run.append("decide ran")

    with pytest.raises(RuntimeError) as excinfo:
        run_sequence(seen, named(measure, decide), (lambda run, stage: run.append(stage),))

    assert str(excinfo.value) == "device lost"
    assert seen == []


def test_a_stage_that_pauses_for_the_device_stops_the_run_after_its_callbacks() -> None:
    seen: list[str] = []

    def compile_all(run: list[str]) -> None:
        run.append("compile ran")

    def wait_for_device(run: list[str]) -> Pause | None:
        run.append("manifest written")
        return Pause(2)

    def decide(run: list[str]) -> None:
        run.append("decide ran")

    pause = run_sequence(
        seen, named(compile_all, wait_for_device, decide), (lambda run, stage: run.append(stage),)
    )

    assert pause == Pause(2)
    assert seen == ["compile ran", "compile_all", "manifest written", "wait_for_device"]


def test_a_run_records_each_stage_once_and_keeps_its_pause_until_it_pauses_again() -> None:
    progress = RunProgress().after("prepare").paused(Pause(1)).after("flags").after("prepare")

    assert progress == RunProgress(("prepare", "flags"), Pause(1))
    assert progress.last == "flags"
    assert progress.paused(None) == RunProgress(("prepare", "flags"))
    assert RunProgress().last is None


def _split_model_run(run_dir: Path) -> ModelTuningRun:
    options = ModelTuneOptions(model_path=run_dir / "model.mlir", output_dir=run_dir)
    run = ModelTuningRun(
        Mode.SPLIT, options, parse_target("cpu"), run_dir, LocalExecutor(),
        state=new_split_section(options, ["local-task"]),
    )  # fmt: skip
    run.model_file = ModelFile(mlir_sha256="0" * 64, function="main")
    return run


def test_both_kinds_of_run_write_the_same_progress_record(tmp_path: Path) -> None:
    model_dir, dispatch_dir = tmp_path / "model", tmp_path / "dispatch"
    model_dir.mkdir()
    dispatch_dir.mkdir()
    model_run = _split_model_run(model_dir)
    save_after_phase(model_run, Phase.PREPARE)
    save_after_phase(model_run, Phase.FLAGS)
    # Only what the dispatch flow's save callback reads: the run's progress and its recorder.
    dispatch_run = SimpleNamespace(
        run_progress=RunProgress(), recorder=RunRecorder(dispatch_dir, {}, {})
    )
    save_dispatch_run(dispatch_run, "specs_stage")
    save_dispatch_run(dispatch_run, "compile_stage")

    model_file = json.loads((model_dir / MODEL_RUN_NAME).read_text())
    dispatch_file = json.loads((dispatch_dir / "results.json").read_text())
    assert (model_file["progress"], dispatch_file["progress"]) == (
        {"done": ["prepare", "flags"], "pause": None},
        {"done": ["specs", "compile"], "pause": None},
    )
    assert read_run_file(model_dir).progress == RunProgress(("prepare", "flags"))
    assert read_progress(dispatch_dir, dispatch_file) == RunProgress(("specs", "compile"))
    # A run that waits for the device host says so in the same record.
    model_run.run_progress = model_run.run_progress.paused(Pause(1))
    save_model_run(model_run)
    assert json.loads((model_dir / MODEL_RUN_NAME).read_text())["progress"] == {
        "done": ["prepare", "flags"], "pause": {"round_trip": 1},
    }  # fmt: skip


def test_a_model_run_file_written_before_progress_is_read_as_its_progress(
    tmp_path: Path,
) -> None:
    run = _split_model_run(tmp_path)
    run.run_progress = RunProgress(("prepare", "flags"), Pause(2))
    run.split_state.round_trip = 2
    save_model_run(run)
    document = json.loads((tmp_path / MODEL_RUN_NAME).read_text())
    # The layout before: the phases done, and the split section's stage.
    del document["progress"]
    document["phases_done"] = ["prepare", "flags"]
    document["split"]["stage"] = "awaiting-device"
    (tmp_path / MODEL_RUN_NAME).write_text(json.dumps(document))

    assert read_run_file(tmp_path).progress == run.run_progress

    document["split"]["stage"] = "preparing"
    (tmp_path / MODEL_RUN_NAME).write_text(json.dumps(document))
    assert read_run_file(tmp_path).progress == RunProgress(("prepare", "flags"))


def test_a_dispatch_results_file_written_before_progress_is_read_as_its_last_stage(
    tmp_path: Path,
) -> None:
    run = SimpleNamespace(run_progress=RunProgress(), recorder=RunRecorder(tmp_path, {}, {}))
    save_dispatch_run(run, "specs_stage")
    save_dispatch_run(run, "decide_stage")
    document = json.loads((tmp_path / "results.json").read_text())
    # The layout before: only the last stage saved.
    del document["progress"]
    document["stage"] = "decide"
    assert read_progress(tmp_path, document) == RunProgress(("decide",))
    # A file with neither has done nothing.
    del document["stage"]
    assert read_progress(tmp_path, document) == RunProgress()
