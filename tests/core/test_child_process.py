"""No child outlives the tuner: a timeout kills the child's group, a killed tuner kills its children."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ireetune.core.child_process import run_child
from ireetune.core.tools import run_tool

# A stand-in program that records its pid (and, when asked, starts a grandchild that records
# its own), then sleeps far longer than any test waits.
SLEEPER = """\
#!{python}
import os, subprocess, sys, time
pid_dir = {pid_dir!r}
open(os.path.join(pid_dir, f"{{os.getpid()}}.pid"), "w").close()
if os.environ.get("SLEEPER_GRANDCHILD"):
    subprocess.Popen([sys.executable, "-c",
        "import os, time; open(os.path.join(%r, f'{{os.getpid()}}.pid'), 'w').close(); time.sleep(600)"
        % pid_dir])
time.sleep(600)
"""


def _write_sleeper(folder: Path) -> tuple[Path, Path]:
    pid_dir = folder / "pids"
    pid_dir.mkdir()
    script = folder / "sleeping-compiler"
    script.write_text(SLEEPER.format(python=sys.executable, pid_dir=str(pid_dir)))
    script.chmod(0o755)
    return script, pid_dir


def _pids(pid_dir: Path) -> set[int]:
    return {int(path.stem) for path in pid_dir.glob("*.pid")}


def _alive(pid: int) -> bool:
    """A process that exists and is not a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_until(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def _survivors(pids: set[int]) -> list[int]:
    """Wait a little for `pids` to die; kill (and return) the ones still alive."""
    _wait_until(lambda: not any(_alive(pid) for pid in pids), 5.0)
    alive = sorted(pid for pid in pids if _alive(pid))
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    return alive


def test_timeout_kills_the_child_and_its_grandchild(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script, pid_dir = _write_sleeper(tmp_path)
    monkeypatch.setenv("SLEEPER_GRANDCHILD", "1")
    started = time.monotonic()
    result = run_tool([str(script)], timeout_s=1.5)
    assert result.timed_out and time.monotonic() - started < 10
    pids = _pids(pid_dir)
    assert len(pids) == 2
    assert _survivors(pids) == []


def test_child_finishing_normally_returns_its_output() -> None:
    result = run_child([sys.executable, "-c", "print('abc'.upper())"])
    assert (result.returncode, result.stdout, result.timed_out) == (0, "ABC\n", False)


@pytest.mark.parametrize("grandchild", [False, True], ids=["compiler", "compiler-and-its-linker"])
def test_sigkilled_tuner_leaves_no_compiler_running(
    grandchild: bool, matmul_benchmark: Path, tmp_path: Path
) -> None:
    # With a grandchild (as iree-compile runs its linker), the parent-death signal reaches only
    # the compiler: the watchdog must kill the rest of its group.
    script, pid_dir = _write_sleeper(tmp_path)
    extra = {"SLEEPER_GRANDCHILD": "1"} if grandchild else {}
    tuner = subprocess.Popen(
        [
            sys.executable, "-m", "ireetune.cli", "tune-dispatch", str(matmul_benchmark),
            "--num-candidates", "3", "--jobs", "2", "--no-db", "--no-progress",
            "--output-dir", str(tmp_path / "runs"),
        ],
        env={
            **os.environ, "IREETUNE_IREE_COMPILE": str(script), "IREETUNE_IREE_OPT": str(script),
            # A killed tuner cannot remove its scratch folder: it stays in the test's folder.
            "TMPDIR": str(tmp_path), **extra,
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        expected = 2 if grandchild else 1
        assert _wait_until(lambda: len(_pids(pid_dir)) >= expected, 60.0), "no compile started"
        time.sleep(0.3)
    finally:
        tuner.send_signal(signal.SIGKILL)
        tuner.wait()
    pids = _pids(pid_dir)
    assert len(pids) >= expected
    assert _survivors(pids) == []


def test_interrupted_tuner_stops_its_compiles_at_once(
    matmul_benchmark: Path, tmp_path: Path
) -> None:
    # Compiles run in their own process groups, so Ctrl-C reaches only the tuner: it must stop
    # them itself rather than wait for the compile pool (here: 600 s sleeps).
    script, pid_dir = _write_sleeper(tmp_path)
    tuner = subprocess.Popen(
        [
            sys.executable, "-m", "ireetune.cli", "tune-dispatch", str(matmul_benchmark),
            "--num-candidates", "3", "--jobs", "2", "--no-db", "--no-progress",
            "--output-dir", str(tmp_path / "runs"),
        ],
        env={**os.environ, "IREETUNE_IREE_COMPILE": str(script)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        # A test runner in the background may ignore SIGINT, and children inherit that; a tuner
        # in a terminal has the default disposition.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        assert _wait_until(lambda: len(_pids(pid_dir)) >= 2, 60.0), "the compile pool did not start"
        tuner.send_signal(signal.SIGINT)
        _, stderr = tuner.communicate(timeout=20)
    finally:
        if tuner.poll() is None:
            tuner.kill()
            tuner.wait()
    assert (tuner.returncode, stderr) == (130, "ireetune: interrupted\n")
    assert _survivors(_pids(pid_dir)) == []
