"""Turn what the benchmark campaign and the checks measured into each candidate's facts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from ireetune.benchmark.campaign import CampaignResult
from ireetune.benchmark.runner import BenchmarkStatus
from ireetune.decision.rules import CandidateFacts
from ireetune.decision.stats import Basis, SpeedupEstimate, estimate_speedup


def facts_from_campaign(result: CampaignResult, basis: Basis) -> dict[int, CandidateFacts]:
    """Return the timing facts of every measured candidate, against its own device's baseline.

    A confirmed candidate's speedup pairs its confirmation rounds with the baseline's rounds on
    the same device; an unconfirmed one has the first pass only (its one "round" against the
    baseline timings on either side of it), which can pre-select but never decide.
    """
    facts: dict[int, CandidateFacts] = {}
    for measurement in result.candidates.values():
        if measurement.status is not BenchmarkStatus.MEASURED or not measurement.times_ms:
            continue
        baseline = result.baselines.get(measurement.device)
        if baseline is None or baseline.error:
            continue
        estimate: SpeedupEstimate | None
        if measurement.confirmed and measurement.rounds_ms and baseline.confirmed_rounds_ms:
            estimate = estimate_speedup(baseline.confirmed_rounds_ms, measurement.rounds_ms, basis)
        else:
            reference = measurement.reference_ms or baseline.before_ms + baseline.after_ms
            estimate = estimate_speedup((reference,), (measurement.times_ms,), basis)
        facts[measurement.candidate_id] = CandidateFacts(
            measurement.candidate_id,
            dispatch=estimate,
            stopped_early=measurement.stopped_early,
            confirmed=measurement.confirmed and bool(measurement.rounds_ms),
        )
    return facts


def with_outputs(
    facts: Mapping[int, CandidateFacts], outputs: Mapping[int, tuple[bool | None, str]]
) -> dict[int, CandidateFacts]:
    """Add the output checks: candidate id -> (outputs equal the default's, why not); None
    where they could not be compared."""
    updated = dict(facts)
    for candidate_id, (match, reason) in outputs.items():
        current = updated.get(candidate_id, CandidateFacts(candidate_id))
        updated[candidate_id] = replace(current, outputs_match=match, output_reason=reason)
    return updated


def with_real_input(
    facts: Mapping[int, CandidateFacts], estimates: Mapping[int, SpeedupEstimate | None]
) -> dict[int, CandidateFacts]:
    """Add the real-input timings of the candidates that were timed on real inputs."""
    updated = dict(facts)
    for candidate_id, estimate in estimates.items():
        current = updated.get(candidate_id, CandidateFacts(candidate_id))
        updated[candidate_id] = replace(current, real_input=estimate)
    return updated
