"""Which of a tuned dispatch's candidates the model flow tries (model/candidates.py)."""

from __future__ import annotations

from ireetune.core.candidate import make_knobs
from ireetune.core.records import CandidateRecord, CandidateStatus
from ireetune.model.candidates import order_candidates


def _record(candidate_id: int, status: CandidateStatus, speedup: float) -> CandidateRecord:
    return CandidateRecord(
        candidate_id, make_knobs({"vec_m": candidate_id}), status, spec_path=f"{candidate_id}.mlir",
        median_ms=1.0 / speedup, speedup=speedup,
    )  # fmt: skip


def test_the_model_tries_unverified_candidates_but_never_wrong_ones() -> None:
    # Outputs never compared at dispatch level (the reference program did not build, or ignores
    # configs) are compared in the model; outputs compared and different are not tried.
    records = [
        CandidateRecord(0, None, CandidateStatus.MEASURED, median_ms=1.0, speedup=1.0),
        _record(1, CandidateStatus.MEASURED, 1.1),
        _record(2, CandidateStatus.UNVERIFIED, 1.3),
        _record(3, CandidateStatus.WRONG, 2.0),
        _record(4, CandidateStatus.VERIFIED, 1.2),
        _record(5, CandidateStatus.COMPILE_FAILED, 3.0),
    ]
    assert [r.candidate_id for r in order_candidates(records, None)] == [2, 4, 1]
    assert [r.candidate_id for r in order_candidates(records, records[4])] == [4, 2, 1]
