"""Model variants timed against the default model in two sessions.

The first session times every variant interleaved with the default in one process; it
pre-selects by point estimate (above the rule's threshold, with the default's outputs, at most
`confirm_top`). A fresh session then times the pre-selected variants against the default again:
only its intervals decide (`model/variants.decide_variants`). The split flow's device step
times the flag phase's binaries and the spec variants this way, and so does the in-process
selection of spec variants: one way to time variants, in both modes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ireetune.core.errors import IreetuneError
from ireetune.decision.rules import CandidateFacts, DecisionRule, preselect
from ireetune.decision.stats import (
    Basis,
    SpeedupEstimate,
    Statistic,
    estimate_speedup,
    split_rounds,
)
from ireetune.model.outputs import outputs_match
from ireetune.model.select import MODEL_RULE
from ireetune.model.timing import ModelComparison, ModelRun, repetitions_for

if TYPE_CHECKING:
    from ireetune.executor.base import Executor

# Rounds of one call of the default that set the calls per round when a plan leaves them open.
WARM_UP_ROUNDS = 3

# The comparison that times the default (id "default") and the variants `labels` for `rounds`
# rounds of `calls` calls, its outputs in the folder `name` (warm_up, first or confirm).
SessionFor = Callable[[Sequence[str], str, int, int], ModelComparison]


@dataclass(frozen=True)
class SessionPlan:
    """How the variants are timed: the first session's rounds, the calls per round (0: as many
    as make a round of the default last `MIN_ROUND_MS`, from a short warm-up), how many variants
    the first session pre-selects at most, the confirmation's rounds, and the threshold a point
    estimate must pass to be pre-selected."""

    rounds: int
    calls_per_round: int
    confirm_top: int
    confirm_rounds: int
    threshold: float


@dataclass(frozen=True)
class VariantSessions:
    """Both sessions' runs (each keyed by model id, "default" among them) and the variants the
    first pre-selected."""

    calls_per_round: int
    first: dict[str, ModelRun]
    contenders: list[str]
    confirm: dict[str, ModelRun]


def _checked(runs: dict[str, ModelRun], comparison: ModelComparison) -> dict[str, ModelRun]:
    if not runs["default"].ok:
        raise IreetuneError(
            f"the default model does not run on {comparison.device}: {runs['default'].reason}"
        )
    return runs


def estimate_against_default(
    runs: dict[str, ModelRun],
    label: str,
    calls: int,
    statistic: Statistic = MODEL_RULE.statistic,
) -> SpeedupEstimate | None:
    """Return a variant's paired speedup over the default in one session by the timings'
    `statistic` (None: it did not run there)."""
    default, run = runs["default"], runs.get(label)
    if run is None or not run.ok or not default.times_ms:
        return None
    return estimate_speedup(
        split_rounds(default.times_ms, calls),
        split_rounds(run.times_ms, calls),
        Basis.MODEL,
        statistic,
    )


def time_variant_sessions(
    executor: Executor,
    session_for: SessionFor,
    labels: Sequence[str],
    plan: SessionPlan,
    announce: Callable[[str], None] = lambda _: None,
    build_more: Callable[[dict[str, ModelRun], int], list[str]] | None = None,
) -> VariantSessions:
    """Time the variants `labels` beside the default, pre-select, and confirm in a fresh
    session; raise an IreetuneError when the default model itself does not run.

    `build_more(first, calls_per_round)`, when given, builds variants from what the first
    session found and returns their labels: they join the confirmation (the in-process flow
    combines each dispatch's fastest candidate there; a device step has no compiler)."""
    calls = plan.calls_per_round
    if calls < 1:
        warm_up = session_for([], "warm_up", WARM_UP_ROUNDS, 1)
        runs = _checked(executor.run_models_side_by_side(warm_up), warm_up)
        calls = repetitions_for(min(runs["default"].times_ms))
    session = session_for(labels, "first", plan.rounds, calls)
    first = _checked(executor.run_models_side_by_side(session), session)
    facts = []
    for index, label in enumerate(labels, start=1):
        run = first[label]
        if not run.ok:
            continue
        matches, _ = outputs_match(first["default"].outputs, run.outputs)
        estimate = estimate_against_default(first, label, calls)
        facts.append(CandidateFacts(index, dispatch=estimate, outputs_match=matches))
    contenders = [
        labels[i - 1]
        for i in preselect(facts, DecisionRule(threshold=plan.threshold), plan.confirm_top)
    ]
    if build_more is not None:
        contenders += [label for label in build_more(first, calls) if label not in contenders]
    confirm: dict[str, ModelRun] = {}
    if contenders:
        announce(f"confirming {', '.join(contenders)} in a fresh session")
        session = session_for(contenders, "confirm", plan.confirm_rounds, calls)
        confirm = executor.run_models_side_by_side(session)
    return VariantSessions(calls, first, contenders, confirm)


def sessions_document(
    sessions: VariantSessions, work_dir: Path, root: Path, device: str
) -> dict[str, Any]:
    """Write down both sessions as the device step's results file and `decide_variants` read
    them: each model's times, why it did not run, and where its outputs are (relative to
    `root`; the sessions' folders are under `work_dir`)."""

    def describe(session: dict[str, ModelRun], folder: str) -> dict[str, Any]:
        return {
            label: {
                "times_ms": list(run.times_ms),
                "reason": run.reason,
                "outputs": str((work_dir / folder / f"{label}_outputs.npz").relative_to(root))
                if run.ok
                else "",
            }
            for label, run in session.items()
        }

    return {
        "device": device,
        "calls_per_round": sessions.calls_per_round,
        "first": describe(sessions.first, "first"),
        "contenders": sessions.contenders,
        "confirm": describe(sessions.confirm, "confirm"),
    }
