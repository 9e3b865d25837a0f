"""Locate IREE's command-line tools and run them without a shell."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from ireetune.core.child_process import ChildResult, run_child
from ireetune.core.errors import IreetuneError

# Passed with every spec (and IREE's default specs): IREE 3.13 parses a spec under a lock
# (`IREECodegenDialect::getOrLoadTransformLibraryModule`) while MLIR's verifier may run other
# tasks on the same thread, one of which takes the lock again for another executable, and the
# compiler then hangs for ever (seen in CI on 2026-11-28, a reduction's reference program with its
# spec; upstream fixed the same pattern in the ROCm dialect, iree-org/iree#22843). Compiling
# without MLIR's threads avoids it; the binary is the same, the compile about 15% slower.
SPEC_SAFETY_FLAGS = ("--mlir-disable-threading",)

# Environment variables that replace a tool with another executable. Fault-injection tests and
# users with a custom IREE build use them; the value is an executable path, never a shell string.
_TOOL_OVERRIDE_VARIABLES = {
    "iree-compile": "IREETUNE_IREE_COMPILE",
    "iree-opt": "IREETUNE_IREE_OPT",
    "iree-benchmark-module": "IREETUNE_IREE_BENCHMARK_MODULE",
    "iree-import-onnx": "IREETUNE_IREE_IMPORT_ONNX",
}


def find_tool(name: str) -> str:
    """Return the path of IREE tool `name`, preferring an override, then this Python's bin."""
    override_variable = _TOOL_OVERRIDE_VARIABLES.get(name)
    if override_variable and os.environ.get(override_variable):
        return os.environ[override_variable]
    beside_python = Path(sys.executable).parent / name
    if beside_python.exists():
        return str(beside_python)
    on_path = shutil.which(name)
    if on_path is None:
        raise IreetuneError(
            f"'{name}' was not found; install iree-base-compiler==3.13.0 into this environment"
        )
    return on_path


def path_argument(path: Path | str) -> str:
    """Write a path for a command line so that no tool reads it as an option: absolute, it
    starts with `/`, never with `-` (an option) or `@` (LLVM's and argparse's response files).

    Every path put on a tool's command line (and every command printed for a user to run) goes
    through here; a path after `=` in a flag is safe as it is.
    """
    return str(Path(path).absolute())


def run_tool(arguments: list[str], timeout_s: float | None = None) -> ChildResult:
    """Run a tool (argument list, no shell) and capture its output; never raise on failure.

    The tool dies with the tuner, and a timeout kills it with everything it started.
    """
    try:
        return run_child(arguments, timeout_s=timeout_s)
    except OSError as error:
        # The tool could not be started at all (missing, not executable): like a shell's 127.
        return ChildResult(
            returncode=127,
            stdout="",
            stderr=f"error: cannot run {arguments[0]}: {error}",
            timed_out=False,
        )


def first_error_line(stderr: str) -> str:
    """Pick the most telling line of a compiler's stderr for a one-line reason."""
    for line in stderr.splitlines():
        if "error:" in line:
            return "error:" + line.split("error:", 1)[1][:300]
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"
