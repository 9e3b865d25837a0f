"""bench/gpu_check.py end to end: prepare here, the device verb in a process that can import
neither the IREE compiler nor onnx, report here; on the stand-ins (local-task, lavapipe), a call
cut short by its deadline, and the size of the CUDA payload."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from ireetune.benchmark.runner import WORKER_COMMAND_VARIABLE
from tests.conftest import REPOSITORY
from tests.flows.handoff.test_handoff import IMPORT_BLOCKER
from tests.vulkan_support import requires_vulkan

SCRIPT = REPOSITORY / "bench" / "gpu_check.py"
# Two matmuls: two dispatch folders and their predicted variants, each compiled in well under a
# second.
TINY_MODEL = """
func.func @main(%x: tensor<32x64xf32>, %w1: tensor<64x128xf32>, %w2: tensor<128x32xf32>) -> tensor<32x32xf32> {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<32x128xf32>
  %i1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<32x128xf32>) -> tensor<32x128xf32>
  %h = linalg.matmul ins(%x, %w1 : tensor<32x64xf32>, tensor<64x128xf32>) outs(%i1 : tensor<32x128xf32>) -> tensor<32x128xf32>
  %e2 = tensor.empty() : tensor<32x32xf32>
  %i2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<32x32xf32>) -> tensor<32x32xf32>
  %y = linalg.matmul ins(%h, %w2 : tensor<32x128xf32>, tensor<128x32xf32>) outs(%i2 : tensor<32x32xf32>) -> tensor<32x32xf32>
  return %y : tensor<32x32xf32>
}
"""
# The wheels the device installs (docs/gpu.md, "One GPU call"): iree-base-runtime 3.13.0, its
# ml_dtypes, pydantic and pydantic-core with their pure-Python dependencies, for CPython 3.12,
# 17.6 MiB on 2026-12-01.
WHEEL_BYTES = 18 * 2**20
# The full suite: 64 candidates per dispatch, each of the first eighth carried twice (the
# `first` and `all` stages), and 16 per model dispatch.
FULL_CANDIDATES = 64
STAND_IN_DISPATCHES = [
    "mmt_64x64x128_f32", "mmt_32x128x64_f32", "mmt_128x32x64_f32", "bmm_2x32x32x64_f32",
]  # fmt: skip
FULL_MODEL_CANDIDATES = 16
# What examples/transformer_block.mlir (the full suite's model) carries beyond this test's tiny
# model, compressed: its first input (2 MiB of random f16), default binary, dispatch benchmarks
# and variants. An upper bound: the full build's whole xz payload, model included, was 3.7 MiB
# (docs/gpu.md).
TRANSFORMER_BLOCK_BYTES = 4 * 2**20


def run_script(
    *arguments: str, environment: dict[str, str] | None = None, timeout: float = 900.0
) -> str:
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), *arguments],
        capture_output=True, text=True, check=False, env=environment, timeout=timeout,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return completed.stdout


def prepare(folder: Path, target: str, *extra: str) -> Path:
    """Prepare the reduced suite (4 candidates per dispatch) and the tiny model for `target`."""
    model = folder / "tiny.mlir"
    model.write_text(TINY_MODEL)
    payload = folder / "payload"
    run_script(
        "prepare", "--target", target, "--out", str(payload), "--candidates", "4",
        "--model", str(model), "--wheels", "none", *extra,
    )  # fmt: skip
    return payload


def runtime_only_environment(folder: Path) -> dict[str, str]:
    """Return an environment where importing the IREE compiler, z3, rich or onnx fails and the
    checkout is not on the path: the device verb finds ireetune in the payload only."""
    blocker = folder / "blocker"
    blocker.mkdir(exist_ok=True)
    (blocker / "sitecustomize.py").write_text(IMPORT_BLOCKER)
    return {**os.environ, "PYTHONPATH": str(blocker)}


def run_device(payload: Path, *extra: str) -> dict[str, Any]:
    environment = runtime_only_environment(payload.parent)
    blocked = subprocess.run(
        [sys.executable, "-c", "import iree.compiler"], env=environment, check=False
    )
    assert blocked.returncode != 0
    run_script("device", str(payload), *extra, environment=environment)
    log: dict[str, Any] = json.loads((payload / "device_log.json").read_text())
    return log


def table_rows(text: str) -> dict[str, str]:
    """Return the report's table rows by their first cell."""
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    return {row.split("|")[1].strip(): row for row in rows}


def check_complete_report(payload: Path, text: str, expected: list[str]) -> None:
    plan = json.loads((payload / "plan.json").read_text())
    rows = table_rows(text)
    names = [entry["name"] for entry in plan["dispatches"]]
    assert names == expected
    for name in names:
        assert "decided on 'all'; complete" in rows[name], rows[name]
        assert "/s |" in rows[name]
    assert "not run on this stand-in" in rows["attention"]
    assert "not decided" not in rows["model tiny.mlir"]
    assert "variants" in rows["model tiny.mlir"]
    assert "time" in rows


@pytest.fixture(scope="module")
def cpu_payload(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepare(tmp_path_factory.mktemp("gpu_check_cpu"), "cpu")


def test_cpu_stand_in_end_to_end(cpu_payload: Path, tmp_path: Path) -> None:
    payload = tmp_path / "payload"
    shutil.copytree(cpu_payload, payload)
    shutil.copytree(cpu_payload.parent / "payload.work", tmp_path / "payload.work")
    log = run_device(payload)
    assert [unit["status"] for unit in log["units"]] == ["done"] * 13
    assert [unit["kind"] for unit in log["units"]][::4] == ["defaults", "first", "model", "all"]
    check_complete_report(payload, run_script("report", str(payload)), STAND_IN_DISPATCHES)


def test_device_cut_short_keeps_what_it_measured(cpu_payload: Path, tmp_path: Path) -> None:
    payload = tmp_path / "payload"
    shutil.copytree(cpu_payload, payload)
    shutil.copytree(cpu_payload.parent / "payload.work", tmp_path / "payload.work")
    archive = tmp_path / "back" / "results.tar.gz"
    archive.parent.mkdir()
    # Eight dispatch stages come before the model: 30 s never reaches its end.
    log = run_device(payload, "--deadline", "30", "--archive", str(archive))
    statuses = {(u["kind"], u["name"]): u["status"] for u in log["units"]}
    assert statuses[("model", "model")] != "done"
    # A step that reaches the deadline is stopped there (seconds allowed, and the kill's).
    assert all(u["seconds"] <= u.get("allowed_s", 0.0) + 3.0 for u in log["units"])
    assert log["seconds"]["total"] < 30 + 5
    with tarfile.open(archive) as tar:
        archived = set(tar.getnames())
    # Every step that finished is in the archive; a step cut short may have saved its
    # measurements before its output checks, and nothing else is there.
    done = {u["folder"] for u in log["units"] if u["status"] == "done"}
    ran = {u["folder"] for u in log["units"] if u["status"] in ("done", "cut by the deadline")}
    results = {name for name in archived if name.endswith("benchmark_results.json")}
    assert {f"{folder}/benchmark_results.json" for folder in done} <= results
    assert results <= {f"{folder}/benchmark_results.json" for folder in ran}
    assert "device_log.json" in archived
    rows = table_rows(run_script("report", str(payload), str(archive)))
    plan = json.loads((payload / "plan.json").read_text())
    for entry in plan["dispatches"]:
        row = rows[entry["name"]]
        assert "missing: " in row and "all (" in row
        if statuses[("defaults", entry["name"])] == "done":
            assert "decided on 'defaults'" in row or "decided on 'first'" in row
    assert "not decided" in rows["model tiny.mlir"] and "missing" in rows["model tiny.mlir"]


def test_device_stops_a_step_at_its_deadline(cpu_payload: Path, tmp_path: Path) -> None:
    payload = tmp_path / "payload"
    shutil.copytree(cpu_payload, payload)
    shutil.copytree(cpu_payload.parent / "payload.work", tmp_path / "payload.work")
    # A benchmark worker that never answers: the first step runs into the deadline, before the
    # product's own 10 s load timeout would end it.
    hanging = json.dumps([sys.executable, "-c", "import time; time.sleep(1000)"])
    environment = {**runtime_only_environment(tmp_path), WORKER_COMMAND_VARIABLE: hanging}
    run_script("device", str(payload), "--deadline", "17", environment=environment, timeout=60)
    log = json.loads((payload / "device_log.json").read_text())
    first, *rest = log["units"]
    assert first["status"] == "cut by the deadline"
    assert first["seconds"] <= first["allowed_s"] + 3.0
    assert {unit["status"] for unit in rest} == {"not started: the deadline"}
    assert log["seconds"]["total"] < 17 + 5
    rows = table_rows(run_script("report", str(payload)))
    name = first["name"]
    assert (
        "missing: defaults (cut by the deadline), first (not started: the deadline)" in rows[name]
    )


@requires_vulkan
def test_vulkan_stand_in_end_to_end(tmp_path: Path) -> None:
    # Two of the four dispatches: lavapipe times slowly.
    dispatches = STAND_IN_DISPATCHES[1::2]
    payload = prepare(tmp_path, "vulkan", "--only", ",".join(dispatches))
    log = run_device(payload)
    assert {unit["status"] for unit in log["units"]} == {"done"}
    check_complete_report(payload, run_script("report", str(payload)), dispatches)


def test_cuda_payload_of_the_full_suite_fits(tmp_path: Path) -> None:
    payload = prepare(tmp_path, "cuda:sm_80")
    work = tmp_path / "payload.work"
    plan = json.loads((payload / "plan.json").read_text())
    assert [entry["family"] for entry in plan["dispatches"]] == [
        "matmul", "matmul", "matmul", "batch matmul", "attention",
    ]  # fmt: skip
    archive = payload / "payload.tar.xz"
    with tarfile.open(archive) as tar:
        raw = sum(member.size for member in tar.getmembers() if member.isfile())
    # The share of its raw bytes the xz archive keeps, over everything in it (the model's random
    # input included, which does not compress): an upper bound for candidates.
    ratio = archive.stat().st_size / raw
    assert ratio < 0.5
    # What the full suite adds to this reduced one: each dispatch's candidates up to 64 (and
    # its first eighth carried twice), each model dispatch's up to 16.
    added = 0.0
    for entry in plan["dispatches"]:
        stage = work / entry["stages"]["all"]
        manifest = json.loads((stage / "handoff.json").read_text())
        sizes = [
            (stage / c["vmfb"]).stat().st_size + (stage / c["reference_vmfb"]).stat().st_size
            for c in manifest["candidates"]
        ]
        assert len(sizes) == entry["compiled"] >= 1
        per_candidate = sum(sizes) / len(sizes)
        assert per_candidate == pytest.approx(entry["bytes_per_candidate"])
        # A CUDA candidate and its reference program: tens to hundreds of kilobytes, a fifth of
        # that in the archive.
        assert 10_000 < per_candidate < 400_000, (entry["name"], per_candidate)
        carried = len(sizes) + entry["first"]
        added += ratio * per_candidate * (FULL_CANDIDATES + FULL_CANDIDATES // 8 - carried)
    model = plan["model"]
    assert 5_000 < model["bytes_per_candidate"] < 400_000
    added += (
        ratio
        * model["bytes_per_candidate"]
        * (FULL_MODEL_CANDIDATES - model["candidates"])
        * len(model["predicted"])
    )
    carried_now = sum(p.stat().st_size for p in payload.rglob("*") if p.is_file())
    full = carried_now + added + WHEEL_BYTES + TRANSFORMER_BLOCK_BYTES
    assert full < 50 * 2**20, full / 2**20
