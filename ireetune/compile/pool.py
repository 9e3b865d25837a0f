"""Compile candidates in parallel and classify every outcome.

Each compile is its own `iree-compile` process (so a compiler crash takes down nothing else),
started from a thread of a small pool. Binaries are hashed: a candidate whose binary equals the
baseline's did not change the code, and one equal to an earlier candidate's is a duplicate.
"""

from __future__ import annotations

import enum
import hashlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from ireetune.child_process import stop_all_children
from ireetune.tools import find_tool, first_error_line, run_tool

_WAKE_UP_S = 0.2


class CompileStatus(enum.Enum):
    COMPILED = "compiled"
    FAILED = "compile-failed"
    TIMED_OUT = "compile-timed-out"


@dataclass(frozen=True)
class CompileJob:
    """One candidate to compile: the same source and flags for all, its own spec and output."""

    candidate_id: int
    source_path: Path
    output_path: Path
    flags: tuple[str, ...]
    log_path: Path
    reproducer_path: Path


@dataclass(frozen=True)
class CompileOutcome:
    candidate_id: int
    status: CompileStatus
    reason: str
    binary_hash: str
    seconds: float


def default_jobs() -> int:
    """Return how many compiles run at once by default: the cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # Not on Linux.
        return os.cpu_count() or 1


def hash_binary(path: Path) -> str:
    """Return the SHA-256 of a compiled binary."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def compile_one(job: CompileJob, timeout_s: float) -> CompileOutcome:
    """Run iree-compile for one job; keep its log and crash reproducer only when it fails."""
    arguments = [
        find_tool("iree-compile"),
        str(job.source_path),
        *job.flags,
        f"--mlir-pass-pipeline-crash-reproducer={job.reproducer_path}",
        "-o",
        str(job.output_path),
    ]
    start = time.perf_counter()
    result = run_tool(arguments, timeout_s=timeout_s)
    seconds = time.perf_counter() - start
    if result.timed_out:
        job.log_path.write_text(f"timed out after {timeout_s:.0f} s\n{result.stderr}")
        job.output_path.unlink(missing_ok=True)
        return CompileOutcome(
            job.candidate_id,
            CompileStatus.TIMED_OUT,
            f"timed out after {timeout_s:.0f} s",
            "",
            seconds,
        )
    if result.returncode != 0 or not job.output_path.exists():
        job.log_path.write_text(" ".join(arguments) + "\n" + result.stderr)
        job.output_path.unlink(missing_ok=True)
        reason = first_error_line(result.stderr)
        if result.returncode < 0:
            reason = f"compiler crashed (signal {-result.returncode}): {reason}"
        return CompileOutcome(job.candidate_id, CompileStatus.FAILED, reason, "", seconds)
    job.reproducer_path.unlink(missing_ok=True)
    return CompileOutcome(
        job.candidate_id, CompileStatus.COMPILED, "", hash_binary(job.output_path), seconds
    )


def compile_all(
    jobs: Sequence[CompileJob],
    workers: int,
    timeout_s: float,
    on_done: Callable[[CompileOutcome], None] | None = None,
) -> Iterator[CompileOutcome]:
    """Compile jobs on `workers` threads; yield outcomes as they finish (in completion order)."""
    with ThreadPoolExecutor(max_workers=max(1, workers)) as executor:
        futures = [executor.submit(compile_one, job, timeout_s) for job in jobs]
        pending = set(futures)
        try:
            while pending:
                # Wake up now and then: Ctrl-C may be delivered to a compile thread, and the
                # main thread notices it only when it runs.
                done, pending = wait(pending, timeout=_WAKE_UP_S, return_when=FIRST_COMPLETED)
                for future in done:
                    outcome = future.result()
                    if on_done is not None:
                        on_done(outcome)
                    yield outcome
        except KeyboardInterrupt:
            # Leaving the block waits for the running compiles: end them (and queue no more).
            for future in futures:
                future.cancel()
            stop_all_children()
            raise


def compile_success_rate(outcomes: Sequence[CompileOutcome]) -> float:
    """Return compiled / attempted (0.0 when nothing was attempted)."""
    if not outcomes:
        return 0.0
    compiled = sum(1 for o in outcomes if o.status is CompileStatus.COMPILED)
    return compiled / len(outcomes)
