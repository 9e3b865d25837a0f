"""Skip the hot dispatches that cannot pay: their share bounds what tuning them can gain.

A spec is kept only when the whole model gets faster by the model rule (select.py: the lower
bound of its speedup interval above `MODEL_THRESHOLD`). A dispatch problem that takes a share
`s` of the model's time can make the model at most `1 / (1 - s)` times faster, even if tuning
made it take no time at all. Where that bound does not clear the threshold, tuning the problem
cannot change the result, and its time (a search of dozens of compiles and measurements) is
saved. The share counts every dispatch of the problem: one spec configures all of them.
"""

from __future__ import annotations

from dataclasses import replace

from ireetune.model.hot import DispatchProfile, HotSet

# The start of a skipped dispatch's note (the HTML report groups them under it).
SMALL_SHARE_NOTE = "not tuned: too small a share of the model"


def best_possible_speedup(share: float) -> float:
    """Return the model's speedup if a part taking `share` of its time took none."""
    assert 0.0 <= share <= 1.0, share
    return float("inf") if share >= 1.0 else 1.0 / (1.0 - share)


def problem_share(hot: HotSet, profile: DispatchProfile) -> float:
    """Return the share of the model's time every dispatch of `profile`'s group (its problem, or
    its kin) takes (one tuned dispatch configures them all); 0 without a measured model."""
    basis = max(hot.model_ms, hot.explained_ms)
    problem_ms = sum(p.total_ms for p in hot.ranked if p.group == profile.group)
    return min(1.0, problem_ms / basis) if basis > 0 else 0.0


def skip_small_dispatches(hot: HotSet, threshold: float) -> tuple[HotSet, dict[str, str]]:
    """Drop from `hot.selected` the dispatches whose problem's share cannot clear `threshold`;
    return the hot set left and, for each dispatch dropped, why (its note in the report)."""
    if max(hot.model_ms, hot.explained_ms) <= 0:
        return hot, {}
    kept, skipped = [], {}
    for profile in hot.selected:
        share = problem_share(hot, profile)
        bound = best_possible_speedup(share)
        if bound > threshold:
            kept.append(profile)
            continue
        skipped[profile.name] = (
            f"{SMALL_SHARE_NOTE} ({share:.2%}): even taking no time it would make the model at "
            f"most {bound:.4f}x faster, not above the rule's {threshold:g}x"
        )
    covered_ms = sum(
        p.total_ms for p in hot.ranked if p.tunable and p.group in {k.group for k in kept}
    )
    return replace(hot, selected=tuple(kept), covered_ms=covered_ms), skipped
