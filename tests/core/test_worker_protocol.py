"""The worker protocol's supervisor with a real worker process that hangs, dies and restarts,
and the model-timing worker on it keeping a broken model from spoiling the others."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ireetune.compile.driver import build_request, run_compile
from ireetune.core.worker_protocol import FailureKind, WorkerFailure, supervise_worker
from ireetune.model.timing import ModelComparison, run_models_side_by_side_here
from ireetune.targets import parse_target
from tests.conftest import MATMUL_MODEL

# A worker that does what each job says: answer, hang, die, ask for a restart or find no device.
WORKER = """
import json, os, signal, sys, time
request = json.loads(sys.stdin.read())
for index, job in enumerate(request["jobs"]):
    print(json.dumps({"event": "start", "job_index": index}), flush=True)
    if job == "hang":
        time.sleep(60)
    if job == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    if job == "no-device":
        print(json.dumps({"event": "device-error", "reason": "no such device"}), flush=True)
        sys.exit(3)
    record = {"event": "result", "job_index": index, "job": job, "pid": os.getpid()}
    if job == "restart":
        print(json.dumps({**record, "restart": True}), flush=True)
        sys.exit(0)
    print(json.dumps(record), flush=True)
"""


def _supervise(jobs: Sequence[str], tmp_path: Path) -> list[tuple[str, object]]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    starts: list[int] = []

    def build_request(pending: Sequence[str], first_index: int) -> dict[str, object]:
        starts.append(first_index)
        return {"jobs": list(pending)}

    reports = supervise_worker("test", [sys.executable, str(script)], jobs, build_request, lambda: 2.0)  # fmt: skip
    found: list[tuple[str, object]] = []
    for report in reports:
        if report.failure is not None:
            found.append((report.job, report.failure.kind))
        else:
            assert report.record is not None and report.record["job"] == report.job
            found.append((report.job, "ok"))
    found.append(("worker starts", starts))
    return found


def test_a_hang_and_a_death_cost_only_their_job(tmp_path: Path) -> None:
    assert _supervise(["a", "hang", "b", "die", "c"], tmp_path) == [
        ("a", "ok"),
        ("hang", FailureKind.TIMED_OUT),
        ("b", "ok"),
        ("die", FailureKind.CRASHED),
        ("c", "ok"),
        ("worker starts", [0, 2, 4]),
    ]


def test_a_restart_request_gives_the_next_job_a_fresh_worker(tmp_path: Path) -> None:
    assert _supervise(["restart", "a", "b"], tmp_path) == [
        ("restart", "ok"),
        ("a", "ok"),
        ("b", "ok"),
        ("worker starts", [0, 1]),
    ]


def test_no_device_fails_every_job_left(tmp_path: Path) -> None:
    assert _supervise(["a", "no-device", "b"], tmp_path) == [
        ("a", "ok"),
        ("no-device", FailureKind.DEVICE_ERROR),
        ("b", FailureKind.DEVICE_ERROR),
        ("worker starts", [0]),
    ]


def test_a_crash_reason_names_the_worker_and_its_exit(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    (report,) = supervise_worker(
        "verification", [sys.executable, str(script)], ["die"], lambda p, i: {"jobs": list(p)}, lambda: 5.0
    )  # fmt: skip
    assert report.failure == WorkerFailure(
        FailureKind.CRASHED, "verification process died while running (exit -9)"
    )


def test_a_model_that_does_not_load_leaves_the_others_timed(tmp_path: Path) -> None:
    source = tmp_path / "matmul.mlir"
    source.write_text(MATMUL_MODEL)
    good = tmp_path / "good.vmfb"
    result = run_compile(build_request(parse_target("cpu"), source, good, timeout_s=120))
    assert result.ok, result.error_line
    broken = tmp_path / "broken.vmfb"
    broken.write_bytes(b"not a module")
    inputs = tmp_path / "inputs.npz"
    rng = np.random.default_rng(0)
    np.savez(inputs, arg0=rng.random((64, 96), np.float32), arg1=rng.random((96, 128), np.float32))
    runs = run_models_side_by_side_here(
        ModelComparison(
            [("default", good), ("broken", broken), ("again", good)], "main", inputs, tmp_path,
            "local-task", rounds=2,
        )
    )  # fmt: skip
    assert [(m, len(r.times_ms), r.ok) for m, r in runs.items()] == [
        ("default", 2, True),
        ("broken", 0, False),
        ("again", 2, True),
    ]
    np.testing.assert_array_equal(runs["default"].outputs[0], runs["again"].outputs[0])
