"""What a dispatch run records beyond its folder, as callbacks the flow registers.

The stages only change the run; what is written elsewhere hangs off them (as TVM MetaSchedule's
measure callbacks add to its database and update its cost model after every batch):

- `DatabaseRecording`, registered on the run's recorder, writes every record past generation
  to the tuning database the moment it is kept, so a killed run loses nothing already measured;
- `learn_from_round`, a stage callback, hands every measurement so far to the run's rounds after
  each early round (flows/dispatch/stages.py `measure_round_stage`): an online search's learned
  model is updated, a time budget's parts find the leader they climb from (search/climb.py).

A run with neither writes no database row and keeps its model as trained offline.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ireetune.core.candidate import Knobs
from ireetune.core.records import (
    DECISION_CHECKS,
    CandidateRecord,
    CandidateStatus,
    check_values,
)
from ireetune.database.store import ResultKey, StoredResult, TuningDatabase, config_key, now_utc
from ireetune.flows.dispatch.state import DispatchRun
from ireetune.report.recorder import RunRecorder


@dataclass(frozen=True)
class DatabaseRecording:
    """Write each record of a run to the tuning database under the run's key and session."""

    database: TuningDatabase
    result_key: ResultKey
    recorder: RunRecorder
    session: str
    rule: str

    def __call__(self, record: CandidateRecord) -> None:
        if record.status is CandidateStatus.GENERATED:
            return
        rule = self.rule if record.verdict else ""
        previous = self.recorder.restored_rows.get(record.candidate_id)
        if previous is not None:
            # A restored row keeps its timings and session; only this run's checks change.
            self.database.write(
                replace(
                    previous,
                    status=record.status.value if record.verdict else previous.status,
                    reason=record.reason if record.verdict else previous.reason,
                    rule=rule,
                    written_at=now_utc(),
                    **check_values(record, DECISION_CHECKS),
                )
            )
            return
        self.database.write(
            StoredResult(
                key=self.result_key,
                config=config_key(None if record.is_baseline else record.knobs),
                compilation_info=self.recorder.compilation_infos.get(record.candidate_id, ""),
                status=record.status.value, reason=record.reason, times_ms=record.times_ms,
                median_ms=record.median_ms, min_ms=record.min_ms, max_ms=record.max_ms,
                spread=record.spread,
                baseline_ms=self.recorder.baseline_ms_by_device.get(record.device),
                speedup=record.speedup, session=self.session, written_at=now_utc(), rule=rule,
                **check_values(record),
            )
        )  # fmt: skip


def learn_from_round(run: DispatchRun, stage: str) -> None:
    """After an early round, hand the run's rounds every measurement so far."""
    if run.search is not None and stage == "measure_round_stage":
        run.search.learn(round_measurements(run.recorder))


def round_measurements(recorder: RunRecorder) -> list[tuple[Knobs, float | None]]:
    """Every tried candidate's time relative to its round's default (1/speedup), None if it
    failed; a config that did not apply runs as the default. Duplicates teach nothing new."""
    found: list[tuple[Knobs, float | None]] = []
    for record in recorder.ordered():
        if record.is_baseline or record.knobs is None:
            continue
        if record.status is CandidateStatus.MEASURED and record.speedup:
            found.append((record.knobs, 1.0 / record.speedup))
        elif record.status is CandidateStatus.NOT_APPLIED:
            found.append((record.knobs, 1.0))
        elif record.status not in (CandidateStatus.DUPLICATE, CandidateStatus.GENERATED, CandidateStatus.COMPILED):  # fmt: skip
            found.append((record.knobs, None))
    return found
