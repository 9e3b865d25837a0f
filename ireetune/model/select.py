"""Model-level decisions: keep a spec only if the model gets faster with it.

Both questions go through the decision stage (ireetune/decision): a paired interval over the
rounds in which two models were timed side by side, accepted only above the rule's threshold.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ireetune.decision.rules import DecisionRule, clears_threshold
from ireetune.decision.stats import Basis, SpeedupEstimate, estimate_speedup, split_rounds
from ireetune.decision.thresholds import MODEL_THRESHOLD

# A spec must make the whole model at least this much faster (the interval's lower bound).
MODEL_RULE = DecisionRule(threshold=MODEL_THRESHOLD)


def model_speedup(current: Sequence[float], candidate: Sequence[float]) -> SpeedupEstimate | None:
    """Return the paired speedup of `candidate` over `current`, timed one call per round."""
    if not current or not candidate:
        return None
    return estimate_speedup(split_rounds(current, 1), split_rounds(candidate, 1), Basis.MODEL)


def is_faster(
    current: Sequence[float], candidate: Sequence[float], rule: DecisionRule = MODEL_RULE
) -> bool:
    """Say whether `candidate` beats `current`: the whole interval lies above the threshold."""
    return clears_threshold(model_speedup(current, candidate), rule)


def is_undecided(estimate: SpeedupEstimate | None, rule: DecisionRule = MODEL_RULE) -> bool:
    """Say whether more rounds could turn a comparison into a win: its point estimate clears the
    rule's threshold, its interval does not yet."""
    return (
        estimate is not None
        and estimate.speedup > rule.threshold
        and not clears_threshold(estimate, rule)
    )


def find_harmful(
    kept: Sequence[str], better_without: Callable[[Sequence[str], Sequence[str]], bool]
) -> list[str]:
    """Drop, one at a time, the specs whose removal makes the model faster.

    `better_without(current, trial)` compiles and times the model with `trial` (the current set
    less one spec; empty means the default model) side by side with `current` and says whether
    the trial is faster. Each removal that helps is made permanent before the next spec is
    tried, so interactions between specs are respected, and every subset kept was measured.
    """
    current = list(kept)
    dropped: list[str] = []
    for name in list(current):
        trial = [n for n in current if n != name]
        if better_without(current, trial):
            current = trial
            dropped.append(name)
    return dropped
