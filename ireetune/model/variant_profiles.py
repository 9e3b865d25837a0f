"""Each tuned dispatch's candidates judged by their time inside the model's variants.

A variant's whole-model time moves with every dispatch in it and with the machine: on the
2-core development machine a candidate 1.26x faster than the default alone, in a dispatch that
takes 8% of the model, changes the model by 2%, inside the noise of a session
(docs/benchmarks.md: 15 of 36 candidates faster alone were not faster in the model). The HAL
profiler (model/in_model_times.py) times each dispatch inside one run of a variant, so each
candidate's own time in the model is read directly, and a joint variant reads every dispatch's
candidate of its rank at once.

Each variant is profiled once between two profiles of the default. A group's time (the tuned
dispatch's exports, with its problem's repeats and kin, which its specs configure too) is read
against the default's; the time of the dispatches the variant leaves at their defaults is the
clock (a candidate alone leaves every other tuned dispatch too): when the machine runs a
variant's profile slower, those dispatches run slower by as much, and the ratio divides that
out. Each dispatch's candidate with the least ratio, when it passes
`PICK_MARGIN` and its variant gave the default's outputs, goes into one combined variant; the
whole-model sessions then judge that variant as any other.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ireetune.model.hot import HotSet
from ireetune.model.in_model_times import InModelTimes, profiled_calls
from ireetune.model.profile import benchmark_exports
from ireetune.model.variants import VariantPlan

# How long a stretch of calls each variant's profile covers: shorter than the profile phase's
# (PROFILE_STRETCH_MS), since each variant needs one; a dispatch keeps the median of its launches.
VARIANT_STRETCH_MS = 600.0
# A profile's cost beyond its calls and the model's load: two tool processes and the export.
PROFILE_OVERHEAD_S = 0.6
# A candidate is picked when its group takes at most this share of the default's time in the
# model, after the clock's correction.
PICK_MARGIN = 0.97
# The untouched dispatches serve as the clock only when they take at least this share of the
# default's time; else the ratios are read uncorrected.
MIN_CLOCK_SHARE = 0.1
# The label of the variant the picks make.
IN_MODEL_LABEL = "in_model"


@dataclass(frozen=True)
class InModelPick:
    """One dispatch's candidate picked inside the model: its spec, its group's time in the
    model over the default's (clock-corrected, the mean over the variants that hold it)."""

    dispatch: int
    spec: Path
    ratio: float


def variant_calls(model_ms: float) -> int:
    """How many calls a variant's profile makes: a VARIANT_STRETCH_MS stretch, within the
    profile's bounds."""
    return profiled_calls(model_ms, VARIANT_STRETCH_MS)


def profiles_seconds(variants: int, model_ms: float, load_s: float) -> float:
    """Estimate how long profiling `variants` variants and the default twice takes."""
    calls_s = variant_calls(model_ms) * model_ms / 1000.0
    return (variants + 2) * (load_s + calls_s + PROFILE_OVERHEAD_S)


def group_exports(hot_set: HotSet, names: Sequence[str]) -> list[frozenset[str]]:
    """Each tuned dispatch's exports (by its name in `names`): those of every dispatch in its
    group (its problem's repeats and its kin), which its specs configure too."""
    by_name = {profile.name: profile for profile in hot_set.ranked}
    groups = []
    for name in names:
        group = by_name[name].group
        groups.append(
            frozenset(
                export
                for profile in hot_set.ranked
                if profile.group == group
                for export in benchmark_exports(profile.benchmark_path)
            )
        )
    return groups


def _total(times: InModelTimes, exports: frozenset[str] | None, untouched: bool = False) -> float:
    return sum(
        ms
        for name, ms in times.per_call_ms.items()
        if exports is None or (name in exports) != untouched
    )


def group_ratios(
    defaults: Sequence[InModelTimes],
    variant: InModelTimes,
    groups: Sequence[frozenset[str]],
    members: Collection[int] | None = None,
) -> dict[int, float]:
    """Each group's time in `variant` over its mean time in the default's profiles, divided by
    the same ratio of the dispatches the variant leaves at their defaults (the clock): those of
    no group, and those of the groups not among its `members` (None: it touches every group);
    a group the profiles do not name has no ratio."""
    ratios, _ = clocked_ratios(defaults, variant, groups, members)
    return ratios


def clocked_ratios(
    defaults: Sequence[InModelTimes],
    variant: InModelTimes,
    groups: Sequence[frozenset[str]],
    members: Collection[int] | None = None,
) -> tuple[dict[int, float], bool]:
    """`group_ratios`, and whether a clock corrected them: the dispatches the variant leaves
    at their defaults took at least MIN_CLOCK_SHARE of the default's time. Without one, the
    ratios carry the machine's speed between the profiles (on the 2-core EPYC one AlexNet binary
    ran 35.1 to 44.4 ms a call in runs minutes apart, 2026-12-07)."""
    touching = [g for i, g in enumerate(groups) if members is None or i in members]
    touched = frozenset().union(*touching) if touching else frozenset()
    default_rest = statistics.fmean(_total(d, touched, untouched=True) for d in defaults)
    default_all = statistics.fmean(_total(d, None) for d in defaults)
    variant_rest = _total(variant, touched, untouched=True)
    clock, clocked = 1.0, False
    if default_all > 0 and default_rest >= MIN_CLOCK_SHARE * default_all and variant_rest > 0:
        clock, clocked = variant_rest / default_rest, True
    ratios: dict[int, float] = {}
    if not variant.ok:
        return ratios, clocked
    for index, exports in enumerate(groups):
        default_ms = statistics.fmean(_total(d, exports) for d in defaults)
        if default_ms > 0 and exports & variant.per_call_ms.keys():
            ratios[index] = _total(variant, exports) / default_ms / clock
    return ratios, clocked


def pick_in_model(
    plans: Sequence[VariantPlan],
    defaults: Sequence[InModelTimes],
    profiles: Mapping[str, InModelTimes],
    groups: Sequence[frozenset[str]],
    trusted: Callable[[str], bool],
) -> list[InModelPick]:
    """Pick each dispatch's candidate whose group ran fastest inside the profiled variants
    (`profiles`, by label) that gave the default's outputs (`trusted(label)`), when its mean
    ratio passes PICK_MARGIN; in dispatch order. Each variant's clock is what it leaves at the
    defaults (a candidate alone: every other group too); a candidate's ratios read against a
    clock outrank those read without one (a joint variant touching most of the model)."""
    # Per candidate, its ratios read against a clock, and those read without one.
    seen: dict[tuple[int, Path], tuple[list[float], list[float]]] = {}
    for plan in plans:
        times = profiles.get(plan.label)
        if times is None or not times.ok or not trusted(plan.label):
            continue
        if len(plan.members) != len(plan.specs):
            continue
        ratios, clocked = clocked_ratios(defaults, times, groups, plan.members)
        for dispatch, spec in zip(plan.members, plan.specs, strict=True):
            if dispatch in ratios:
                seen.setdefault((dispatch, spec), ([], []))[0 if clocked else 1].append(
                    ratios[dispatch]
                )
    best: dict[int, InModelPick] = {}
    for (dispatch, spec), (against_clock, without_clock) in seen.items():
        pick = InModelPick(dispatch, spec, statistics.fmean(against_clock or without_clock))
        if pick.ratio <= PICK_MARGIN and (
            dispatch not in best or pick.ratio < best[dispatch].ratio
        ):
            best[dispatch] = pick
    return [best[dispatch] for dispatch in sorted(best)]


def picked_variant(
    picks: Sequence[InModelPick], plans: Sequence[VariantPlan]
) -> VariantPlan | None:
    """The variant of the picks; None when there are none or a planned variant already holds
    exactly those specs (it was timed as it is)."""
    specs = tuple(pick.spec for pick in picks)
    if not specs or specs in {plan.specs for plan in plans}:
        return None
    return VariantPlan(IN_MODEL_LABEL, specs, joined=tuple(pick.dispatch for pick in picks))
