"""Decide a dispatch run: the one decide stage every dispatch flow ends with.

The in-process flow (a `DispatchRun`, flows/dispatch/tuner.py) and `ireetune continue` on a
measured folder (a run read back from its folder, flows/handoff/finish.py) both end with `decide_stage`: `decide` (the winner by
the rule, recorded with every verdict) and then `write_verdict` (the winner's proof and spec,
the run's record and its summary). Each run says how its winner's configuration is proven to
land and what its summary names (`DecidingRun`).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from ireetune.core.files import write_text_atomically
from ireetune.core.records import CandidateRecord
from ireetune.decision.rules import CandidateFacts, Decision, DecisionRule, pick_winner
from ireetune.problem.family import Problem
from ireetune.report.recorder import RunRecorder
from ireetune.report.replay import replay_command
from ireetune.report.result import TuneResult
from ireetune.report.summary import SummaryHeading, render_summary


@dataclass(frozen=True)
class RunOutline:
    """What a run's summary names besides its records."""

    problem: Problem
    target_name: str
    baseline_ms: float
    compile_success_rate: float


class DecidingRun(Protocol):
    """What the decide stage reads from a run and writes into it."""

    facts: dict[int, CandidateFacts]
    contenders: list[int]
    rule: DecisionRule
    notes: list[str]
    result: TuneResult | None

    @property
    def recorder(self) -> RunRecorder: ...

    def summarise(self) -> RunOutline:
        """Return what the summary names besides the records (after the verdicts are recorded;
        raise where the run cannot be decided)."""
        ...

    def prove_winner(self, best: CandidateRecord) -> None:
        """Prove the winner's configuration lands in its compiled dispatch; raise if not."""
        ...


def decide_stage(run: DecidingRun) -> None:
    """Pick the winner by the rule, write its spec, the run's record and its summary."""
    decision = decide(run.recorder, run.facts, run.contenders, run.rule)
    outline = run.summarise()
    run.result = write_verdict(run.recorder, decision, outline, run.prove_winner, run.notes)


def decide(
    recorder: RunRecorder,
    facts: Mapping[int, CandidateFacts],
    contenders: list[int],
    rule: DecisionRule,
) -> Decision:
    """Pick the winner among the contenders by the rule and record every verdict."""
    decision = pick_winner(list(facts.values()), contenders, rule)
    recorder.record_decision(decision, facts)
    return decision


def write_verdict(
    recorder: RunRecorder,
    decision: Decision,
    outline: RunOutline,
    prove_winner: Callable[[CandidateRecord], None],
    notes: list[str],
) -> TuneResult:
    """Write the verdict: the winner's spec as best_spec.mlir once `prove_winner` showed its
    configuration lands (it raises where it does not), results.json and summary.txt."""
    run_dir = recorder.run_dir
    best: CandidateRecord | None = None
    best_spec_path = None
    if decision.winner is None:
        why = why_no_winner(decision)
        recorder.info.update(outcome="no-improvement", spec_written=False, why=why)
        notes.append(f"no spec written: {why}")
    else:
        best = recorder.records[decision.winner]
        prove_winner(best)
        best_spec_path = run_dir / "best_spec.mlir"
        shutil.copyfile(run_dir / best.spec_path, best_spec_path)
        estimate = decision.winner_estimate
        assert estimate is not None
        replay = replay_command(run_dir, best.candidate_id)
        recorder.info.update(
            outcome="improved", best_candidate=best.candidate_id, best_speedup=estimate.speedup,
            best_speedup_low=estimate.low, best_speedup_high=estimate.high, spec_written=True,
            why=f"candidate {best.candidate_id} passed every check: {estimate.basis.value} speedup {estimate.describe()}",
            replay=replay,
        )  # fmt: skip
        recorder.info["decision"]["replay"] = replay
        notes.append(f"re-measure the winner against the default side by side: {replay}")
    recorder.info["baseline_ms"] = outline.baseline_ms
    recorder.info["notes"] = notes
    recorder.save()
    records = tuple(recorder.ordered())
    heading = SummaryHeading(
        outline.problem.signature, outline.target_name, outline.baseline_ms,
        outline.compile_success_rate,
    )  # fmt: skip
    summary = render_summary(heading, records, best, notes, decision)
    write_text_atomically(run_dir / "summary.txt", summary)
    return TuneResult(
        run_dir=run_dir, problem=outline.problem, records=records, baseline_ms=outline.baseline_ms,
        best=best, best_spec_path=best_spec_path, compile_success_rate=outline.compile_success_rate,
        notes=tuple(notes), decision=decision, summary=summary,
    )  # fmt: skip


def why_no_winner(decision: Decision) -> str:
    """Say why no candidate won: none was worth checking, or none passed every check."""
    if not decision.judgements:
        return (
            "no candidate's confirmed speedup interval lay above "
            f"{decision.rule.threshold:g}x, so none was worth checking"
        )
    reasons = sorted({j.reason for j in decision.judgements.values() if j.reason})
    return "no contender passed every check (" + "; ".join(reasons[:3]) + ")"
