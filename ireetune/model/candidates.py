"""Which of a tuned dispatch's candidates the model tries, in which order."""

from __future__ import annotations

from collections.abc import Sequence

from ireetune.core.records import CandidateRecord, CandidateStatus
from ireetune.report.ranking import RANKABLE, rank_candidates

# A candidate whose outputs were never compared at dispatch level (its reference program did
# not build, or ignores configs) is still tried in the model: the model-level trial compares the
# whole model's outputs with the default's. Outputs compared and different stay out.
MODEL_CANDIDATES = (*RANKABLE, CandidateStatus.UNVERIFIED)


def order_candidates(
    records: Sequence[CandidateRecord], best: CandidateRecord | None
) -> list[CandidateRecord]:
    """Order a dispatch's measured candidates that have a spec for the model: the dispatch
    run's verified winner (decided on real inputs where the target asks for it) first, the
    others in dispatch-level order."""
    ranked = [r for r in rank_candidates(list(records), MODEL_CANDIDATES) if r.spec_path]
    if best is None:
        return ranked
    return [best, *(r for r in ranked if r.candidate_id != best.candidate_id)]
