"""Model variants: planned, then decided.

Each hot dispatch's candidate specs (best first) become variants of the whole model: each
candidate alone, every dispatch's first candidate together, and every dispatch's candidate of
each later rank together. They are timed against the default; the confirmed ones are decided by
the decision stage's MODEL_RULE.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ireetune.decision.rules import CandidateFacts, Decision, pick_winner
from ireetune.decision.stats import Basis, SpeedupEstimate, estimate_speedup, split_rounds
from ireetune.model.select import MODEL_RULE


@dataclass(frozen=True)
class VariantPlan:
    """One model variant: the candidate specs linked into it, in dispatch order. A variant of
    one candidate names its dispatch (`dispatch`, the hot dispatch's index) and the candidate's
    rank in that dispatch's list; a variant that joins several names no dispatch, and holds
    the candidates of one rank of the dispatches in `joined` (none: unknown, a combination)."""

    label: str
    specs: tuple[Path, ...]
    dispatch: int | None = None
    rank: int = 0
    joined: tuple[int, ...] = ()

    @property
    def members(self) -> tuple[int, ...]:
        """The hot dispatches whose candidates the variant holds, in the order of its specs."""
        return (self.dispatch,) if self.dispatch is not None else self.joined


def held_count(plans: Iterable[VariantPlan]) -> int:
    """How many dispatches the variants `plans` hold candidates of, alone or joined: a
    profile of the variants reads that many dispatches' candidates inside the model."""
    return len({member for plan in plans for member in plan.members})


def dispatch_count(plans: Iterable[VariantPlan]) -> int:
    """How many dispatches have a variant of their own among `plans`: a variant that joins
    dispatches can come only from two or more."""
    return len({plan.dispatch for plan in plans if plan.dispatch is not None})


@dataclass(frozen=True)
class VariantVerdict:
    """The decision on the model variants the device timed (`variants`, its results; None when
    no variant was built), with each confirmed variant's interval."""

    variants: dict[str, Any] | None
    decision: Decision | None
    estimates: dict[str, SpeedupEstimate | None]


def plan_variants(candidates: Sequence[tuple[str, Sequence[Path]]]) -> list[VariantPlan]:
    """Plan the model variants from each hot dispatch's candidate specs (best first).

    Each candidate alone (`d<i>c<k>`); and, where two or more dispatches have a candidate of a
    rank, those candidates together: every dispatch's first (`best`, the combination the
    per-dispatch verdicts point to), then every dispatch's second (`rank1`), and so on. One
    compile of a model per rank puts every candidate in the model, where one a candidate would
    not fit a time budget (a 2-core machine compiles ResNet-50 in about 13 s).
    """
    plans = [
        VariantPlan(f"d{index}c{rank}", (spec,), index, rank)
        for index, (_, specs) in enumerate(candidates)
        for rank, spec in enumerate(specs)
    ]
    for rank in range(max((len(specs) for _, specs in candidates), default=0)):
        joined = tuple(i for i, (_, specs) in enumerate(candidates) if len(specs) > rank)
        if len(joined) > 1:
            label = f"rank{rank}" if rank else "best"
            specs = tuple(candidates[i][1][rank] for i in joined)
            plans.append(VariantPlan(label, specs, rank=rank, joined=joined))
    return plans


def decide_variants(
    variants: dict[str, Any], labels: Sequence[str], outputs_of: dict[str, tuple[bool, str]]
) -> tuple[Decision, dict[str, SpeedupEstimate | None]]:
    """Reach the verdict on the confirmed variants with the decision stage's MODEL_RULE.

    `labels` gives each variant its id (position + 1; 0 is the default); `outputs_of` each
    variant's output check. Only the confirmation session's intervals decide.
    """
    calls = int(variants["calls_per_round"])
    confirm = variants["confirm"]
    default_times = confirm.get("default", {}).get("times_ms", [])
    estimates: dict[str, SpeedupEstimate | None] = {}
    facts = []
    for label in variants["contenders"]:
        times = confirm.get(label, {}).get("times_ms", [])
        estimate = (
            estimate_speedup(
                split_rounds(default_times, calls),
                split_rounds(times, calls),
                Basis.MODEL,
                MODEL_RULE.statistic,
            )
            if default_times and times
            else None
        )
        estimates[label] = estimate
        matches, why = outputs_of.get(label, (False, "no outputs"))
        facts.append(
            CandidateFacts(
                labels.index(label) + 1, dispatch=estimate, outputs_match=matches,
                output_reason=why, confirmed=True,
            )
        )  # fmt: skip
    decision = pick_winner(facts, [f.candidate_id for f in facts], MODEL_RULE)
    return decision, estimates


def first_session_estimate(variants: dict[str, Any], label: str) -> SpeedupEstimate | None:
    """Return a variant's speedup in the first session (it pre-selects; it never decides)."""
    first = variants["first"]
    default_times = first["default"]["times_ms"]
    times = first.get(label, {}).get("times_ms", [])
    if not default_times or not times:
        return None
    calls = int(variants["calls_per_round"])
    return estimate_speedup(
        split_rounds(default_times, calls), split_rounds(times, calls), Basis.MODEL,
        MODEL_RULE.statistic,
    )  # fmt: skip
