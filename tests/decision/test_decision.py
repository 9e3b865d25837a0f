"""The decision stage: intervals, contenders, checks and the winner, as pure functions."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ireetune.benchmark.campaign import (
    CampaignResult,
    CandidateMeasurement,
    DeviceBaseline,
    campaign_to_json,
)
from ireetune.benchmark.runner import BenchmarkStatus
from ireetune.core.candidate import make_knobs
from ireetune.core.records import CandidateRecord, CandidateStatus
from ireetune.database.run_files import CampaignFile, campaign_from_file
from ireetune.database.store import ResultKey, StoredResult, config_key, find_reusable
from ireetune.decision.facts import facts_from_campaign, with_outputs, with_real_input
from ireetune.decision.rules import (
    CandidateFacts,
    DecisionRule,
    Verdict,
    choose_contenders,
    pick_winner,
)
from ireetune.decision.stats import Basis, estimate_speedup
from ireetune.report.recorder import RunRecorder
from ireetune.report.reuse import restore_candidates


def campaign_from_json(data: Mapping[str, object]) -> CampaignResult:
    """Rebuild a campaign's result from `campaign_to_json`'s form (checked against its model)."""
    return campaign_from_file(CampaignFile.model_validate_json(json.dumps(data)))


BASE = ((10.0, 10.1, 9.9), (10.2, 10.0, 10.1), (9.9, 10.0, 10.0), (10.1, 10.0, 9.9))


def _rounds(factor: float) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(t * factor for t in r) for r in BASE)


def test_interval_is_paired_deterministic_and_contains_the_point() -> None:
    faster = estimate_speedup(BASE, _rounds(0.8), Basis.DISPATCH)
    again = estimate_speedup(BASE, _rounds(0.8), Basis.DISPATCH)
    assert faster is not None and faster == again
    assert faster.low <= faster.speedup <= faster.high
    assert faster.low > 1.2 and faster.high < 1.3
    # Rounds that disagree give a wide interval straddling 1.
    mixed = estimate_speedup(
        BASE, (_rounds(0.7)[0], _rounds(1.3)[1], _rounds(0.7)[2], _rounds(1.3)[3]), Basis.DISPATCH
    )
    assert mixed is not None and mixed.low < 1.0 < mixed.high
    assert estimate_speedup(BASE, ((), (), (), ()), Basis.DISPATCH) is None


def _campaign(factors: dict[int, float], confirmed: set[int]) -> CampaignResult:
    flat = tuple(t for r in BASE for t in r)
    baseline = DeviceBaseline("local-task", 1, flat, flat, flat, 0.0, confirmed_rounds_ms=BASE)
    candidates = {
        cid: CandidateMeasurement(
            cid,
            "local-task",
            BenchmarkStatus.MEASURED,
            "",
            tuple(t * f for t in flat),
            1 / f,
            False,
            cid in confirmed,
            _rounds(f) if cid in confirmed else (),
        )  # fmt: skip
        for cid, f in factors.items()
    }
    return CampaignResult({"local-task": baseline}, candidates, (), 1.0)


def test_dispatch_rule_needs_a_confirmed_interval_above_the_threshold() -> None:
    campaign = _campaign({1: 0.8, 2: 0.99, 3: 0.5}, confirmed={1, 2})
    rule = DecisionRule()
    facts = facts_from_campaign(campaign, Basis.DISPATCH)
    # 3 looks fastest but was never confirmed; 2 is inside the threshold.
    assert choose_contenders(list(facts.values()), rule, 3) == [1]


def test_an_unconfirmed_candidate_is_estimated_against_the_baseline_timings_beside_it() -> None:
    # Timed in a phase where the machine ran 2x slower, as the baseline timed beside it did: it
    # is as fast as the default, though before-and-after reads it 2x slower.
    campaign = _campaign({1: 2.0}, confirmed=set())
    slow_phase = tuple(2.0 * t for r in BASE for t in r)
    beside = replace(campaign.candidates[1], reference_ms=slow_phase)
    facts = facts_from_campaign(replace(campaign, candidates={1: beside}), Basis.DISPATCH)
    estimate = facts[1].dispatch
    assert estimate is not None and estimate.speedup == pytest.approx(1.0)
    alone = facts_from_campaign(campaign, Basis.DISPATCH)[1].dispatch
    assert alone is not None and alone.speedup == pytest.approx(0.5)


def test_a_wrong_output_is_rejected_and_the_next_fastest_wins() -> None:
    campaign = _campaign({1: 0.7, 2: 0.8}, confirmed={1, 2})
    rule = DecisionRule()
    facts = facts_from_campaign(campaign, Basis.DISPATCH)
    contenders = choose_contenders(list(facts.values()), rule, 3)
    facts = with_outputs(facts, {1: (False, "outputs differ"), 2: (True, "")})
    decision = pick_winner(list(facts.values()), contenders, rule)
    assert decision.winner == 2
    assert {c: j.verdict for c, j in decision.judgements.items()} == {
        1: Verdict.REJECTED,
        2: Verdict.WINNER,
    }


def test_faster_at_dispatch_level_but_slower_on_real_inputs_never_wins() -> None:
    campaign = _campaign({1: 0.6, 2: 0.8}, confirmed={1, 2})
    rule = DecisionRule(real_input_decides=True)
    facts = facts_from_campaign(campaign, Basis.DISPATCH)
    contenders = choose_contenders(list(facts.values()), rule, 6)
    assert contenders == [1, 2]
    facts = with_outputs(facts, {1: (True, ""), 2: (True, "")})
    facts = with_real_input(
        facts,
        {
            1: estimate_speedup(BASE, _rounds(1.3), Basis.REAL_INPUT),  # 0.77x on real data
            2: estimate_speedup(BASE, _rounds(0.9), Basis.REAL_INPUT),
        },
    )
    decision = pick_winner(list(facts.values()), contenders, rule)
    assert decision.winner == 2
    assert decision.judgements[1].verdict is Verdict.REJECTED
    assert decision.winner_estimate is not None
    assert decision.winner_estimate.basis is Basis.REAL_INPUT


def test_no_contender_passing_gives_no_winner() -> None:
    rule = DecisionRule()
    facts = [
        CandidateFacts(1, estimate_speedup(BASE, _rounds(0.8), Basis.DISPATCH), confirmed=True)
    ]
    assert pick_winner(facts, [1], rule).winner is None  # Outputs never checked.
    assert pick_winner(facts, [], rule).winner is None


def test_outputs_never_compared_are_refused_as_unverified_not_wrong(tmp_path: Path) -> None:
    """The fastest contender's reference did not build, the next one's outputs differ: the
    third wins; the first is refused for want of a comparison and recorded `unverified`, the
    second `wrong`."""
    campaign = _campaign({1: 0.6, 2: 0.7, 3: 0.8}, confirmed={1, 2, 3})
    rule = DecisionRule()
    facts = facts_from_campaign(campaign, Basis.DISPATCH)
    contenders = choose_contenders(list(facts.values()), rule, 3)
    assert contenders == [1, 2, 3]
    facts = with_outputs(
        facts,
        {
            1: (None, "reference program failed to compile: error: injected"),
            2: (False, "outputs differ from the default's: 3 of 8 elements"),
            3: (True, ""),
        },
    )
    decision = pick_winner(list(facts.values()), contenders, rule)
    assert decision.winner == 3
    assert {c: (j.verdict, j.reason) for c, j in decision.judgements.items()} == {
        1: (
            Verdict.REJECTED,
            "outputs not compared with the default's: reference program failed to compile: "
            "error: injected",
        ),
        2: (Verdict.REJECTED, "outputs differ from the default's: 3 of 8 elements"),
        3: (Verdict.WINNER, ""),
    }
    records = {
        cid: CandidateRecord(cid, None if cid == 0 else make_knobs({"vec_m": cid}), CandidateStatus.MEASURED)
        for cid in (0, 1, 2, 3)
    }  # fmt: skip
    recorder = RunRecorder(tmp_path, {}, records)
    recorder.record_decision(decision, facts)
    assert {
        cid: (r.status, r.outputs_match, r.verdict) for cid, r in recorder.records.items() if cid
    } == {
        1: (CandidateStatus.UNVERIFIED, None, "rejected"),
        2: (CandidateStatus.WRONG, False, "rejected"),
        3: (CandidateStatus.VERIFIED, True, "winner"),
    }


def test_the_split_flows_json_round_trip_reaches_the_same_verdict() -> None:
    campaign = _campaign({1: 0.75, 2: 0.8, 3: 1.1}, confirmed={1, 2, 3})
    restored = campaign_from_json(campaign_to_json(campaign))
    rule = DecisionRule()
    outputs = {1: (True, ""), 2: (True, ""), 3: (True, "")}

    def decide(result: CampaignResult) -> tuple[int | None, list[int]]:
        facts = facts_from_campaign(result, Basis.DISPATCH)
        contenders = choose_contenders(list(facts.values()), rule, 3)
        decision = pick_winner(list(with_outputs(facts, outputs).values()), contenders, rule)
        return decision.winner, contenders

    assert decide(restored) == decide(campaign) == (1, [1, 2])


def _stored(verdict: str, rule: str, speedup: float, origin: str = "local") -> StoredResult:
    key = ResultKey("c", "t", "d", "p", "s")
    return StoredResult(
        key, f'{{"x": {speedup}}}', "", "verified", "", (), 1.0, 1.0, 1.0, 0.0, 1.0, speedup,
        "s", "now", verdict=verdict, rule=rule, origin=origin,
    )  # fmt: skip


def test_only_a_winner_under_the_same_rule_is_reused(tmp_path: Path) -> None:
    rule = DecisionRule().name
    rows = {
        "a": _stored("beaten", rule, 1.9),
        "b": _stored("winner", "an-older-rule", 1.8),
        "c": _stored("winner", rule, 9.9, origin="imported"),
        "d": _stored("winner", rule, 1.2),
    }
    reusable = find_reusable(rows, rule)
    assert reusable is not None and reusable.speedup == 1.2
    assert find_reusable({k: v for k, v in rows.items() if k != "d"}, rule) is None


def test_a_resumed_run_takes_finished_candidates_and_measures_device_errors_again(
    tmp_path: Path,
) -> None:
    """A stored result ends a candidate's journey when its status is final: timed (its verdict
    reached again, so `verified` comes back `measured`), failed or not applied. A device error
    was the device's: that candidate, and one only compiled, is measured again."""
    statuses = ["verified", "compile-failed", "not-applied", "device-error", "compiled"]
    knobs = {cid: make_knobs({"tile": cid}) for cid in range(1, len(statuses) + 1)}
    recorder = RunRecorder(tmp_path, {"devices": ["local-task"]})
    recorder.records[0] = CandidateRecord(0, None, CandidateStatus.COMPILED)
    for cid in knobs:
        recorder.records[cid] = CandidateRecord(cid, knobs[cid], CandidateStatus.COMPILED)
    stored = {
        config_key(knobs[cid]): replace(
            _stored("", "", 1.5), config=config_key(knobs[cid]), status=status, times_ms=(2.0,)
        )
        for cid, status in zip(knobs, statuses, strict=True)
    }
    assert restore_candidates(recorder, stored) == {1, 2, 3}
    assert [recorder.records[cid].status for cid in sorted(recorder.records)] == [
        CandidateStatus.COMPILED,
        CandidateStatus.MEASURED,
        CandidateStatus.COMPILE_FAILED,
        CandidateStatus.NOT_APPLIED,
        CandidateStatus.COMPILED,
        CandidateStatus.COMPILED,
    ]


def test_the_bootstrap_of_equal_rounds_draws_what_the_round_by_round_bootstrap_draws() -> None:
    """Rounds of one size are resampled as arrays: the interval is the one a plain two-level
    bootstrap (rounds, then the calls within each) gives on the same timings, within its
    Monte Carlo error; rounds of several sizes go through the plain one."""
    rng = np.random.default_rng(7)
    baseline = [tuple(10.0 + rng.normal(0, 1.0, 5)) for _ in range(40)]
    candidate = [tuple(9.0 + rng.normal(0, 1.0, 5)) for _ in range(40)]
    estimate = estimate_speedup(tuple(baseline), tuple(candidate), Basis.MODEL)
    assert estimate is not None

    reference = np.random.default_rng(11)
    ratios = []
    for _ in range(4000):
        rounds = reference.integers(0, 40, 40)
        drawn_b = np.concatenate([reference.choice(baseline[r], 5) for r in rounds])
        drawn_c = np.concatenate([reference.choice(candidate[r], 5) for r in rounds])
        ratios.append(np.median(drawn_b) / np.median(drawn_c))
    low, high = np.quantile(ratios, [0.025, 0.975])
    assert abs(estimate.low - low) < 0.015 and abs(estimate.high - high) < 0.015
    # Seeded: the same timings give the same interval.
    again = estimate_speedup(tuple(baseline), tuple(candidate), Basis.MODEL)
    assert again == estimate

    # A short last round: the round-by-round path, with the same answer where there is no noise.
    steady = estimate_speedup(((10.0,) * 5, (10.0,) * 5, (10.0,) * 2),
                              ((5.0,) * 5, (5.0,) * 5, (5.0,) * 2), Basis.MODEL)  # fmt: skip
    assert steady is not None and (steady.low, steady.speedup, steady.high) == (2.0, 2.0, 2.0)


def test_a_rule_ranking_by_the_lower_bound_prefers_the_steady_set_to_the_bimodal_one() -> None:
    # MobileNet-v2's flag phase: a set with one worker's worth of workgroups ran at 4.5x in some
    # rounds and 2.2x in others, a steady set at 4.4x in every round.
    bimodal = tuple(
        tuple(t * factor for t in r)
        for r, factor in zip(BASE, (0.22, 0.45, 0.22, 0.22), strict=True)
    )
    estimates = {
        1: estimate_speedup(BASE, bimodal, Basis.REAL_INPUT),
        2: estimate_speedup(BASE, _rounds(0.227), Basis.REAL_INPUT),
    }
    assert estimates[1].speedup > estimates[2].speedup and estimates[1].low < estimates[2].low
    facts = [CandidateFacts(c, real_input=e, outputs_match=True) for c, e in estimates.items()]
    point = DecisionRule(threshold=1.01, real_input_decides=True)
    by_low = DecisionRule(threshold=1.01, real_input_decides=True, rank_by_low=True)
    assert pick_winner(facts, [1, 2], point).winner == 1
    decision = pick_winner(facts, [1, 2], by_low)
    assert (decision.winner, decision.judgements[1].verdict) == (2, Verdict.BEATEN)
    # Another rule, another name: a verdict stored under one is not reused under the other.
    assert by_low.name == "paired-bootstrap/0.95/above-1.01/real-input/by-low/v1" != point.name
