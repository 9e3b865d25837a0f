"""Re-measure a run's winner against the default, side by side, with the rule's statistics.

`ireetune replay RUN_DIR` times the default and the winner (or `--candidate N`) interleaved in
rounds on the signal that decided the run (real inputs or the dispatch benchmark) and prints the
paired speedup with its confidence interval: the run continued at its replay stage
(commands/replay.py). Runtime only: no compiler is imported.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from ireetune.benchmark.runner import BenchmarkJob, BenchmarkSession, BenchmarkStatus
from ireetune.core.errors import IreetuneError
from ireetune.core.input_files import check_input_folder
from ireetune.core.records import CandidateStatus
from ireetune.core.run_dir import is_inside_folder
from ireetune.database.run_files import DecisionFile, DispatchRunFile, read_model_file
from ireetune.decision.stats import Basis, SpeedupEstimate, estimate_speedup


def replay_command(run_dir: Path, candidate_id: int) -> str:
    """Return the one-line command that re-measures `candidate_id` against the default."""
    return f"ireetune replay {shlex.quote(str(run_dir))} --candidate {candidate_id}"


# Where a candidate ended without a binary of its own to time.
UNBUILT = frozenset(
    {
        CandidateStatus.GENERATED,
        CandidateStatus.COMPILE_FAILED,
        CandidateStatus.COMPILE_TIMED_OUT,
        CandidateStatus.NOT_APPLIED,
        CandidateStatus.DUPLICATE,
    }
)


def describe_ids(ids: list[int]) -> str:
    """Write sorted ids as runs: `1-8, 10, 12-13` (`none` when there are none)."""
    runs: list[list[int]] = []
    for candidate_id in ids:
        if runs and candidate_id == runs[-1][1] + 1:
            runs[-1][1] = candidate_id
        else:
            runs.append([candidate_id, candidate_id])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) or "none"


def _jobs(run_dir: Path, candidate_id: int, basis: Basis, searched: Basis) -> list[BenchmarkJob]:
    inputs = run_dir / "verify" / "inputs.npz"
    if basis is Basis.REAL_INPUT and searched is Basis.REAL_INPUT:
        return [
            BenchmarkJob(cid, run_dir / "binaries" / f"{cid}.vmfb", inputs, "main")
            for cid in (0, candidate_id)
        ]
    if basis is Basis.REAL_INPUT:
        return [
            BenchmarkJob(cid, run_dir / "verify" / f"reference_{cid}.vmfb", inputs, "main")
            for cid in (0, candidate_id)
        ]
    return [BenchmarkJob(cid, run_dir / "binaries" / f"{cid}.vmfb") for cid in (0, candidate_id)]


@dataclass
class ReplayRun:
    """A finished run read back to re-measure one candidate against the default."""

    run_dir: Path
    candidate_id: int
    basis: Basis
    jobs: list[BenchmarkJob]
    device: str
    rounds: int = 7
    repetitions: int = 5
    estimate: SpeedupEstimate | None = None


def load_replay_run(run_dir: Path, candidate_id: int | None, device: str | None) -> ReplayRun:
    """Read a run's record; choose the candidate (the winner unless named), its binaries and
    the signal that decided the run; refuse binaries missing or outside the folder."""
    check_input_folder(run_dir, "run folder")
    results_path = run_dir / "results.json"
    if not results_path.is_file():
        raise IreetuneError(f"{run_dir} is not a run folder (no results.json)")
    info = read_model_file(results_path, DispatchRunFile, run_dir)
    decision = info.decision or DecisionFile()
    chosen = candidate_id if candidate_id is not None else decision.winner
    if chosen is None or chosen < 1:
        raise IreetuneError(f"{run_dir} has no winner; name a candidate with --candidate N")
    records = {record.candidate_id: record for record in info.candidates if record.candidate_id}
    if chosen not in records:
        raise IreetuneError(
            f"candidate {chosen} is not in the run {run_dir}: its candidates are "
            f"{describe_ids(sorted(records))}"
        )
    searched = info.timing_basis or Basis.DISPATCH
    basis = decision.basis or searched
    jobs = _jobs(run_dir, chosen, basis, searched)
    for job in jobs:
        # The binaries are run: refuse any that a link leads to from outside the folder.
        if not is_inside_folder(run_dir, str(job.vmfb_path.relative_to(run_dir))):
            raise IreetuneError(f"{job.vmfb_path} leads outside the run folder {run_dir}")
        record = records.get(job.candidate_id)
        if not job.vmfb_path.is_file() and record is not None and record.status in UNBUILT:
            reason = f" ({record.reason})" if record.reason else ""
            raise IreetuneError(
                f"candidate {chosen} of {run_dir} has no binary to time: it ended "
                f"{record.status.value}{reason}"
            )
        if not job.vmfb_path.is_file():
            raise IreetuneError(f"missing binary {job.vmfb_path}; the run folder is incomplete")
    chosen_device = device or (info.devices or ("local-task",))[0]
    return ReplayRun(run_dir, chosen, basis, jobs, chosen_device)


def replay_stage(run: ReplayRun) -> None:
    """Time the default and the candidate in interleaved rounds on this host; keep the estimate."""
    from ireetune.executor.base import LocalExecutor

    timed: dict[int, list[tuple[float, ...]]] = {0: [], run.candidate_id: []}
    session = BenchmarkSession(run.jobs * run.rounds, run.device, run.repetitions, 0, 600.0)
    for outcome in LocalExecutor().run_benchmarks(session):
        if outcome.status is not BenchmarkStatus.MEASURED:
            raise IreetuneError(f"candidate {outcome.candidate_id} failed to run: {outcome.reason}")
        timed[outcome.candidate_id].append(outcome.times_ms)
    run.estimate = estimate_speedup(tuple(timed[0]), tuple(timed[run.candidate_id]), run.basis)
    assert run.estimate is not None
