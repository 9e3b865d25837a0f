"""The compiler driver: one typed request for every `iree-compile` and `iree-opt` run.

Every stage that compiles (candidates, reference programs, dispatch dumps, the search space's
constraints, spec checks, linking) states what it wants as a `CompileRequest`: the target's
flags, the phase flags, the spec and how the target applies it, IREE's default specs, the folders
the compiler dumps into, a timeout and where a crash reproducer goes. `run_compile` turns it into
one command line and one `CompileResult` with the status and the telling error line, so no stage
assembles arguments or reads stderr on its own, and an executor can ship a request to another
machine (the files it names are all in the request).

The binary embeds the source's path as given on the command line (seen with IREE 3.13: a matmul
compiled from a/m.mlir and from b/m.mlir differs), so binaries compare only between compiles of
one path. The command line names the source and the output by their absolute paths
(`tools.path_argument`: a file named `@m.mlir` or `-m.mlir` is never read as a response file or
an option), and the command a report prints is that command line, so it builds the very same
bytes.
"""

from __future__ import annotations

import enum
import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, Unpack

from ireetune.core.tools import (
    SPEC_SAFETY_FLAGS,
    find_tool,
    first_error_line,
    path_argument,
    run_tool,
)

if TYPE_CHECKING:
    from ireetune.core.target import Target

DEFAULT_SPECS_FLAG = "--iree-codegen-enable-default-tuning-specs"
DUMP_BENCHMARKS_FLAG = "--iree-hal-dump-executable-benchmarks-to"
DUMP_CONFIGURATIONS_FLAG = "--iree-hal-dump-executable-configurations-to"
DUMP_SPECS_FLAG = "--iree-codegen-dump-tuning-specs-to"
DUMP_SOURCES_FLAG = "--iree-hal-dump-executable-sources-to"
TUNER_ATTRIBUTES_FLAG = "--iree-codegen-add-tuner-attributes"
REPRODUCER_FLAG = "--mlir-pass-pipeline-crash-reproducer"
# A failed compile keeps its crash reproducer up to this size. A dispatch's is a few KiB; a whole
# model's holds its weights (VGG-19's is over 1 GiB), and the flag phase, the profile and the
# selection compile whole models whose failures are expected: a failed flag set would leave a
# copy of the model each. The log keeps the command that writes it again.
MAX_REPRODUCER_BYTES = 16 * 2**20
# Stop once every executable is configured: the configuration and source dumps are complete by
# then, and the code generation (most of a compile) is skipped.
CONFIGURED_PHASE = "--compile-to=executable-configurations"


class CompilerTool(enum.Enum):
    """The IREE tool a request runs."""

    COMPILE = "iree-compile"
    OPT = "iree-opt"


class CompileStatus(enum.Enum):
    COMPILED = "compiled"
    FAILED = "compile-failed"
    TIMED_OUT = "compile-timed-out"


@dataclass(frozen=True)
class CompileRequest:
    """One compile: what goes in, what comes out, and how the target is selected.

    `target_flags` select the target (and carry its global flags); `phase_flags` say which part
    of the pipeline runs (`--compile-from=executable-sources`, `--compile-to=stream`, a pass
    pipeline) and any other option; `dumps` are (flag, folder) pairs the compiler writes into.
    """

    source_path: Path
    output_path: Path
    target_flags: tuple[str, ...] = ()
    phase_flags: tuple[str, ...] = ()
    spec_flag: str = ""
    spec_path: Path | None = None
    default_specs: bool = False
    dumps: tuple[tuple[str, Path], ...] = ()
    timeout_s: float | None = None
    reproducer_path: Path | None = None
    tool: CompilerTool = CompilerTool.COMPILE

    def __post_init__(self) -> None:
        assert self.spec_path is None or self.spec_flag, "a spec needs the flag that applies it"


@dataclass(frozen=True)
class CompileResult:
    """What one compile gave: its status, the one-line reason of a failure (the first error, the
    signal of a crash, the timeout), the whole stderr, and the reproducer when one was kept."""

    status: CompileStatus
    error_line: str
    stderr: str
    returncode: int
    seconds: float
    arguments: tuple[str, ...]
    reproducer_path: Path | None = None

    @property
    def ok(self) -> bool:
        return self.status is CompileStatus.COMPILED

    @property
    def crashed(self) -> bool:
        """Say whether the compiler died of a signal or an internal error (not a clean error)."""
        return self.returncode < 0 or "Stack dump:" in self.stderr


class RequestOptions(TypedDict, total=False):
    """What a request asks beyond its source, its output and its target: the `CompileRequest`
    fields a stage chooses (the target's own flags and spec flag come from the target)."""

    phase_flags: tuple[str, ...]
    spec_path: Path | None
    default_specs: bool
    dumps: tuple[tuple[str, Path], ...]
    timeout_s: float | None
    reproducer_path: Path | None


def build_request(
    target: Target, source_path: Path, output_path: Path, **options: Unpack[RequestOptions]
) -> CompileRequest:
    """Return the request that compiles `source_path` for `target` (its flags and spec flag)."""
    return CompileRequest(
        source_path=source_path,
        output_path=output_path,
        target_flags=tuple(target.compile_flags()),
        spec_flag=target.traits.spec_flag,
        **options,
    )


def binary_inputs(request: CompileRequest) -> tuple[object, ...]:
    """Return what decides a request's binary: the tool, the source's path, the flags, the
    spec's text and the dumps; not where the compile writes (the output, a reproducer). A dump
    counts: dumping the configurations makes the binary embed the dumped files' paths as its
    executables' source locations, and such a SqueezeNet ran 2-5% slower than the same flags
    and spec compiled without it, in every one of five interleaved sessions (IREE 3.13,
    2026-12-04, docs/benchmarks.md). A dumped build never stands in for a plain one."""
    spec = request.spec_path.read_bytes() if request.spec_path is not None else b""
    return (
        request.tool, request.source_path, request.target_flags, request.phase_flags,
        request.spec_flag, hashlib.sha256(spec).hexdigest(), request.default_specs,
        request.dumps,
    )  # fmt: skip


def build_arguments(request: CompileRequest, tool_path: str) -> list[str]:
    """Return the command line of a request."""
    arguments = [
        tool_path, path_argument(request.source_path), *request.target_flags, *request.phase_flags
    ]  # fmt: skip
    if request.spec_path is not None:
        arguments.append(f"{request.spec_flag}={request.spec_path}")
    if request.default_specs:
        arguments.append(DEFAULT_SPECS_FLAG)
    if request.spec_path is not None or request.default_specs:
        arguments.extend(SPEC_SAFETY_FLAGS)
    arguments.extend(f"{flag}={folder}" for flag, folder in request.dumps)
    if request.reproducer_path is not None:
        arguments.append(f"{REPRODUCER_FLAG}={request.reproducer_path}")
    arguments.extend(["-o", path_argument(request.output_path)])
    return arguments


def run_compile(request: CompileRequest) -> CompileResult:
    """Run one request; never raise for the compiler's failure (the result says it).

    A failed or timed-out compile leaves no output file behind; a successful one leaves no
    reproducer.
    """
    arguments = build_arguments(request, find_tool(request.tool.value))
    start = time.perf_counter()
    result = run_tool(arguments, timeout_s=request.timeout_s)
    seconds = time.perf_counter() - start
    reproducer = request.reproducer_path
    kept = reproducer if reproducer is not None and reproducer.exists() else None
    if result.timed_out or result.returncode != 0 or not request.output_path.exists():
        request.output_path.unlink(missing_ok=True)
        stderr = result.stderr
        size = kept.stat().st_size if kept is not None else 0
        if kept is not None and size > MAX_REPRODUCER_BYTES:
            size_mib = size / 2**20
            kept.unlink()
            kept = None
            stderr += (
                f"\nireetune: the crash reproducer ({size_mib:.0f} MiB) was not kept (over "
                f"{MAX_REPRODUCER_BYTES // 2**20} MiB); the command above writes it again\n"
            )
        if result.timed_out:
            assert request.timeout_s is not None
            status, reason = CompileStatus.TIMED_OUT, f"timed out after {request.timeout_s:.0f} s"
        else:
            status, reason = CompileStatus.FAILED, first_error_line(result.stderr)
            if result.returncode < 0:
                reason = f"compiler crashed (signal {-result.returncode}): {reason}"
        return CompileResult(
            status, reason, stderr, result.returncode, seconds, tuple(arguments), kept
        )
    if reproducer is not None:
        reproducer.unlink(missing_ok=True)
    return CompileResult(
        CompileStatus.COMPILED, "", result.stderr, result.returncode, seconds, tuple(arguments)
    )
