"""Issue 22, user inputs: a SIGTERM ends a run like Ctrl-C does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import MATMUL_MODEL

REPOSITORY = Path(__file__).resolve().parents[1]


def test_sigterm_mid_run_says_one_line_and_removes_the_scratch_folders(tmp_path: Path) -> None:
    model = tmp_path / "matmul.mlir"
    model.write_text(MATMUL_MODEL)
    scratch_parent = tmp_path / "tmp"
    scratch_parent.mkdir()
    environment = {**os.environ, "TMPDIR": str(scratch_parent), "PYTHONPATH": str(REPOSITORY)}
    process = subprocess.Popen(
        [sys.executable, "-m", "ireetune.cli", "tune-dispatch", str(model), "--no-db",
         "--num-candidates", "64", "--output-dir", str(tmp_path / "runs")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment,
    )  # fmt: skip
    # Wait until the run has its scratch folder: it is then mid-run, with work to clean up.
    deadline = time.monotonic() + 120
    while not list(scratch_parent.glob("ireetune_*")) and process.poll() is None:
        assert time.monotonic() < deadline, "the run never made its scratch folder"
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)

    assert (process.returncode, stderr) == (143, "ireetune: terminated\n")
    assert sorted(path.name for path in scratch_parent.glob("ireetune_*")) == []
