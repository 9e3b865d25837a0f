"""The in-process model flow's dispatch phase (flows/model/local.py): what it records of a
tuned dispatch's session for the report."""

from __future__ import annotations

from pathlib import Path

from ireetune.core.records import CandidateRecord, CandidateStatus
from ireetune.flows.model.local import session_times
from ireetune.model.kin import Extended


def _record(candidate_id: int, median_ms: float, *, stopped_early: bool = False) -> CandidateRecord:
    return CandidateRecord(
        candidate_id, None, CandidateStatus.MEASURED, spec_path=f"{candidate_id}_spec.mlir",
        times_ms=(median_ms,), median_ms=median_ms, stopped_early=stopped_early,
    )  # fmt: skip


def test_a_candidate_stopped_early_has_no_time_alone_in_the_report() -> None:
    # ZFNet-512's kept candidate read 6.1 ms in the one call before it was stopped early, and
    # the report showed that call as its time alone.
    kept = [_record(3, 0.8), _record(1, 6.1087, stopped_early=True)]
    extended = Extended(
        specs=[Path("run/3_spec.mlir"), Path("run/1_spec.mlir"), Path("kin/3_on_kin.mlir")],
        sources=[0, 1, 0],
    )
    times = session_times(extended, kept, 1.0)
    assert times == {Path("run/3_spec.mlir"): (1.0, 0.8), Path("kin/3_on_kin.mlir"): (1.0, 0.8)}


def test_no_session_times_without_the_default_s_time() -> None:
    extended = Extended(specs=[Path("run/3_spec.mlir")], sources=[0])
    assert session_times(extended, [_record(3, 0.8)], float("nan")) == {}
