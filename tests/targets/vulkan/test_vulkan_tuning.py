"""Tuning on the Vulkan device end to end (Mesa's lavapipe in CI): one dispatch on two device
instances, the split flow's device step, and a whole model. Tiny shapes: lavapipe runs on the CPU.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ireetune.benchmark.runner import WORKER_COMMAND_VARIABLE
from ireetune.cli import main
from ireetune.flows.model.state import MODEL_RUN_NAME
from ireetune.flows.model.state import SplitStage as Phase
from ireetune.flows.model.tuner import continue_split_run
from tests.conftest import REPOSITORY, TESTS
from tests.flows.handoff.test_handoff import runtime_only_environment
from tests.vulkan_support import compile_for_vulkan, requires_vulkan

pytestmark = requires_vulkan

SLOW_DEFAULT_WORKER = str(TESTS / "slow_default_worker.py")

MATMUL = """
func.func @main(%lhs: tensor<64x96xf32>, %rhs: tensor<96x128xf32>) -> tensor<64x128xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<64x128xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<64x128xf32>) -> tensor<64x128xf32>
  %r = linalg.matmul ins(%lhs, %rhs : tensor<64x96xf32>, tensor<96x128xf32>)
                     outs(%init : tensor<64x128xf32>) -> tensor<64x128xf32>
  return %r : tensor<64x128xf32>
}
"""


# examples/mlp.mlir at a size lavapipe runs in milliseconds: two matmuls with a ReLU between.
def _mlp(batch: int, hidden: int) -> str:
    """A two-layer perceptron: [batch, 64] x [64, hidden], ReLU, x [hidden, 32]."""
    return f"""
func.func @mlp(%x: tensor<{batch}x64xf32>, %w1: tensor<64x{hidden}xf32>, %w2: tensor<{hidden}x32xf32>) -> tensor<{batch}x32xf32> {{
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<{batch}x{hidden}xf32>
  %i1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<{batch}x{hidden}xf32>) -> tensor<{batch}x{hidden}xf32>
  %h = linalg.matmul ins(%x, %w1 : tensor<{batch}x64xf32>, tensor<64x{hidden}xf32>) outs(%i1 : tensor<{batch}x{hidden}xf32>) -> tensor<{batch}x{hidden}xf32>
  %r = linalg.generic {{indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]}}
      ins(%h : tensor<{batch}x{hidden}xf32>) outs(%e1 : tensor<{batch}x{hidden}xf32>) {{
    ^bb0(%in: f32, %out: f32):
      %m = arith.maximumf %in, %zero : f32
      linalg.yield %m : f32
  }} -> tensor<{batch}x{hidden}xf32>
  %e2 = tensor.empty() : tensor<{batch}x32xf32>
  %i2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<{batch}x32xf32>) -> tensor<{batch}x32xf32>
  %y = linalg.matmul ins(%r, %w2 : tensor<{batch}x{hidden}xf32>, tensor<{hidden}x32xf32>) outs(%i2 : tensor<{batch}x32xf32>) -> tensor<{batch}x32xf32>
  return %y : tensor<{batch}x32xf32>
}}
"""


SMALL_MLP = _mlp(32, 128)
# Large enough that each matmul's share of the model clears the model flow's gate (a dispatch
# that cannot move the model past 1.01x is not tuned): on lavapipe a call of the small one is
# mostly submission overhead (8 ms, its two dispatches 0.2 ms: 1.7% and 0.9%).
TUNED_MLP = _mlp(256, 512)


def _candidate_rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "candidates.csv").open() as rows:
        return list(csv.DictReader(rows))


def _settled(status: str, stopped_early: bool) -> bool:
    """Say whether a candidate was measured, or stopped as hopeless against the baseline (two
    busy cores make a few candidates look that slow), rather than failing."""
    return status == "measured" or (status == "benchmark-timed-out" and stopped_early)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_tune_dispatch_on_two_vulkan_devices_verifies_and_writes_a_spec_that_lands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "matmul.mlir"
    source.write_text(MATMUL)
    drivers = tmp_path / "drivers.txt"
    monkeypatch.setenv(WORKER_COMMAND_VARIABLE, json.dumps([sys.executable, SLOW_DEFAULT_WORKER]))
    # Timings of one kernel on lavapipe ranged over 100x on the busy test machine: the default is
    # made 1000x slower so that every confirmed interval clears the threshold.
    monkeypatch.setenv("IREETUNE_TEST_DEFAULT_SLOWDOWN", "1000")
    monkeypatch.setenv("LP_NUM_THREADS", "1")
    monkeypatch.setenv("IREETUNE_TEST_DRIVER_LOG", str(drivers))
    status = main(
        [
            "tune-dispatch", str(source), "--target", "vulkan", "--devices", "vulkan,vulkan",
            "--num-candidates", "4", "--confirm-rounds", "2", "--repetitions", "3", "--no-db",
            "--output-dir", str(tmp_path / "runs"), "--no-progress",
        ]
    )  # fmt: skip
    assert status == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    results = json.loads((run_dir / "results.json").read_text())
    assert results["devices"] == ["vulkan", "vulkan"]
    rows = _candidate_rows(run_dir)
    # Measured on the device; the leaders' outputs then checked against the default's there.
    assert {row["device"] for row in rows} == {"vulkan"}
    assert {row["status"] for row in rows} <= {"measured", "verified"}
    assert len(rows) == 5
    # Every job the worker timed ran on the Vulkan driver, never on the CPU's.
    assert set(drivers.read_text().split()) == {"vulkan"}
    # The winner's outputs were compared with the default's on the device; its spec was written.
    assert results["spec_written"], results["why"]
    winners = [row for row in rows if row["verdict"] == "winner"]
    assert [(row["status"], row["outputs_match"]) for row in winners] == [("verified", "true")]
    spec = run_dir / "best_spec.mlir"
    assert spec.exists()

    # The written spec applies through `ireetune compile`, which says where it landed; the
    # binary differs from the default's for the same target.
    tuned = tmp_path / "tuned.vmfb"
    command = ["compile", str(source), "--target", "vulkan", "--spec", str(spec), "-o", str(tuned)]
    assert main(command) == 0
    assert "landed: @match_matmul_64x128x96_f32_f32_f32 configured main_dispatch_0" in (
        capsys.readouterr().out
    )
    default = compile_for_vulkan(source, tmp_path / "default.vmfb")
    assert _digest(tuned) != _digest(default)


def _device_step(run_dir: Path, tmp_path: Path) -> str:
    """Run the device step as a device host would, with the compiler's imports blocked."""
    blocker_home = tmp_path / "runtime_only"
    if not blocker_home.exists():
        blocker_home.mkdir()
        runtime_only_environment(blocker_home)
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(blocker_home / "blocker"), str(REPOSITORY)]),
    }
    step = subprocess.run(
        [sys.executable, "-m", "ireetune.cli", "device-step", str(run_dir)],
        env=environment, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert step.returncode == 0, step.stderr
    return step.stdout


def test_split_flow_device_step_measures_on_vulkan(tmp_path: Path) -> None:
    source = tmp_path / "mlp.mlir"
    source.write_text(SMALL_MLP)
    status = main(
        [
            "tune", str(source), "--target", "vulkan", "--stop-after", "compile",
            "--output-dir", str(tmp_path / "runs"), "--num-candidates", "2",
            "--candidates-per-dispatch", "1", "--rounds", "2", "--no-db", "--no-progress",
        ]
    )  # fmt: skip
    assert status == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    stored = json.loads((run_dir / MODEL_RUN_NAME).read_text())
    state = stored["split"]
    assert (stored["progress"]["pause"], state["devices"]) == ({"round_trip": 1}, ["vulkan"])

    _device_step(run_dir, tmp_path)
    results = json.loads((run_dir / "device" / "results_1.json").read_text())
    assert results["profile"]["device"] == "vulkan"
    assert results["folders"] == {folder: "measured" for folder in state["folders"].values()}
    for folder in state["folders"].values():
        measured = json.loads((run_dir / folder / "benchmark_results.json").read_text())
        assert measured["devices"] == ["vulkan"]
        candidates = measured["campaign"]["candidates"]
        assert {(c["device"], _settled(c["status"], c["stopped_early"])) for c in candidates} == {
            ("vulkan", True)
        }, candidates

    # Round trip 2 times the variants on the device; the decision follows.
    assert continue_split_run(run_dir).phase == Phase.AWAITING_DEVICE
    _device_step(run_dir, tmp_path)
    assert continue_split_run(run_dir).phase == Phase.DONE
    report = json.loads((run_dir / "report.json").read_text())
    assert (report["devices"], report["round_trips"]) == (["vulkan"], 2)
    # Every variant was run on the device: its outputs compared with the default's, and timed.
    assert report["variants"]
    for variant in report["variants"]:
        assert (variant["outputs_match"], variant["first_speedup"] is not None) == (True, True)


def test_tune_a_model_on_vulkan(tmp_path: Path) -> None:
    source = tmp_path / "mlp.mlir"
    source.write_text(TUNED_MLP)
    status = main(
        [
            "tune", str(source), "--target", "vulkan", "--output-dir", str(tmp_path / "runs"),
            "--num-candidates", "2", "--candidates-per-dispatch", "1", "--rounds", "2",
            "--no-db", "--no-progress",
        ]
    )  # fmt: skip
    assert status == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    sessions = sorted((run_dir / "tuning").iterdir())
    assert len(sessions) == 2
    for session in sessions:
        rows = _candidate_rows(session)
        settled = {
            (row["device"], _settled(row["status"], row["stopped_early"] == "yes")) for row in rows
        }
        assert settled == {("vulkan", True)}, rows
        assert rows[0]["status"] == "measured"
