"""Start child processes that never outlive the tuner.

Every process ireetune starts (compiles, the benchmark, verification and model workers) goes
through `start_child` or `run_child`. Each child

- leads its own process group, so stopping it (a timeout, an interrupt) kills the group: the
  child and whatever it started;
- on Linux asks the kernel to SIGKILL it when the tuner dies (`PR_SET_PDEATHSIG`), so even a
  tuner killed with SIGKILL leaves no compile or worker running under PID 1.

The kernel sends the parent-death signal when the *thread* that started the child ends, not the
process: start a child and wait for it in the same thread (the compile pool's threads live as
long as the pool, the benchmark runner starts and stops its worker in the thread that reads it).

The parent-death signal reaches the child only, not what the child started (iree-compile runs
its linker as a child of its own). So a small watchdog process, started once, is told each
child's group; when the tuner dies without saying goodbye (its pipe closes without the clean-exit
line), the watchdog kills every process still in those groups that started after the group's
leader.

A child in its own group no longer receives the terminal's Ctrl-C, so an interrupted tuner stops
them itself: `stop_all_children` kills every live child's group and lets no new child start
(the command line calls it on KeyboardInterrupt, the compile pool before it waits for its
threads).

Runtime-only: imported by the benchmark side, so nothing here may import the compiler.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import os
import signal
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def _load_prctl() -> Callable[..., int] | None:
    """Resolve libc's prctl once, before any fork: the child must not load libraries."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return prctl


_PRCTL = _load_prctl()
# Built before any fork, like _PRCTL: between fork and exec the child runs as little as it can.
_SIGKILL_ARGUMENT = ctypes.c_ulong(signal.SIGKILL.value)
_live_children: weakref.WeakSet[subprocess.Popen[str]] = weakref.WeakSet()
_live_children_lock = threading.Lock()
_stopping = threading.Event()


def _die_with_parent(parent_pid: int) -> None:
    """Run in the child between fork and exec: ask for SIGKILL when the parent dies."""
    if _PRCTL is None:
        return
    _PRCTL(_PR_SET_PDEATHSIG, _SIGKILL_ARGUMENT)
    # The parent may have died between fork and prctl; then nobody would ever send the signal.
    if os.getppid() != parent_pid:
        os._exit(1)


# The watchdog: reads "+PGID STARTTIME" and "-PGID" lines; "!" means a clean exit (kill nothing).
# On end of input without "!", it SIGKILLs every process of a recorded group that started no
# earlier than the group's leader (so a reused group id is never hit). Plain Python, no imports
# of ours: it starts in tens of milliseconds.
_WATCHDOG_CODE = """
import os, signal, sys
groups = {}
clean = False
for line in sys.stdin:
    line = line.strip()
    if line == "!":
        clean = True
    elif line.startswith("+"):
        group, start = line[1:].split()
        groups[int(group)] = int(start)
    elif line.startswith("-"):
        groups.pop(int(line[1:]), None)
if not clean and groups:
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        group, start = int(fields[2]), int(fields[19])
        if group in groups and start >= groups[group]:
            try:
                os.kill(int(entry), signal.SIGKILL)
            except OSError:
                pass
"""


class _Watchdog:
    """The process that kills our children's groups if this process dies (Linux only)."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    def _send(self, line: str) -> None:
        if self._process is None or self._process.poll() is not None:
            self._process = subprocess.Popen(
                [sys.executable, "-c", _WATCHDOG_CODE],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                text=True,
                start_new_session=True,
            )
        assert self._process.stdin is not None
        try:
            self._process.stdin.write(line + "\n")
            self._process.stdin.flush()
        except (BrokenPipeError, OSError):
            self._process = None

    def watch(self, pid: int) -> None:
        """Record a new child's group (led by `pid`)."""
        start = process_start_time(pid)
        if start is None:
            return
        with self._lock:
            self._send(f"+{pid} {start}")

    def forget(self, pid: int) -> None:
        """The child's group is done: stop watching it."""
        with self._lock:
            if self._process is not None:
                self._send(f"-{pid}")

    def close(self) -> None:
        """A clean exit: tell the watchdog to kill nothing, and let it go."""
        with self._lock:
            if self._process is not None and self._process.poll() is None:
                self._send("!")
                assert self._process.stdin is not None
                self._process.stdin.close()


def process_start_time(pid: int) -> int | None:
    """Return a process's start time in clock ticks since boot (Linux /proc), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[19])


_WATCHDOG = _Watchdog()
atexit.register(_WATCHDOG.close)


def start_child(
    arguments: Sequence[str],
    *,
    stdin: int | None = subprocess.DEVNULL,
    stdout: int | None = subprocess.PIPE,
    stderr: int | None = subprocess.PIPE,
) -> subprocess.Popen[str]:
    """Start `arguments` (no shell) as a child in its own group that dies with this process.

    After `stop_all_children` the process is exiting: the asking thread ends quietly instead.
    """
    with _live_children_lock:
        if _stopping.is_set():
            raise SystemExit(130)
        process = subprocess.Popen(
            list(arguments),
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            text=True,
            # A compiler echoes the user's input back in its errors: a binary file must not end
            # the tuner in a decode error.
            errors="replace",
            process_group=0,
            preexec_fn=functools.partial(_die_with_parent, os.getpid()),
        )
        _live_children.add(process)
    if sys.platform.startswith("linux"):
        _WATCHDOG.watch(process.pid)
    return process


def stop_all_children() -> None:
    """Kill every live child's group and start no more: the tuner was interrupted."""
    with _live_children_lock:
        _stopping.set()
        children = list(_live_children)
    for process in children:
        if process.poll() is None:
            stop_child(process)


def stop_child(process: subprocess.Popen[str]) -> None:
    """Kill a child's whole process group (the child and its own children); reap the child."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        # No such group: every member exited, or the child left it (setsid); kill it alone.
        if process.poll() is None:
            process.kill()
    process.wait()
    _WATCHDOG.forget(process.pid)


@dataclass(frozen=True)
class ChildResult:
    """What one finished (or stopped) child returned."""

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool


def run_child(arguments: Sequence[str], *, timeout_s: float | None = None) -> ChildResult:
    """Run a child to completion and capture its output; past `timeout_s`, kill its group.

    Raises OSError when the program cannot be started. Any exception while waiting (an
    interrupt) kills the group before it propagates.
    """
    process = start_child(arguments)
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stop_child(process)
        stdout, stderr = process.communicate()
        return ChildResult(-1, stdout or "", stderr or "", timed_out=True)
    except BaseException:
        stop_child(process)
        raise
    _WATCHDOG.forget(process.pid)
    return ChildResult(process.returncode, stdout, stderr, timed_out=False)
