"""Rank measured candidates against the baseline."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from ireetune.core.records import CandidateRecord, CandidateStatus

RANKABLE = (CandidateStatus.MEASURED, CandidateStatus.VERIFIED)


def rank_candidates(
    records: Sequence[CandidateRecord], statuses: Collection[CandidateStatus] = RANKABLE
) -> list[CandidateRecord]:
    """Return measured non-baseline candidates (of `statuses`), fastest (highest speedup) first.

    Speedups are relative to the baseline on the candidate's own device, so candidates measured
    on different devices compare fairly. Candidates stopped early are still ranked by what was
    measured; ties keep candidate-id order.
    """
    measured = [
        r for r in records if not r.is_baseline and r.status in statuses and r.speedup is not None
    ]
    return sorted(measured, key=lambda r: (-(r.speedup or 0.0), r.candidate_id))
