"""One writer for a dispatch tuning run's files, and the hook for what records elsewhere.

Every change to a candidate goes through `RunRecorder.update`, which keeps the record and hands
it to the callbacks the flow registered (`on_update`: the database's, see
flows/dispatch/recording.py) and, on `save`, rewrites results.json and candidates.csv atomically.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ireetune.core.files import write_text_atomically
from ireetune.core.records import CandidateRecord, CandidateStatus, render_csv, write_results
from ireetune.database.store import StoredResult
from ireetune.decision.rules import CandidateFacts, Decision, Verdict
from ireetune.decision.stats import SpeedupEstimate


@dataclass
class RunRecorder:
    """The records of one run by candidate id, and where they are written."""

    run_dir: Path
    info: dict[str, Any]
    records: dict[int, CandidateRecord] = field(default_factory=dict)
    compilation_infos: dict[int, str] = field(default_factory=dict)
    baseline_ms_by_device: dict[str, float] = field(default_factory=dict)
    # Rows restored from the database: their timings and session stay as measured; only the
    # checks and the verdict this run reaches are written back.
    restored_rows: dict[int, StoredResult] = field(default_factory=dict)
    # Called with every record kept, at once: the flow registers what records elsewhere (the
    # database, flows/dispatch/recording.py), so a crash loses nothing already learned.
    on_update: list[Callable[[CandidateRecord], None]] = field(default_factory=list)

    def update(self, record: CandidateRecord) -> None:
        """Keep a record and hand it to every callback the flow registered (the database)."""
        self.records[record.candidate_id] = record
        for on_update in self.on_update:
            on_update(record)

    def ordered(self) -> list[CandidateRecord]:
        return sorted(self.records.values(), key=lambda r: r.candidate_id)

    def save(self) -> None:
        """Rewrite results.json and candidates.csv."""
        ordered = self.ordered()
        write_results(self.run_dir / "results.json", self.info, ordered)
        write_text_atomically(self.run_dir / "candidates.csv", render_csv(ordered))

    def record_facts(self, facts: Mapping[int, CandidateFacts]) -> None:
        """Copy the timing facts (speedup, interval, basis) into the candidates' records."""
        for candidate_id, fact in facts.items():
            record = self.records.get(candidate_id)
            if record is None or fact.dispatch is None:
                continue
            self.update(
                replace(
                    record,
                    speedup=fact.dispatch.speedup,
                    speedup_low=fact.dispatch.low,
                    speedup_high=fact.dispatch.high,
                    basis=fact.dispatch.basis.value,
                    confirmed=fact.confirmed,
                )
            )

    def record_decision(self, decision: Decision, facts: Mapping[int, CandidateFacts]) -> None:
        """Write every contender's checks and verdict; only passing every check is `verified`,
        outputs compared and different are `wrong`, outputs never compared `unverified`."""
        self.info["decision"] = describe_decision(decision)
        for candidate_id, judgement in decision.judgements.items():
            record = self.records[candidate_id]
            fact = facts.get(candidate_id, CandidateFacts(candidate_id))
            real = fact.real_input
            status = record.status
            reason = record.reason
            if judgement.verdict in (Verdict.WINNER, Verdict.BEATEN):
                status = CandidateStatus.VERIFIED
                reason = (
                    ""
                    if judgement.verdict is Verdict.WINNER
                    else "passed every check; slower than the winner"
                )
            elif fact.outputs_match is False:
                status = CandidateStatus.WRONG
                reason = judgement.reason
            elif fact.outputs_match is None:
                # A contender is judged on its outputs first: refused for want of a comparison.
                status = CandidateStatus.UNVERIFIED
                reason = judgement.reason
            else:
                status = CandidateStatus.MEASURED
                reason = f"not accepted: {judgement.reason}"
            self.update(
                replace(
                    record,
                    status=status,
                    reason=reason,
                    outputs_match=fact.outputs_match,
                    real_input_speedup=real.speedup if real else None,
                    real_input_low=real.low if real else None,
                    real_input_high=real.high if real else None,
                    verdict=judgement.verdict.value,
                )
            )


def describe_decision(decision: Decision) -> dict[str, Any]:
    """Return the JSON form of a decision for results.json."""
    estimate = decision.winner_estimate
    return {
        "rule": decision.rule.name,
        "threshold": decision.rule.threshold,
        "confidence": decision.rule.confidence,
        "winner": decision.winner,
        **(_estimate_json(estimate) if estimate is not None else {}),
        "judgements": {
            str(cid): {"verdict": j.verdict.value, "reason": j.reason}
            for cid, j in sorted(decision.judgements.items())
        },
    }


def _estimate_json(estimate: SpeedupEstimate) -> dict[str, Any]:
    return {
        "speedup": estimate.speedup,
        "low": estimate.low,
        "high": estimate.high,
        "basis": estimate.basis.value,
        "rounds": estimate.rounds,
        "baseline_ms": estimate.baseline_ms,
        "candidate_ms": estimate.candidate_ms,
    }
