"""Broken candidates, injected for real: the run completes and keeps every other result."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import FAST_RUN_ARGS, IREE_COMPILE

TESTS = Path(__file__).parent


def test_run_survives_compile_crash_compile_hang_runtime_crash_benchmark_hang_and_device_fault(
    matmul_benchmark: Path, tmp_path: Path
) -> None:
    environment = {
        **os.environ,
        "IREETUNE_IREE_COMPILE": str(TESTS / "fault_compiler.py"),
        "FAULT_REAL_IREE_COMPILE": IREE_COMPILE,
        "FAULT_COMPILE_MODE": "crash:1,hang:2",
        "IREETUNE_BENCHMARK_WORKER": json.dumps([sys.executable, str(TESTS / "fault_worker.py")]),
        "IREETUNE_FAULT_CRASH": "3",
        "IREETUNE_FAULT_HANG": "4",
        "IREETUNE_FAULT_DEVICE": "5",
        "PYTHONPATH": str(TESTS.parent),
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ireetune.cli",
            "tune-dispatch",
            str(matmul_benchmark),
            "--num-candidates",
            "8",
            "--output-dir",
            str(tmp_path),
            "--compile-timeout",
            "8",
            "--benchmark-timeout",
            "3",
            *FAST_RUN_ARGS,
        ],
        capture_output=True,
        text=True,
        env=environment,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr
    (run_dir,) = tmp_path.iterdir()
    candidates = json.loads((run_dir / "results.json").read_text())["candidates"]
    statuses = {c["candidate_id"]: c["status"] for c in candidates}
    assert statuses[1] == "compile-failed"
    assert candidates[1]["reason"].startswith("compiler crashed (signal 11)")
    assert statuses[2] == "compile-timed-out"
    assert statuses[3] == "crashed"
    assert "benchmark process died while running (exit -11)" in candidates[3]["reason"]
    assert statuses[4] == "benchmark-timed-out"
    # --benchmark-timeout 3 sets the load allowance: the hang is cut well before the default 10 s.
    waited = float(re.search(r"no result within ([0-9.]+) s", candidates[4]["reason"]).group(1))
    assert 3.0 <= waited < 10.0
    # Candidate 5 broke its worker's device; the candidates after it ran in a fresh worker.
    assert statuses[5] == "benchmark-failed"
    assert candidates[5]["reason"].startswith("RuntimeError: injected device fault")
    healthy = [statuses[i] for i in (6, 7, 8)]
    assert all(
        s in ("measured", "verified", "unverified", "wrong", "duplicate", "not-applied")
        for s in healthy
    ), healthy
    assert any(s in ("measured", "verified") for s in healthy)
    assert statuses[0] == "measured"
