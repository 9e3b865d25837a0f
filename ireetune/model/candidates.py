"""Which of a tuned dispatch's candidates the model tries, in which order."""

from __future__ import annotations

from collections.abc import Sequence

from ireetune.core.records import CandidateRecord
from ireetune.report.ranking import rank_candidates


def order_candidates(
    records: Sequence[CandidateRecord], best: CandidateRecord | None
) -> list[CandidateRecord]:
    """Order a dispatch's measured candidates that have a spec for the model: the dispatch
    run's verified winner (decided on real inputs where the target asks for it) first, the
    others in dispatch-level order."""
    ranked = [r for r in rank_candidates(list(records)) if r.spec_path]
    if best is None:
        return ranked
    return [best, *(r for r in ranked if r.candidate_id != best.candidate_id)]
