"""Compile candidates in parallel and classify every outcome.

Each compile is its own `iree-compile` process (so a compiler crash takes down nothing else),
started from a thread of a small pool. Binaries are hashed: a candidate whose binary equals the
baseline's did not change the code, and one equal to an earlier candidate's is a duplicate.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path

from ireetune.compile.driver import CompileRequest, CompileResult, CompileStatus, run_compile
from ireetune.core.child_process import stop_all_children

_WAKE_UP_S = 0.2


@dataclass(frozen=True)
class CompileJob:
    """One candidate to compile: its request, and where the log of a failure goes."""

    candidate_id: int
    request: CompileRequest
    log_path: Path


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


def record_outcome(job: CompileJob, result: CompileResult) -> CompileOutcome:
    """Turn a compile's result into the job's outcome; keep the log of a failure."""
    if result.status is CompileStatus.TIMED_OUT:
        job.log_path.write_text(f"{result.error_line}\n{result.stderr}")
        return CompileOutcome(
            job.candidate_id, result.status, result.error_line, "", result.seconds
        )
    if result.status is CompileStatus.FAILED:
        job.log_path.write_text(" ".join(result.arguments) + "\n" + result.stderr)
        return CompileOutcome(
            job.candidate_id, result.status, result.error_line, "", result.seconds
        )
    return CompileOutcome(
        job.candidate_id,
        CompileStatus.COMPILED,
        "",
        hash_binary(job.request.output_path),
        result.seconds,
    )


def compile_one(job: CompileJob, timeout_s: float) -> CompileOutcome:
    """Run iree-compile for one job; keep its log and crash reproducer only when it fails."""
    return record_outcome(job, run_compile(replace(job.request, timeout_s=timeout_s)))


@dataclass(frozen=True)
class CompileBatch:
    """Compile jobs for an executor (`Executor.compile`): each job its own compiler process,
    stopped after `timeout_s`; `workers` bounds the local executor's threads."""

    jobs: Sequence[CompileJob]
    workers: int
    timeout_s: float


def compile_on_threads(batch: CompileBatch) -> Iterator[CompileOutcome]:
    """Compile a batch on this host's threads; yield outcomes as they finish (in completion
    order)."""
    with ThreadPoolExecutor(max_workers=max(1, batch.workers)) as executor:
        futures = [executor.submit(compile_one, job, batch.timeout_s) for job in batch.jobs]
        pending = set(futures)
        try:
            while pending:
                # Wake up now and then: Ctrl-C may be delivered to a compile thread, and the
                # main thread notices it only when it runs.
                done, pending = wait(pending, timeout=_WAKE_UP_S, return_when=FIRST_COMPLETED)
                for future in done:
                    yield future.result()
        except KeyboardInterrupt:
            # Leaving the block waits for the running compiles: end them (and queue no more).
            for future in futures:
                future.cancel()
            stop_all_children()
            raise
