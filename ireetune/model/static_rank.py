"""A model's dispatches ranked before anything was timed (FLOPs and bytes x launches).

Where the model is measured on another host, the candidates of the dispatches likely to be hot
are compiled before the first trip there, so that one trip both profiles and measures them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from ireetune.model.hot import DispatchProfile, select_hot_dispatches
from ireetune.problem.family import Problem, map_dim_positions
from ireetune.problem.pack import LayoutChangeProblem
from ireetune.problem.registry import family_of

# Where an op turns from memory-bound to compute-bound, in FLOPs per byte: a rough knee for the
# GPUs and CPUs targeted (an H100 running sm_80 code: about 100; a CPU core: about 20).
FLOPS_PER_BYTE = 50


def estimate_cost(flops: int, operand_bytes: int) -> float:
    """Estimate one launch's time, in bytes-moved units, from a roofline with one knee."""
    return max(flops / FLOPS_PER_BYTE, float(operand_bytes))


def pre_rank_dispatches(
    profiles: Sequence[DispatchProfile], costs: dict[str, float], max_dispatches: int
) -> list[DispatchProfile]:
    """Rank tunable dispatches by estimated cost x launches before anything was timed.

    The measured hot set (after the device's profile) is a subset of the tunable problems of at
    most `max_dispatches`; taking the top `max_dispatches` by estimated cost makes it likely
    that every hot problem's candidates are compiled before the first round trip.
    """
    estimated = [
        replace(p, dispatch_ms=costs.get(p.name, 0.0) * 1e-9 if p.tunable else 0.0)
        for p in profiles
    ]
    return list(select_hot_dispatches(estimated, 0.0, 1.0, max_dispatches).selected)


def problem_work(problem: Problem) -> tuple[int, int]:
    """Return a parsed problem's FLOPs and the bytes its operands occupy (2 per element: a
    measure of the data moved, the same for every element type)."""
    inputs = family_of(problem).reference_inputs(problem).shapes
    elements = sum(math.prod(shape) for shape in inputs)
    if isinstance(problem, LayoutChangeProblem):
        # A pack or an unpack has no indexing maps: its destination is its output.
        elements += math.prod(problem.output_shape)
    else:
        output = [p for p in map_dim_positions(problem.indexing_maps[-1]) if p >= 0]
        elements += math.prod(problem.loop_sizes[p] for p in output)
    return problem.flops, 2 * elements
