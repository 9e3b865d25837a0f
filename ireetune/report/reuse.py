"""What a run takes back from the database into its recorder: earlier measurements, and the facts
of a finished campaign (the database's own queries, a stored winner and stale results, are
`database/store.py`'s `find_reusable` and `stale_candidates`).

Earlier measurements of this run's candidates are restored (never measured twice); when the whole
campaign of an earlier session is stored, its facts are rebuilt from the rows, so a resumed run
reaches the verdict the interrupted one would have.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace

from ireetune.core.records import FINAL_STATUSES, TIMED_STATUSES, CandidateStatus, status_values
from ireetune.database.store import (
    StoredResult,
    config_key,
)
from ireetune.decision.rules import CandidateFacts
from ireetune.decision.stats import Basis, SpeedupEstimate, estimate_speedup
from ireetune.report.recorder import RunRecorder

logger = logging.getLogger(__name__)

_FINAL = status_values(FINAL_STATUSES)


def restore_candidates(recorder: RunRecorder, stored: Mapping[str, StoredResult]) -> set[int]:
    """Take finished candidates' results from the database; return their ids.

    Timings are kept; checks and verdicts are reached again in this run (they depend on the
    other candidates), so a stored `verified`, `unverified` or `wrong` comes back as `measured`.
    """
    restored: set[int] = set()
    for candidate_id, record in sorted(recorder.records.items()):
        if record.is_baseline:
            continue
        previous = stored.get(config_key(record.knobs))
        if previous is None or previous.status not in _FINAL or previous.origin != "local":
            continue
        status = CandidateStatus(previous.status)
        if status in TIMED_STATUSES:
            status = CandidateStatus.MEASURED
        recorder.records[candidate_id] = replace(
            record, status=status, reason=previous.reason if status is not CandidateStatus.MEASURED else "",
            device=recorder.info["devices"][0], times_ms=previous.times_ms,
            median_ms=previous.median_ms, min_ms=previous.min_ms, max_ms=previous.max_ms,
            spread=previous.spread, speedup=previous.speedup, confirmed=previous.confirmed,
            rounds_ms=previous.rounds_ms, basis=previous.basis,
        )  # fmt: skip
        recorder.restored_rows[candidate_id] = previous
        restored.add(candidate_id)
    if restored:
        recorder.info["restored_from_database"] = sorted(restored)
        logger.warning("resuming: %d candidate(s) already done in the database", len(restored))
    return restored


def facts_from_stored_campaign(
    recorder: RunRecorder, stored: Mapping[str, StoredResult], restored: set[int], basis: Basis
) -> dict[int, CandidateFacts] | None:
    """Rebuild every candidate's timing facts from an earlier session whose campaign finished.

    Return None unless every compiled candidate of this run was restored and the stored
    default's confirmation rounds belong to the same session as the confirmed candidates'.
    """
    baseline = stored.get(config_key(None))
    if baseline is None or not baseline.confirmed or not baseline.rounds_ms:
        return None
    pending = [
        r for r in recorder.records.values()
        if not r.is_baseline and r.status is CandidateStatus.COMPILED and r.candidate_id not in restored
    ]  # fmt: skip
    if pending:
        return None
    sessions = {
        stored[config_key(recorder.records[cid].knobs)].session
        for cid in restored
        if recorder.records[cid].confirmed
    }
    if sessions - {baseline.session}:
        return None
    facts: dict[int, CandidateFacts] = {}
    for candidate_id in restored:
        record = recorder.records[candidate_id]
        if record.status is not CandidateStatus.MEASURED or record.speedup is None:
            continue
        estimate: SpeedupEstimate | None
        if record.confirmed and record.rounds_ms:
            estimate = estimate_speedup(baseline.rounds_ms, record.rounds_ms, basis)
        else:
            median = record.median_ms or 0.0
            estimate = SpeedupEstimate(
                record.speedup,
                record.speedup,
                record.speedup,
                1,
                basis,
                median * record.speedup,
                median,
            )
        facts[candidate_id] = CandidateFacts(
            candidate_id, dispatch=estimate, stopped_early=record.stopped_early,
            confirmed=record.confirmed and bool(record.rounds_ms),
        )  # fmt: skip
    recorder.update(
        replace(
            recorder.records[0],
            status=CandidateStatus.MEASURED,
            device=recorder.info["devices"][0],
            times_ms=baseline.times_ms,
            median_ms=baseline.median_ms,
            min_ms=baseline.min_ms,
            max_ms=baseline.max_ms,
            spread=baseline.spread,
            speedup=1.0,
            confirmed=True,
            rounds_ms=baseline.rounds_ms,
        )  # fmt: skip
    )
    return facts
