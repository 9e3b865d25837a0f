"""The flag phase of a split model run: compiled here, timed by the device step, decided here.

Real compiles of the two-layer perceptron and real `local-task` timing; the device steps run in
subprocesses that can not import the compiler (tests/flows/model/test_split_flow.py's helpers).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ireetune.cli import main
from ireetune.core.errors import IreetuneError
from ireetune.flows.handoff.model_folder import DEVICE_MANIFEST_NAME, results_name
from ireetune.flows.model.state import MODEL_RUN_NAME
from ireetune.flows.model.state import SplitStage as Phase
from ireetune.flows.model.tuner import continue_split_run
from ireetune.frontend.dispatches import zero_benchmark_buffer
from tests.conftest import CPU_FLAGS, IREE_COMPILE, TEST_TARGET
from tests.flows.model.test_split_flow import EXAMPLES, _copy, _finish_device_step

# No convolution in the perceptron: a binary equal to the default's.
NO_EFFECT = ("--iree-global-opt-use-im2col-for-convs",)
# Smaller distribution tiles: another binary of every matmul.
SMALL_TILES = ("--iree-llvmcpu-distribution-size=16",)
QUICK = [
    "--target", TEST_TARGET,
    "--num-candidates", "2", "--candidates-per-dispatch", "1", "--max-dispatches", "1",
    "--rounds", "2", "--no-db", "--no-progress",
]  # fmt: skip


def _prepare(output: Path, *options: str) -> Path:
    command = ["tune", str(EXAMPLES / "mlp.mlir"), "--stop-after", "compile"]
    assert main([*command, "--output-dir", str(output), *QUICK, *options]) == 0
    (run_dir,) = output.iterdir()
    return run_dir


def _json(path: Path) -> Any:
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def flag_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A split run paused for the flag phase's round trip. A threshold of 0 plants the small
    tiles as the winner whatever the timing: where the winner goes is what is tested."""
    return _prepare(
        tmp_path_factory.mktemp("flags"),
        "--try-flags", " ".join(NO_EFFECT), "--try-flags", " ".join(SMALL_TILES),
        "--flag-threshold", "0",
    )  # fmt: skip


def _run_to_the_end(run_dir: Path, tmp_path: Path) -> None:
    for _ in range(3):
        _finish_device_step(run_dir, tmp_path)
        if continue_split_run(run_dir).phase == Phase.DONE:
            return
    raise AssertionError("the split run did not finish in three more round trips")


def test_the_flag_phase_is_one_round_trip_and_its_winner_reaches_every_later_compile(
    flag_run: Path, tmp_path: Path
) -> None:
    run_dir = _copy(flag_run, tmp_path)
    stored = _json(run_dir / MODEL_RUN_NAME)
    state = stored["split"]
    statuses = [(tuple(t["flag_set"]["flags"]), t["status"]) for t in state["flags"]["trials"]]
    assert statuses == [((), "default"), (NO_EFFECT, "no-effect"), (SMALL_TILES, "timed")]
    # Only the distinct binary goes to the device, beside the untouched default.
    manifest = _json(run_dir / DEVICE_MANIFEST_NAME)
    assert (stored["progress"]["pause"], state["round_trip"], manifest["round_trip"]) == (
        {"round_trip": 1}, 1, 1,
    )  # fmt: skip
    assert (manifest["default_model"], manifest["profile"], manifest["variants"]) == (
        "default.vmfb", None, None,
    )  # fmt: skip
    assert manifest["flags"]["models"] == [{"label": "2", "vmfb": "flags/2.vmfb"}]
    assert not (run_dir / "dispatches").exists()

    _finish_device_step(run_dir, tmp_path)
    measured = _json(run_dir / results_name(1))["flags"]
    assert (set(measured["first"]), measured["contenders"]) == ({"default", "2"}, ["2"])
    status = continue_split_run(run_dir)
    assert (status.phase, status.round_trip) == (Phase.AWAITING_DEVICE, 2)

    # The verdict, recorded as in process.
    stored = _json(run_dir / MODEL_RUN_NAME)
    state = stored["split"]
    assert (state["flags"]["decided"], state["flags"]["winner"]) == (True, 2)
    trials = _json(run_dir / "flags" / "trials.json")
    assert (trials["flow"], trials["winner"]) == ("split", list(SMALL_TILES))
    assert (
        trials["rule"]
        == "paired-bootstrap/0.95/above-0/real-input/by-low/faster-half-mean/median-guard/v1"
    )
    assert [(row["status"], row["verdict"]) for row in trials["trials"]] == [
        ("default", ""), ("no-effect", ""), ("timed", "winner"),
    ]  # fmt: skip
    assert trials["trials"][2]["confirmed"]["rounds"] == 10
    # Decided: the set without effect lost its binary; the default's and the winner's stay.
    assert sorted(p.name for p in (run_dir / "flags").glob("*.vmfb")) == ["0.vmfb", "2.vmfb"]
    # The profile dumped the dispatches under the winner: its benchmarks are those a compile
    # with the winner dumps (their configurations differ from the default flags' ones), the
    # dispatch folders carry the flags, and the device times the winner as the default.
    dumps = {}
    for name, flags in (("with", SMALL_TILES), ("without", ())):
        subprocess.run(
            [IREE_COMPILE, str(run_dir / stored["model"]["mlir"]), *CPU_FLAGS, *flags,
             "--iree-codegen-add-tuner-attributes",
             f"--iree-hal-dump-executable-benchmarks-to={tmp_path / name}",
             "-o", str(tmp_path / f"{name}.vmfb")],
            check=True, capture_output=True,
        )  # fmt: skip
        # (as the profile writes them: each buffer zeroed once, frontend/dispatches.py)
        dumps[name] = {
            p.name: zero_benchmark_buffer(p.read_text()) for p in (tmp_path / name).glob("*.mlir")
        }
    profiled = {p.name: p.read_text() for p in (run_dir / "dispatches").glob("*_benchmark.mlir")}
    assert profiled == dumps["with"] != dumps["without"]
    (folder,) = state["folders"].values()
    assert _json(run_dir / folder / "results.json")["global_flags"] == list(SMALL_TILES)
    manifest = _json(run_dir / DEVICE_MANIFEST_NAME)
    assert (manifest["default_model"], manifest["flags"]) == ("flags/2.vmfb", None)
    assert manifest["profile"] is not None and manifest["folders"] == [folder]

    _run_to_the_end(run_dir, tmp_path)
    assert (run_dir / "tuned_flags.txt").read_text() == "".join(f"{f}\n" for f in SMALL_TILES)
    report_text = (run_dir / "report.txt").read_text()
    assert (
        "flag phase (paired-bootstrap/0.95/above-0/real-input/by-low/faster-half-mean/"
        "median-guard/v1): kept --iree-llvmcpu-distribution-size=16: " in report_text
    )
    assert "note: runtime options: not searched in the split flow" in report_text
    assert f"@{run_dir / 'tuned_flags.txt'}" in report_text
    report = _json(run_dir / "report.json")
    assert (report["flags"], report["flag_search"]["winner"]) == (
        list(SMALL_TILES), list(SMALL_TILES),
    )  # fmt: skip
    assert [row["verdict"] for row in report["flag_search"]["trials"]] == ["", "", "winner"]


def test_sets_without_a_binary_of_their_own_need_no_round_trip(tmp_path: Path) -> None:
    run_dir = _prepare(tmp_path / "runs", "--try-flags", " ".join(NO_EFFECT))
    state = _json(run_dir / MODEL_RUN_NAME)["split"]
    assert (state["flags"]["decided"], state["flags"]["winner"]) == (True, None)
    trials = _json(run_dir / "flags" / "trials.json")
    assert ([row["status"] for row in trials["trials"]], trials["winner"]) == (
        ["default", "no-effect"], [],
    )  # fmt: skip
    # The first round trip is the profile's, of the model compiled with the run's own flags.
    manifest = _json(run_dir / DEVICE_MANIFEST_NAME)
    assert (manifest["round_trip"], manifest["default_model"]) == (1, "default.vmfb")
    assert manifest["profile"] is not None and manifest["flags"] is None


def test_flag_timings_of_another_manifest_or_binary_are_refused(
    flag_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A flag set's binary changed after it was compiled: the device step refuses to time it.
    run_dir = _copy(flag_run, tmp_path / "binary")
    binary = run_dir / "flags" / "2.vmfb"
    binary.write_bytes(binary.read_bytes() + b"\0")
    assert main(["device-step", str(run_dir)]) == 2
    assert capsys.readouterr().err == (
        f"ireetune: error: {run_dir}: flags/2.vmfb does not match the hash in device_step.json; "
        "the folder was changed after it was compiled\n"
    )
    # Flag timings measured from another manifest: continue refuses them, and decides nothing.
    run_dir = _copy(flag_run, tmp_path / "results")
    _finish_device_step(run_dir, tmp_path)
    results_path = run_dir / results_name(1)
    results = _json(results_path)
    results_path.write_text(json.dumps({**results, "manifest_sha256": "0" * 64}))
    with pytest.raises(IreetuneError) as excinfo:
        continue_split_run(run_dir)
    assert str(excinfo.value) == (
        f"{results_path} was not measured from this run's device_step.json; run the device "
        f"step again: ireetune measure {run_dir}"
    )
    assert _json(run_dir / MODEL_RUN_NAME)["split"]["flags"]["decided"] is False
    assert not (run_dir / "flags" / "trials.json").exists()


def test_a_flag_phase_stopped_before_its_manifest_resumes_without_compiling_again(
    flag_run: Path, tmp_path: Path
) -> None:
    run_dir = _copy(flag_run, tmp_path)
    # As if killed after the sets were compiled and recorded, before the manifest was written.
    (run_dir / DEVICE_MANIFEST_NAME).unlink()
    stored = _json(run_dir / MODEL_RUN_NAME)
    state = stored["split"]
    state.update(round_trip=0)
    stored["progress"]["pause"] = None
    state["flags"]["round_trip"] = 0
    (run_dir / MODEL_RUN_NAME).write_text(json.dumps(stored))
    before = {p: p.stat().st_mtime_ns for p in (run_dir / "flags").glob("*.vmfb")}
    status = continue_split_run(run_dir)
    assert (status.phase, status.round_trip) == (Phase.AWAITING_DEVICE, 1)
    assert {p: p.stat().st_mtime_ns for p in (run_dir / "flags").glob("*.vmfb")} == before
    assert _json(run_dir / MODEL_RUN_NAME)["split"]["flags"]["trials"] == state["flags"]["trials"]
    manifest = _json(run_dir / DEVICE_MANIFEST_NAME)
    assert [m["label"] for m in manifest["flags"]["models"]] == ["2"]
