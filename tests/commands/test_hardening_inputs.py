"""Issue 22, user inputs: a SIGTERM ends a run like Ctrl-C does; good --input values still pass."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ireetune.model.prepare import write_model_inputs
from tests.conftest import MATMUL_MODEL, REPOSITORY


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
    # Wait until the run has a scratch folder in its private temp folder (which it makes first,
    # at start): it is then mid-run, with work to clean up.
    deadline = time.monotonic() + 120
    while not list(scratch_parent.glob("ireetune_run_*/ireetune_*")) and process.poll() is None:
        assert time.monotonic() < deadline, "the run never made its scratch folder"
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)

    assert (process.returncode, stderr) == (143, "ireetune: terminated\n")
    assert sorted(path.name for path in scratch_parent.glob("ireetune_*")) == []


def test_model_inputs_that_match_the_signature_are_written(tmp_path: Path) -> None:
    model = tmp_path / "matmul.mlir"
    model.write_text(MATMUL_MODEL)
    inputs_path = tmp_path / "inputs.npz"

    _, function = write_model_inputs(model, ["64x96xf32=1.5", "96x128xf32"], 0, inputs_path)

    with np.load(inputs_path) as arrays:
        shapes = {name: (arrays[name].shape, str(arrays[name].dtype)) for name in arrays.files}
        first = arrays["arg0"]
        assert (first == 1.5).all()
    assert (function, shapes) == (
        "main",
        {"arg0": ((64, 96), "float32"), "arg1": ((96, 128), "float32")},
    )


def test_a_sigterm_whose_exception_python_swallowed_is_delivered_again() -> None:
    """SIGTERM handled inside a callback whose exceptions Python only reports (an after-fork
    hook; here a finalizer): the run must still end, so the report hook delivers it again."""
    import functools

    from ireetune.cli import _raise_terminated, _redeliver_swallowed, _Terminated

    reported: list[object] = []

    class SignalledWhileFinalized:
        def __del__(self) -> None:
            # The handler runs inside the finalizer; Python reports its exception and goes on.
            signal.raise_signal(signal.SIGTERM)

    class FailsWhileFinalized:
        def __del__(self) -> None:
            raise ValueError("not ours")

    previous_handler = signal.signal(signal.SIGTERM, _raise_terminated)
    previous_hook = sys.unraisablehook
    sys.unraisablehook = functools.partial(_redeliver_swallowed, previous=reported.append)
    try:
        FailsWhileFinalized()
        assert len(reported) == 1
        with pytest.raises(_Terminated):
            SignalledWhileFinalized()
            time.sleep(2.0)  # The signal is delivered again, and unwinds, within this sleep.
        assert len(reported) == 1
    finally:
        sys.unraisablehook = previous_hook
        signal.signal(signal.SIGTERM, previous_handler)
