"""Who is a contender, who passes which check, and who wins.

A verdict is the conjunction of every check the target requires: the outputs equal the
default's, and the deciding speedup's confidence interval lies above the rule's threshold. The
deciding speedup is the real-input one where the target decides on real inputs (the CPU, whose
dispatch benchmarks run on uninitialised buffers), else the dispatch-level one.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from ireetune.decision.stats import Basis, SpeedupEstimate, Statistic


class Verdict(enum.Enum):
    """What the rule concluded of one candidate."""

    UNDECIDED = ""  # Never a contender (slower, failed to run, or stopped early).
    WINNER = "winner"  # Passed every check and ranked first of those that did.
    BEATEN = "beaten"  # Passed every check; another candidate ranked first.
    REJECTED = "rejected"  # A contender that failed a check.


@dataclass(frozen=True)
class DecisionRule:
    """Accept a candidate only when its speedup's interval lies above `threshold`.

    The accepted ones are ranked by their point speedup, or, with `rank_by_low`, by their
    interval's lower bound: the speedup the measurement vouches for. A set whose time is
    bimodal has a wide interval whose point can land on its fast mode in one session:
    MobileNet-v2's `--iree-llvmcpu-number-of-threads=1` won the flag phase 2 times in 3 at
    4.49x [2.29, 4.75] over a steady 4.42x [4.20, 4.60], and then ran at 3.5-4.4 ms against the
    steady set's 3.1-3.2 ms (docs/benchmarks.md, 2026-11-29).
    """

    threshold: float = 1.02
    confidence: float = 0.95
    real_input_decides: bool = False
    rank_by_low: bool = False
    # What the speedups compare. For another statistic than the median, a candidate also needs
    # the medians' ratio's interval to reach 1: its typical call is not shown slower.
    statistic: Statistic = Statistic.MEDIAN

    @property
    def name(self) -> str:
        """Name the rule; stored verdicts are reused only under the rule that reached them."""
        basis = "real-input" if self.real_input_decides else "dispatch"
        ranking = "/by-low" if self.rank_by_low else ""
        statistic = "" if self.statistic is Statistic.MEDIAN else "/faster-half-mean/median-guard"
        return (
            f"paired-bootstrap/{self.confidence:g}/above-{self.threshold:g}/{basis}{ranking}"
            f"{statistic}/v1"
        )


@dataclass(frozen=True)
class CandidateFacts:
    """What was measured of one candidate; None where a check was not made."""

    candidate_id: int
    dispatch: SpeedupEstimate | None = None
    real_input: SpeedupEstimate | None = None
    # True: compared and equal; False: compared and different; None: not compared, with the
    # reason in `output_reason` where a comparison was tried and could not be made.
    outputs_match: bool | None = None
    output_reason: str = ""
    stopped_early: bool = False
    # Timed in the interleaved confirmation round (else `dispatch` is the first pass's figure).
    confirmed: bool = False


@dataclass(frozen=True)
class CandidateJudgement:
    """One candidate's verdict and, when it was not accepted, why."""

    candidate_id: int
    verdict: Verdict
    reason: str
    deciding: SpeedupEstimate | None


@dataclass(frozen=True)
class Decision:
    """The winner (None when nobody passed every check) and every candidate's judgement."""

    rule: DecisionRule
    winner: int | None
    judgements: dict[int, CandidateJudgement] = field(default_factory=dict)

    @property
    def winner_estimate(self) -> SpeedupEstimate | None:
        if self.winner is None:
            return None
        return self.judgements[self.winner].deciding


def deciding_estimate(facts: CandidateFacts, rule: DecisionRule) -> SpeedupEstimate | None:
    """Return the speedup that decides under `rule`."""
    if not rule.real_input_decides:
        return facts.dispatch
    if facts.dispatch is not None and facts.dispatch.basis is Basis.REAL_INPUT:
        # The search itself was timed on real inputs: that is the real-input check.
        return facts.dispatch
    return facts.real_input


def clears_threshold(estimate: SpeedupEstimate | None, rule: DecisionRule) -> bool:
    """Say whether a speedup's whole interval lies above the rule's threshold and, for another
    statistic than the median, whether the medians' interval reaches 1 (a candidate that is
    faster only in its fast calls, its typical call shown slower, does not pass), or the
    threshold where that is lower: a threshold under 1 (`--flag-threshold 0.95`) accepts a set
    that much slower, in its typical call too."""
    if estimate is None or estimate.low <= rule.threshold:
        return False
    guard = min(1.0, rule.threshold)
    return estimate.typical_high is None or estimate.typical_high >= guard


# Where real inputs decide but the search ran on dispatch benchmarks, this many leaders at least
# are checked on real inputs.
REAL_INPUT_PRESELECTION = 6


def contender_limit(verify_top: int, preselect: bool) -> int:
    """How many leaders are checked further: `verify_top`, and at least REAL_INPUT_PRESELECTION
    when they are a pre-selection (real inputs decide, dispatch benchmarks searched)."""
    return max(verify_top, REAL_INPUT_PRESELECTION) if preselect else verify_top


def choose_contenders(facts: Sequence[CandidateFacts], rule: DecisionRule, limit: int) -> list[int]:
    """Return up to `limit` candidates worth checking further, the most promising first.

    With the dispatch level deciding, a contender's confirmed interval already clears the
    threshold. Where real inputs decide but the search was timed on dispatch benchmarks, the
    dispatch level only pre-selects: the fastest there that were not stopped early.
    """
    if limit < 1:
        return []
    if rule.real_input_decides and any(
        f.dispatch is not None and f.dispatch.basis is Basis.DISPATCH for f in facts
    ):
        eligible = [f for f in facts if f.dispatch is not None and not f.stopped_early]
    else:
        eligible = [
            f
            for f in facts
            if f.confirmed and not f.stopped_early and clears_threshold(f.dispatch, rule)
        ]
    eligible.sort(key=lambda f: (-(f.dispatch.speedup if f.dispatch else 0.0), f.candidate_id))
    return [f.candidate_id for f in eligible[:limit]]


def judge(facts: CandidateFacts, rule: DecisionRule) -> CandidateJudgement:
    """Judge one contender against every check the rule requires (the winner is chosen later)."""
    estimate = deciding_estimate(facts, rule)
    if facts.outputs_match is False:
        reason = facts.output_reason or "outputs differ"
        return CandidateJudgement(facts.candidate_id, Verdict.REJECTED, reason, estimate)
    if facts.outputs_match is None:
        # Never compared is not proven right: such a candidate is refused, as one that differs.
        reason = "outputs not compared with the default's" + (
            f": {facts.output_reason}" if facts.output_reason else ""
        )
        return CandidateJudgement(facts.candidate_id, Verdict.REJECTED, reason, estimate)
    if estimate is None:
        return CandidateJudgement(
            facts.candidate_id, Verdict.REJECTED, "no real-input timing", estimate
        )
    if not clears_threshold(estimate, rule):
        return CandidateJudgement(
            facts.candidate_id,
            Verdict.REJECTED,
            f"{estimate.basis.value} speedup {estimate.describe()} does not clear "
            f"{rule.threshold:g}x",
            estimate,
        )
    return CandidateJudgement(facts.candidate_id, Verdict.BEATEN, "", estimate)


def pick_winner(
    facts: Sequence[CandidateFacts], contenders: Sequence[int], rule: DecisionRule
) -> Decision:
    """Judge the contenders; the winner is the first, in the rule's ranking (the fastest, or the
    highest lower bound), of those that pass every check.

    Ties go to the lower candidate id, so the result depends on the measurements alone.
    """
    by_id = {f.candidate_id: f for f in facts}
    judgements = {cid: judge(by_id[cid], rule) for cid in contenders if cid in by_id}
    passing = [j for j in judgements.values() if j.verdict is Verdict.BEATEN]
    if not passing:
        return Decision(rule, None, judgements)
    best = min(passing, key=lambda j: (-rank_value(j.deciding, rule), j.candidate_id))
    judgements[best.candidate_id] = CandidateJudgement(
        best.candidate_id, Verdict.WINNER, "", best.deciding
    )
    return Decision(rule, best.candidate_id, judgements)


def rank_value(estimate: SpeedupEstimate | None, rule: DecisionRule) -> float:
    """Return what the rule ranks a passing candidate by (higher is better): its point speedup,
    or under `rank_by_low` its interval's lower bound, and for another statistic than the
    median the lower of that bound and the medians' (`typical_low`): a set whose calls run at
    two speeds passes on its fast calls, and its medians' interval then says how far its typical
    call is to be trusted."""
    if estimate is None:
        return 0.0
    if not rule.rank_by_low:
        return estimate.speedup
    typical_low = estimate.typical_low
    return estimate.low if typical_low is None else min(estimate.low, typical_low)


def preselect(facts: Sequence[CandidateFacts], rule: DecisionRule, limit: int) -> list[int]:
    """Return up to `limit` candidates of a first session worth a confirmation, fastest first.

    A first session only pre-selects, by its point estimate above the threshold (a handful of
    rounds on a noisy machine can leave a real gain's interval reaching below 1); candidates whose
    outputs were found to differ are left out. A fresh session then decides by the interval,
    which also keeps the winner's figure free of the selection's optimism.
    """
    eligible = [
        f
        for f in facts
        if f.dispatch is not None
        and f.dispatch.speedup > rule.threshold
        and f.outputs_match is not False
        and not f.stopped_early
    ]
    eligible.sort(key=lambda f: (-(f.dispatch.speedup if f.dispatch else 0.0), f.candidate_id))
    return [f.candidate_id for f in eligible[: max(0, limit)]]
