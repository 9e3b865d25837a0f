"""How far each of a model's dispatches runs from what the model's own dispatches reach, and the
share of its time tuning it is expected to cut.

A roofline with its ceilings measured on the machine, not published: the most floating-point
operations a second, and the most operand bytes a second, that any tunable dispatch of the model
reached in the profile. A dispatch's efficiency is the larger of its two figures over those
ceilings (1.0: it sets one). Nothing depends on the host's peak, which is unknown on a CPU
(profiler/peaks.py), so the same rule reads any machine.

On the 2-core AMD EPYC (Zen 4, AVX-512; 70 tuned dispatches of six CNNs and the BERT-style
encoder, ten runs; docs/benchmarks.md, 2026-12-07) the efficiency ranked the best kept
candidate's speedup alone with a Spearman correlation of -0.66
(bench/dispatch_model_agreement.py): the dispatches under 0.3 (window sums, pooling windows,
im2col gathers, depthwise convolutions) ran a median 1.70x faster tuned, those over 0.7
(data-tiled and dense matmuls, dense convolutions) 1.00x.
`expected_cut` follows those figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ireetune.core.budget import DISTRIBUTION_ONLY_PRIOR, PRIOR_GAIN
from ireetune.model.hot import DispatchProfile

# The problems of data-tiled and inner-tiled matmuls, whose spaces search only how their work is
# split (core/budget.DISTRIBUTION_ONLY_PRIOR).
DISTRIBUTION_ONLY = ("mmt4d_", "batch_mmt4d_", "inner_tiled_")

# Dispatches below this share of the profile's time do not set a ceiling: a launch of a few
# microseconds times too coarsely to set one.
CEILING_SHARE = 0.005

# The share of a dispatch's time tuning is expected to cut at efficiency e:
# LEAST_CUT + HEADROOM_CUT * (1 - e)^2. On that machine the mean cut was 0.40 below an
# efficiency of 0.2, 0.11 between 0.3 and 0.7, and about 0.05 above 0.7.
LEAST_CUT = 0.04
HEADROOM_CUT = 0.4

# Where a dispatch counts as near the model's fastest: the dispatch phase's scheduler learns the
# gains of a family's dispatches near it apart from those far from it (flows/model/local.py).
NEAR_FASTEST = 0.5


def efficiencies(profiles: Sequence[DispatchProfile]) -> dict[str, float]:
    """Return each timed tunable dispatch's efficiency (0 to 1) against the ceilings its model's
    dispatches set; empty when fewer than two dispatches have their work and time known."""
    known = [p for p in profiles if p.tunable and p.dispatch_ms and (p.flops or p.bytes)]
    total = sum(p.total_ms for p in known)
    setting = [p for p in known if p.total_ms >= CEILING_SHARE * total]
    if len(known) < 2 or not setting:
        return {}
    most_flops = max(p.flops / p.dispatch_ms for p in setting if p.dispatch_ms)
    most_bytes = max(p.bytes / p.dispatch_ms for p in setting if p.dispatch_ms)

    def efficiency(p: DispatchProfile) -> float:
        assert p.dispatch_ms
        flops = p.flops / p.dispatch_ms / most_flops if most_flops else 0.0
        moved = p.bytes / p.dispatch_ms / most_bytes if most_bytes else 0.0
        return min(1.0, max(flops, moved))

    return {p.name: efficiency(p) for p in known}


def expected_cut(efficiency: float | None, unknown: float) -> float:
    """Return the share of a dispatch's time tuning it is expected to cut at `efficiency`
    (`unknown` where that is not known)."""
    if efficiency is None:
        return unknown
    return LEAST_CUT + HEADROOM_CUT * (1.0 - min(1.0, max(0.0, efficiency))) ** 2


def prior_cut(profile: DispatchProfile, found: Mapping[str, float]) -> float:
    """Return the share of `profile`'s time tuning it is expected to cut before any dispatch of
    its family was tuned: from its efficiency among `found` (`efficiencies`), or where that is
    not known, PRIOR_GAIN (DISTRIBUTION_ONLY_PRIOR for a data-tiled or inner-tiled matmul)."""
    unknown = (
        DISTRIBUTION_ONLY_PRIOR if profile.problem.startswith(DISTRIBUTION_ONLY) else PRIOR_GAIN
    )
    return expected_cut(found.get(profile.name), unknown)
