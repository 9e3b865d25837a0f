"""Whole-model tuning split between a compile host and a runtime-only device host, on the CPU.

The device steps run in subprocesses whose imports of `iree.compiler`, `z3`, `rich` and `onnx`
raise (the blocker of test_handoff.py), through the module entry point a GPU host would use; the
compile steps run here. The same folder format and commands serve a GPU.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ireetune.cli import main
from ireetune.core.errors import IreetuneError
from ireetune.decision.rules import CandidateFacts, DecisionRule, Verdict, preselect
from ireetune.decision.stats import Basis, SpeedupEstimate
from ireetune.executor.base import LocalExecutor
from ireetune.flows.dispatch.run_options import read_run_options
from ireetune.flows.handoff import device_step
from ireetune.flows.handoff.manifest import MANIFEST_NAME
from ireetune.flows.handoff.model_folder import (
    DEVICE_MANIFEST_NAME,
    hash_device_manifest,
    read_device_manifest,
    results_name,
)
from ireetune.flows.model.state import MODEL_RUN_NAME, SplitVariantFile
from ireetune.flows.model.state import SplitStage as Phase
from ireetune.flows.model.tuner import continue_split_run
from ireetune.model.dispatch_times import time_dispatch_benchmarks
from ireetune.model.hot import DispatchProfile
from ireetune.model.static_rank import estimate_cost, pre_rank_dispatches
from ireetune.model.variants import decide_variants, plan_variants
from ireetune.report.run_view import read_model_run
from tests.conftest import REPOSITORY
from tests.flows.handoff.test_handoff import runtime_only_environment

EXAMPLES = REPOSITORY / "examples"


def _profile(name: str, problem: str, runs: int = 1, tunable: bool = True) -> DispatchProfile:
    return DispatchProfile(name, Path(f"{name}.mlir"), problem, tunable, None, runs)


def test_static_ranking_orders_tunable_problems_by_work_times_launches() -> None:
    profiles = [
        _profile("a", "matmul_a", runs=1),
        _profile("b", "matmul_b", runs=4),
        _profile("c", "softmax", tunable=False),
        _profile("d", "matmul_a", runs=1),
        _profile("e", "matmul_e"),
    ]
    costs = {"a": 100.0, "b": 30.0, "c": 10.0**6, "d": 100.0, "e": 1.0}
    ranked = pre_rank_dispatches(profiles, costs, max_dispatches=2)
    # matmul_a's two dispatches (200) outweigh matmul_b's four launches (120): one tuned
    # dispatch configures them both, so its problem is ranked by their sum.
    assert [p.name for p in ranked] == ["a", "b"]


def test_the_cost_estimate_is_the_larger_of_compute_and_memory() -> None:
    # A 1024^3 matmul is compute-bound; a 1024x1024 f32 softmax row reduction memory-bound.
    assert estimate_cost(2 * 1024**3, 2 * 3 * 1024**2) == 2 * 1024**3 / 50
    assert estimate_cost(3 * 1024**2, 2 * 2 * 1024**2) == 4 * 1024**2


def test_variants_are_each_candidate_alone_and_the_winners_together() -> None:
    plans = plan_variants([("d0", [Path("x1"), Path("x2")]), ("d1", [Path("y1")]), ("d2", [])])
    assert [(p.label, p.specs) for p in plans] == [
        ("d0c0", (Path("x1"),)),
        ("d0c1", (Path("x2"),)),
        ("d1c0", (Path("y1"),)),
        ("best", (Path("x1"), Path("y1"))),
    ]
    assert [p.label for p in plan_variants([("d0", [Path("x1")])])] == ["d0c0"]
    assert plan_variants([]) == []


def _estimate(speedup: float) -> SpeedupEstimate:
    return SpeedupEstimate(speedup, speedup, speedup, 5, Basis.MODEL, 1.0, 1.0 / speedup)


def test_preselection_takes_the_fastest_point_estimates_with_outputs_not_found_wrong() -> None:
    facts = [
        CandidateFacts(1, dispatch=_estimate(1.2)),
        CandidateFacts(2, dispatch=_estimate(1.5), outputs_match=False),
        CandidateFacts(3, dispatch=_estimate(1.005)),
        CandidateFacts(4, dispatch=_estimate(1.3), outputs_match=True),
        CandidateFacts(5),
    ]
    assert preselect(facts, DecisionRule(threshold=1.01), 3) == [4, 1]
    assert preselect(facts, DecisionRule(threshold=1.01), 1) == [4]
    assert preselect(facts, DecisionRule(threshold=1.01), 0) == []


def test_variant_decision_takes_the_fastest_confirmed_variant_with_equal_outputs() -> None:
    steady = [1.0] * 10
    variants = {
        "calls_per_round": 2,
        "contenders": ["a", "b", "c"],
        "confirm": {
            "default": {"times_ms": steady},
            "a": {"times_ms": [0.8] * 10},
            "b": {"times_ms": [0.5] * 10},
            "c": {"times_ms": [0.995] * 10},
        },
    }
    outputs = {"a": (True, ""), "b": (False, "output 0: 3 of 4 elements differ"), "c": (True, "")}
    decision, estimates = decide_variants(variants, ["a", "b", "c", "d"], outputs)
    assert decision.winner == 1
    assert {i: j.verdict for i, j in decision.judgements.items()} == {
        1: Verdict.WINNER,
        2: Verdict.REJECTED,
        3: Verdict.REJECTED,
    }
    assert decision.judgements[2].reason == "output 0: 3 of 4 elements differ"
    assert estimates["a"] is not None and estimates["a"].speedup == pytest.approx(1.25)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A split run of the two-layer perceptron after its compile phase, on two CPU devices."""
    output = tmp_path_factory.mktemp("split")
    status = main(
        [
            "tune", str(EXAMPLES / "mlp.mlir"), "--stop-after", "compile",
            "--output-dir", str(output), "--num-candidates", "2", "--candidates-per-dispatch", "1",
            "--rounds", "2", "--no-db", "--devices", "local-task,local-sync", "--no-progress",
            # The flag phase's round trip has its own tests (tests/flows/model/test_split_flags.py).
            "--no-flag-search",
        ]
    )  # fmt: skip
    assert status == 0
    (run_dir,) = output.iterdir()
    return run_dir


def _copy(run_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / run_dir.name
    shutil.copytree(run_dir, copy)
    return copy


def _device_step(run_dir: Path, tmp_path: Path) -> subprocess.Popen[str]:
    """Start the device step as a GPU host would run it, with the compiler's imports blocked."""
    blocker_home = tmp_path / "runtime_only"
    if not blocker_home.exists():
        blocker_home.mkdir()
        runtime_only_environment(blocker_home)
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(blocker_home / "blocker"), str(REPOSITORY)]),
        # A killed step cannot remove its scratch folders: they stay in the test's folder.
        "TMPDIR": str(tmp_path),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "ireetune.cli", "device-step", str(run_dir)],
        env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _finish_device_step(run_dir: Path, tmp_path: Path) -> str:
    process = _device_step(run_dir, tmp_path)
    stdout, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, stderr
    return stdout


def test_split_run_end_to_end_with_kills_between_and_inside_phases(
    prepared: Path, tmp_path: Path
) -> None:
    run_dir = _copy(prepared, tmp_path)
    stored = json.loads((run_dir / MODEL_RUN_NAME).read_text())
    state = stored["split"]
    assert (stored["progress"]["pause"], state["round_trip"]) == ({"round_trip": 1}, 1)
    assert state["devices"] == ["local-task", "local-sync"]
    assert len(state["folders"]) == 2

    # Continuing before the device has measured anything says what to run, in one line.
    with pytest.raises(IreetuneError) as excinfo:
        continue_split_run(run_dir)
    assert "waits for the device: run `ireetune measure" in str(excinfo.value)

    # Round trip 1, killed once its profile is written, then run again to the end.
    process = _device_step(run_dir, tmp_path)
    results_path = run_dir / results_name(1)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not results_path.exists():
        time.sleep(0.2)
    process.send_signal(signal.SIGKILL)
    process.wait()
    profile_before = json.loads(results_path.read_text())["profile"]
    assert profile_before["device"] == "local-task"
    assert profile_before["timed_how"].startswith("profile: each dispatch timed inside ")
    with pytest.raises(IreetuneError) as excinfo:
        continue_split_run(run_dir)
    assert "was stopped before it finished" in str(excinfo.value)
    stdout = _finish_device_step(run_dir, tmp_path)
    assert stdout == f"results: {results_path}\nnext: ireetune continue {run_dir}\n"
    results = json.loads(results_path.read_text())
    assert results["profile"] == profile_before
    assert results["folders"] == {folder: "measured" for folder in state["folders"].values()}
    for folder in state["folders"].values():
        measured = json.loads((run_dir / folder / "benchmark_results.json").read_text())
        assert measured["devices"] == ["local-task", "local-sync"]

    # The compile host builds the variants (killed once while compiling them, then resumed).
    continuing = subprocess.Popen(
        [sys.executable, "-m", "ireetune.cli", "continue", str(run_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )  # fmt: skip
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not list((run_dir / "variants").glob("*_spec.mlir")):
        time.sleep(0.1)
    continuing.kill()
    continuing.wait()
    status = continue_split_run(run_dir)
    assert (status.phase, status.round_trip) == (Phase.AWAITING_DEVICE, 2)
    manifest = json.loads((run_dir / DEVICE_MANIFEST_NAME).read_text())
    assert manifest["profile"] is None and manifest["folders"] == []
    labels = [m["label"] for m in manifest["variants"]["models"]]
    assert labels and set(labels) <= {"d0c0", "d1c0", "best"}

    # Round trip 2: the variants, then the decision.
    _finish_device_step(run_dir, tmp_path)
    status = continue_split_run(run_dir)
    assert status.phase == Phase.DONE
    report = json.loads((run_dir / "report.json").read_text())
    assert report["round_trips"] == 2 and report["flow"] == "split"
    assert [t["phase"] for t in report["timings"]] == [
        "prepare", "device 1", "variants", "device 2", "decide",
    ]  # fmt: skip
    assert (run_dir / "tuned_spec.mlir").exists() == (report["winner"] is not None)
    confirmed = [v for v in report["variants"] if v["confirmed"]]
    assert all(v["verdict"] in ("winner", "beaten", "rejected") for v in confirmed)
    if report["winner"] is not None:
        assert report["speedup_low"] > 1.01
    # One report writer for both modes: the dispatch rows the viewer reads, each variant's
    # dispatches, and the winner's specs kept on the dispatches they tune.
    profiled = json.loads((run_dir / "profile.json").read_text())["dispatches"]
    assert [d["name"] for d in report["dispatches"]] == [d["name"] for d in profiled]
    assert [d.name for d in read_model_run(run_dir).dispatches] == [d["name"] for d in profiled]
    rows = {v["label"]: v["dispatches"] for v in report["variants"]}
    singles = [rows[label] for label in ("d0c0", "d1c0") if label in rows]
    assert all(len(names) == 1 for names in singles)
    if "best" in rows:
        assert rows["best"] == [names[0] for names in singles]
    kept = {d["name"]: d["kept_spec"] for d in report["dispatches"] if d["kept_spec"]}
    winner = next((v for v in report["variants"] if v["label"] == report["winner"]), None)
    expected = (
        {} if winner is None else dict(zip(winner["dispatches"], winner["specs"], strict=True))
    )
    assert kept == {name: str(run_dir / spec) for name, spec in expected.items()}
    # Once done, continuing again only shows the report.
    assert continue_split_run(run_dir).report == (run_dir / "report.txt").read_text()


def test_the_dispatch_folders_decide_on_the_model_s_dumped_benchmarks(prepared: Path) -> None:
    """As in process (flows/model/local.py): each folder's candidates are compiled from the
    model's dumped benchmark and timed there, batched, and that decides; the device host checks
    the contenders' outputs on real inputs without timing them there (`real_input_decides`)."""
    folders = json.loads((prepared / MODEL_RUN_NAME).read_text())["split"]["folders"].values()
    assert folders
    for folder in folders:
        handoff = json.loads((prepared / folder / MANIFEST_NAME).read_text())
        assert handoff["real_input_decides"] is False
        assert read_run_options(prepared / folder).decide_on_dispatch_benchmark


def test_the_device_times_again_the_dispatches_that_take_most_of_a_run_by_their_launches(
    prepared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = _copy(prepared, tmp_path)
    state = json.loads((run_dir / MODEL_RUN_NAME).read_text())["split"]
    launches = {d["name"]: d["invocations"] for d in state["dispatches"] if d["vmfb"]}
    manifest = read_device_manifest(run_dir)
    assert manifest.profile is not None and launches
    assert manifest.profile.launches == launches
    given: list[object] = []

    def recording(*args: Any) -> dict[int, float]:
        given.append(args[3] if len(args) > 3 else None)
        return time_dispatch_benchmarks(*args)

    monkeypatch.setattr(device_step, "time_dispatch_benchmarks", recording)
    (run_dir / "step").mkdir()
    # A manifest without the dispatches' exports (older than them): each benchmark alone.
    task = replace(manifest.profile, exports={})
    profiled = device_step._profile(
        LocalExecutor(), run_dir, manifest, task, "local-task", run_dir / "step"
    )
    labels = [d.label for d in manifest.profile.dispatches]
    assert given == [{index: launches[label] for index, label in enumerate(labels)}]
    assert set(profiled["dispatch_ms"]) == set(labels)
    assert profiled["timed_how"] == "profile: each dispatch benchmark timed alone"


def test_the_device_times_each_dispatch_inside_runs_of_the_whole_model(
    prepared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the dispatches' exports in the manifest, the device step profiles the default model
    (IREE's HAL profiler) and times no benchmark; exports the profile does not name fall back
    to the benchmarks, with the reason."""
    run_dir = _copy(prepared, tmp_path)
    manifest = read_device_manifest(run_dir)
    assert manifest.profile is not None
    labels = [d.label for d in manifest.profile.dispatches]
    assert set(manifest.profile.exports) == set(labels)
    assert all(
        name.startswith("mlp_dispatch_")
        for names in manifest.profile.exports.values()
        for name in names
    )
    timed_alone: list[object] = []
    monkeypatch.setattr(
        device_step, "time_dispatch_benchmarks", lambda *args: timed_alone.append(args) or {}
    )
    (run_dir / "step").mkdir()
    profiled = device_step._profile(
        LocalExecutor(), run_dir, manifest, manifest.profile, "local-task", run_dir / "step"
    )
    assert timed_alone == []
    assert profiled["timed_how"].startswith("profile: each dispatch timed inside ")
    assert set(profiled["dispatch_ms"]) == set(labels)
    assert all(ms is not None and ms > 0 for ms in profiled["dispatch_ms"].values())
    # Exports of another build: the profile names none of them.
    foreign = replace(manifest.profile, exports={label: ("other$dispatch",) for label in labels})
    fallback = device_step._profile(
        LocalExecutor(), run_dir, manifest, foreign, "local-task", run_dir / "step"
    )
    assert len(timed_alone) == 1
    assert fallback["timed_how"] == (
        "profile: each dispatch benchmark timed alone (the whole model's profile names 0 of the "
        f"{len(labels)} dispatches a run launches)"
    )


def test_device_step_refuses_a_changed_binary(prepared: Path, tmp_path: Path) -> None:
    run_dir = _copy(prepared, tmp_path)
    binary = run_dir / "default.vmfb"
    binary.write_bytes(binary.read_bytes() + b"\0")
    process = _device_step(run_dir, tmp_path)
    _, stderr = process.communicate(timeout=120)
    assert (process.returncode, stderr) == (
        2,
        f"ireetune: error: {run_dir}: default.vmfb does not match the hash in "
        "device_step.json; the folder was changed after it was compiled\n",
    )
    assert not (run_dir / "device").exists()


def test_device_step_refuses_a_manifest_naming_a_file_outside_or_without_hash(
    prepared: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = _copy(prepared, tmp_path)
    path = run_dir / DEVICE_MANIFEST_NAME
    manifest = json.loads(path.read_text())
    manifest["default_model"] = "../elsewhere.vmfb"
    path.write_text(json.dumps(manifest))
    assert main(["device-step", str(run_dir)]) == 2
    assert "default_model must be a path inside the run folder" in capsys.readouterr().err
    manifest["default_model"] = "dispatch_binaries/0.log"
    path.write_text(json.dumps(manifest))
    assert main(["device-step", str(run_dir)]) == 2
    assert "files lists no hash for dispatch_binaries/0.log" in capsys.readouterr().err
    manifest["default_model"] = "default.vmfb"
    manifest["parameters"] = ["import/weights.irpa"]
    path.write_text(json.dumps(manifest))
    assert main(["device-step", str(run_dir)]) == 2
    assert "files lists no hash for import/weights.irpa" in capsys.readouterr().err


def test_continue_refuses_an_edited_manifest_and_foreign_results(
    prepared: Path, tmp_path: Path
) -> None:
    run_dir = _copy(prepared, tmp_path)
    (run_dir / "device").mkdir()
    (run_dir / results_name(1)).write_text(
        json.dumps({"manifest_sha256": "0" * 64, "done": True, "seconds": {"total": 1.0}})
    )
    with pytest.raises(IreetuneError) as excinfo:
        continue_split_run(run_dir)
    assert "was not measured from this run's device_step.json" in str(excinfo.value)
    # Results of this manifest, but malformed (they come from another host): one line.
    (run_dir / results_name(1)).write_text(
        json.dumps(
            {"manifest_sha256": hash_device_manifest(run_dir), "done": True,
             "devices": ["local-task"], "seconds": {"total": 1.0}, "folders": {},
             "profile": {"model_times_ms": ["fast"], "model_ms": 1.0, "dispatch_ms": {}}}
        )
    )  # fmt: skip
    with pytest.raises(IreetuneError) as excinfo:
        continue_split_run(run_dir)
    assert str(excinfo.value) == (
        f"{run_dir / results_name(1)}: profile.model_times_ms[0] must be a number, got "
        '"fast"; run the device step again'
    )
    path = run_dir / DEVICE_MANIFEST_NAME
    path.write_text(path.read_text().replace('"rounds": 2', '"rounds": 3'))
    with pytest.raises(IreetuneError) as excinfo:
        continue_split_run(run_dir)
    assert "device_step.json is not the one this run wrote" in str(excinfo.value)
    state = json.loads((run_dir / MODEL_RUN_NAME).read_text())
    model = run_dir / state["model"]["mlir"]
    model.write_text(model.read_text() + "\n")
    with pytest.raises(IreetuneError) as excinfo:
        continue_split_run(run_dir)
    assert "changed since the run was prepared" in str(excinfo.value)


def test_continue_resumes_a_prepare_phase_that_was_stopped(prepared: Path, tmp_path: Path) -> None:
    run_dir = _copy(prepared, tmp_path)
    stored = json.loads((run_dir / MODEL_RUN_NAME).read_text())
    state = stored["split"]
    # As if the prepare phase had been killed after its second tuning folder was compiled but
    # before the device manifest was written: nothing done is compiled again.
    (run_dir / DEVICE_MANIFEST_NAME).unlink()
    kept = dict(state["folders"])
    state.update(round_trip=0, timings=[])
    stored["progress"]["pause"] = None
    (run_dir / MODEL_RUN_NAME).write_text(json.dumps(stored))
    before = {p: p.stat().st_mtime_ns for p in (run_dir / "tuning").rglob("*.vmfb")}
    status = continue_split_run(run_dir)
    assert (status.phase, status.round_trip) == (Phase.AWAITING_DEVICE, 1)
    assert json.loads((run_dir / MODEL_RUN_NAME).read_text())["split"]["folders"] == kept
    assert {p: p.stat().st_mtime_ns for p in (run_dir / "tuning").rglob("*.vmfb")} == before
    assert json.loads((run_dir / DEVICE_MANIFEST_NAME).read_text())["round_trip"] == 1


def test_a_folder_of_another_version_is_refused_in_one_line_naming_both_versions(
    prepared: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Each file of the run folder, written by an ireetune of another format version.
    run_dir = _copy(prepared, tmp_path)
    path = run_dir / DEVICE_MANIFEST_NAME
    path.write_text(path.read_text().replace("ireetune-model-folder/1", "ireetune-model-folder/2"))
    assert main(["device-step", str(run_dir)]) == 2
    assert capsys.readouterr().err == (
        f"ireetune: error: {path} has format ireetune-model-folder/2, written by another "
        "ireetune; this one reads ireetune-model-folder/1: write the folder again with this "
        "ireetune\n"
    )
    run_dir = _copy(prepared, tmp_path / "results")
    (run_dir / "device").mkdir()
    results = {
        "format": "ireetune-device-results/0",
        "manifest_sha256": hash_device_manifest(run_dir),
    }
    (run_dir / results_name(1)).write_text(json.dumps(results))
    with pytest.raises(IreetuneError) as excinfo:
        continue_split_run(run_dir)
    assert str(excinfo.value) == (
        f"{run_dir / results_name(1)} has format ireetune-device-results/0, written by another "
        "ireetune; this one reads ireetune-device-results/1: write the folder again with this "
        "ireetune; run the device step again"
    )
    run_dir = _copy(prepared, tmp_path / "state")
    state = json.loads((run_dir / MODEL_RUN_NAME).read_text())
    (run_dir / MODEL_RUN_NAME).write_text(json.dumps({**state, "format": "ireetune-model-run/9"}))
    with pytest.raises(IreetuneError) as excinfo:
        continue_split_run(run_dir)
    assert str(excinfo.value) == (
        f"{run_dir / MODEL_RUN_NAME} has format ireetune-model-run/9, written by another "
        "ireetune; this one reads ireetune-model-run/3: write the folder again with this ireetune"
    )


def test_a_damaged_state_file_is_refused_in_one_line_naming_the_field(
    prepared: Path, tmp_path: Path
) -> None:
    run_dir = _copy(prepared, tmp_path)
    state = json.loads((run_dir / MODEL_RUN_NAME).read_text())
    state["split"]["dispatches"][0]["benchmark"] = "/etc/passwd"
    (run_dir / MODEL_RUN_NAME).write_text(json.dumps(state))
    with pytest.raises(IreetuneError) as excinfo:
        continue_split_run(run_dir)
    assert str(excinfo.value) == (
        f"{run_dir / MODEL_RUN_NAME}: split.dispatches[0].benchmark must be a path inside the "
        'run folder, got "/etc/passwd"'
    )
    state["split"]["dispatches"][0].pop("benchmark")
    state["options"]["rounds"] = "5"
    (run_dir / MODEL_RUN_NAME).write_text(json.dumps(state))
    with pytest.raises(IreetuneError) as excinfo:
        continue_split_run(run_dir)
    assert (
        str(excinfo.value)
        == f'{run_dir / MODEL_RUN_NAME}: options.rounds must be an integer, got "5"'
    )


def test_a_variant_naming_other_dispatches_than_specs_is_refused_in_one_line(
    prepared: Path, tmp_path: Path
) -> None:
    # The decide phase keeps the winner's specs on the dispatches the row names, one each.
    run_dir = _copy(prepared, tmp_path)
    state = json.loads((run_dir / MODEL_RUN_NAME).read_text())
    row = {"label": "best", "specs": ["a.mlir", "b.mlir"], "spec": "v.mlir", "status": "compiled"}
    state["split"]["variants"] = [{**row, "dispatches": ["d0"]}]
    (run_dir / MODEL_RUN_NAME).write_text(json.dumps(state))
    with pytest.raises(IreetuneError) as excinfo:
        continue_split_run(run_dir)
    assert str(excinfo.value) == (
        f"{run_dir / MODEL_RUN_NAME}: split.variants[0] names 1 dispatches for its 2 specs, not one per spec"
    )
    # A row written before the dispatches were recorded names none, and is read.
    assert SplitVariantFile.model_validate(row).dispatches == []


def test_weights_kept_apart_are_read_from_their_archive(tmp_path: Path) -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from ireetune.executor import LocalExecutor
    from ireetune.frontend.model_import import PARAMETER_SCOPE, import_model
    from ireetune.frontend.model_inputs import read_entry_signature
    from ireetune.model import worker
    from ireetune.model.timing import ModelComparison
    from tests.conftest import CPU_FLAGS, IREE_COMPILE

    weights = np.random.default_rng(1).standard_normal((128, 96)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "projection",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 128])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 96])],
        [numpy_helper.from_array(weights, "w")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "projection.onnx"))
    archive = tmp_path / "weights.irpa"
    mlir = import_model(tmp_path / "projection.onnx", tmp_path / "import", archive)
    assert archive.stat().st_size >= weights.nbytes
    assert f'#stream.parameter.named<"{PARAMETER_SCOPE}"::"w">' in mlir.read_text()
    assert worker.PARAMETER_SCOPE == PARAMETER_SCOPE
    binary = tmp_path / "projection.vmfb"
    subprocess.run([IREE_COMPILE, str(mlir), *CPU_FLAGS, "-o", str(binary)], check=True)
    assert binary.stat().st_size < weights.nbytes
    x = np.random.default_rng(2).standard_normal((64, 128)).astype(np.float32)
    np.savez(tmp_path / "inputs.npz", arg0=x)
    function, _ = read_entry_signature(mlir.read_text())
    runs = LocalExecutor().run_models_side_by_side(
        ModelComparison(
            [("m", binary)], function, tmp_path / "inputs.npz", tmp_path, "local-task", 2,
            parameters=[archive],
        )
    )  # fmt: skip
    assert runs["m"].ok and len(runs["m"].times_ms) == 2
    np.testing.assert_allclose(runs["m"].outputs[0], x @ weights, rtol=1e-4, atol=1e-4)
    without = LocalExecutor().run_models_side_by_side(
        ModelComparison(
            [("m", binary)], function, tmp_path / "inputs.npz", tmp_path, "local-task", 1
        )
    )
    assert not without["m"].ok
