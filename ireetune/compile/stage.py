"""Compile every candidate of a run, then sort out what the binaries say.

A binary equal to the baseline's means the config was not applied; equal to an earlier
candidate's, a duplicate. Candidates restored from the database are compiled again only when
their binary is needed (they may lead the confirmation round or be verified).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ireetune.compile.driver import CompileRequest, CompileStatus
from ireetune.compile.pool import CompileBatch, CompileJob, CompileOutcome
from ireetune.core.candidate import earlier_binary
from ireetune.core.errors import IreetuneError
from ireetune.core.records import CandidateStatus
from ireetune.report.progress import StageProgress
from ireetune.report.recorder import RunRecorder

if TYPE_CHECKING:
    from ireetune.executor.base import Executor

_STATUS = {
    CompileStatus.COMPILED: CandidateStatus.COMPILED,
    CompileStatus.FAILED: CandidateStatus.COMPILE_FAILED,
    CompileStatus.TIMED_OUT: CandidateStatus.COMPILE_TIMED_OUT,
}


def compile_jobs_for(
    recorder: RunRecorder, requests: dict[int, CompileRequest]
) -> list[CompileJob]:
    """Return one compile job per candidate's request (its binary goes to
    `binaries/<id>.vmfb` of the run folder), in id order (the baseline first)."""
    run_dir = recorder.run_dir
    return [
        CompileJob(
            candidate_id, request, log_path=run_dir / "failures" / f"{candidate_id}_compile.log"
        )
        for candidate_id, request in sorted(requests.items())
    ]


def record_compile(recorder: RunRecorder, outcome: CompileOutcome, restored: set[int]) -> None:
    """Record one compile's outcome in the candidate's record (not saved yet)."""
    record = recorder.records[outcome.candidate_id]
    binary = (
        f"binaries/{outcome.candidate_id}.vmfb" if outcome.status is CompileStatus.COMPILED else ""
    )
    if outcome.candidate_id in restored:
        # Measured in an earlier run: this compile only provides the binary.
        recorder.records[outcome.candidate_id] = replace(
            record, binary_path=binary, binary_hash=outcome.binary_hash
        )
    else:
        recorder.update(
            replace(
                record,
                status=_STATUS[outcome.status],
                reason=outcome.reason,
                binary_path=binary,
                binary_hash=outcome.binary_hash,
                compile_seconds=outcome.seconds,
            )
        )


def compile_candidates(
    executor: Executor,
    recorder: RunRecorder,
    requests: dict[int, CompileRequest],
    restored: set[int],
    workers: int,
    timeout_s: float,
    progress: StageProgress,
) -> None:
    """Compile every candidate's request on `executor`; record each outcome."""
    jobs = compile_jobs_for(recorder, requests)
    with progress.stage("compiling", len(jobs)):
        for outcome in executor.compile(CompileBatch(jobs, workers, timeout_s)):
            record_compile(recorder, outcome, restored)
            progress.advance()
    recorder.save()


def classify_binary(recorder: RunRecorder, candidate_id: int, seen: dict[str, int]) -> bool:
    """Mark one compiled candidate not applied or a duplicate of one in `seen` (hash -> id);
    return whether its binary is new (and so worth measuring). `seen` holds the baseline's."""
    record = recorder.records[candidate_id]
    if record.status is not CandidateStatus.COMPILED:
        return False
    earlier = earlier_binary(record.binary_hash, candidate_id, seen)
    if earlier is None:
        return True
    if earlier == 0:
        status, reason = (
            CandidateStatus.NOT_APPLIED,
            "binary identical to the baseline: config not applied",
        )
    else:
        status, reason = CandidateStatus.DUPLICATE, f"binary identical to candidate {earlier}"
    recorder.update(replace(record, status=status, reason=reason))
    return False


def classify_binaries(recorder: RunRecorder, restored: set[int]) -> None:
    """Mark candidates whose binary equals the baseline's (not applied) or an earlier one's."""
    seen: dict[str, int] = {recorder.records[0].binary_hash: 0}
    for candidate_id in sorted(recorder.records):
        record = recorder.records[candidate_id]
        if candidate_id in restored and record.binary_hash:
            seen.setdefault(record.binary_hash, candidate_id)
            continue
        if candidate_id != 0:
            classify_binary(recorder, candidate_id, seen)
    recorder.save()


def compile_success_rate(recorder: RunRecorder) -> float:
    """Return the share of candidates that compiled; stop the run when none did."""
    attempts = [r for r in recorder.records.values() if not r.is_baseline]
    failed = (CandidateStatus.COMPILE_FAILED, CandidateStatus.COMPILE_TIMED_OUT)
    compiled: Sequence[object] = [r for r in attempts if r.status not in failed]
    rate = len(compiled) / len(attempts) if attempts else 0.0
    recorder.info["compile_success_rate"] = rate
    if not compiled:
        recorder.info["outcome"] = "failed"
        recorder.save()
        raise IreetuneError(
            f"no candidate compiled (0 of {len(attempts)}); see {recorder.run_dir}/failures"
        )
    return rate
