"""A hand-written VectorDistribute space for reductions and softmax (IREE 3.13 emits none).

IREE's own configuration of a 32x1024 f32 softmax on sm_80 reduces each row with one workgroup
of 8 subgroups of 32 lanes, every lane loading 4 contiguous elements, the whole row at once:

    root (sum of exponentials):  {workgroup = [1, 0], partial_reduction = [0, 1024],
        subgroup_basis = [[1, 8], [0, 1]], lane_basis = [[1, 32], [0, 1]], thread = [0, 4]}
    row maximum:                 the same without `workgroup`
    normalisation (parallel):    the same with `serial = [0, 1024]` for `partial_reduction`
    workgroup_size = [256, 1, 1], subgroup_size = 32

The knobs: subgroups along the reduction (`sg_r`), elements per lane and load (`thread_r`, at
most 16 bytes) and the reduction chunk one workgroup pass covers (`chunk`, a multiple of
`sg_r` x lanes x `thread_r` that divides the row). A dispatch's other ops need configurations
of the same shape or VectorDistribute fails ("failed to distribute"): the spec gives the other
reductions of the dispatch the root's config without `workgroup` and its parallel ops the
`serial` form (`sibling_configs`; spec/builder.py). One reduction loop (the innermost) is
searched; reductions over several loops are refused.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import z3

from ireetune.core.errors import IreetuneError
from ireetune.problem.family import Problem, narrow
from ireetune.problem.reduction import ReductionProblem
from ireetune.targets.gpu.constraints import CompilerSpace, ConstraintSpace, make_space
from ireetune.targets.gpu.ordering import occupancy_loss
from ireetune.targets.gpu.template import IntKnob, ResolvedDict, TemplateDict, TemplateValue
from ireetune.targets.z3_enumerate import divisors, one_of

if TYPE_CHECKING:
    from ireetune.targets.gpu.facts import GpuFacts

REDUCTION_PIPELINE = "VectorDistribute"
_SUBGROUP_COUNTS = (1, 2, 4, 8, 16, 32)
_THREAD_TILES = (1, 2, 4, 8)
_BYTES = {"f64": 8, "f32": 4, "i32": 4, "f16": 2, "bf16": 2, "i8": 1}


def gpu_reduction_refusal(problem: Problem) -> str | None:
    """Say why the GPU reduction space cannot search a reduction, or None."""
    reduction = narrow(problem, ReductionProblem)
    if len(reduction.reduction_dims) != 1:
        return "reductions over several loops have no GPU space yet"
    if reduction.reduction_dims[0] != len(reduction.loop_sizes) - 1:
        return "only reductions over the innermost loop have a GPU space yet"
    return None


def reduction_spaces(
    problem: Problem, facts: GpuFacts, compiler: CompilerSpace
) -> tuple[ConstraintSpace, ...]:
    """Write the VectorDistribute reduction space (one space, index 0)."""
    refusal = gpu_reduction_refusal(problem)
    if refusal is not None:
        raise IreetuneError(f"{problem.signature}: {refusal}")
    reduction = narrow(problem, ReductionProblem)
    loops = len(reduction.loop_sizes)
    size = reduction.loop_sizes[-1]
    lanes = facts.subgroup_sizes[0]
    element_bytes = max(_BYTES.get(t, 4) for t in (*reduction.input_types, reduction.output_type))
    context = z3.Context()
    v = {
        name: z3.Int(name, context)
        for name in ("sg_r", "thread_r", "chunk", "sg_size", "wg_size_x")
    }
    constraints = [
        one_of(v["sg_r"], list(_SUBGROUP_COUNTS)),
        one_of(v["thread_r"], [t for t in _THREAD_TILES if t * element_bytes <= 16]),
        one_of(v["chunk"], divisors(size)),
        v["chunk"] % (v["sg_r"] * lanes * v["thread_r"]) == 0,
        v["sg_size"] == lanes,
        v["wg_size_x"] == v["sg_r"] * lanes,
        v["wg_size_x"] <= facts.max_threads,
    ]

    def per_loop(inner: TemplateValue, other: int) -> list[TemplateValue]:
        return [*([other] * (loops - 1)), inner]

    identity: list[TemplateValue] = list(range(loops))
    template: TemplateDict = {
        "lane_basis": [per_loop(lanes, 1), identity],
        "partial_reduction": per_loop(IntKnob("chunk"), 0),
        "subgroup_basis": [per_loop(IntKnob("sg_r"), 1), identity],
        "thread": per_loop(IntKnob("thread_r"), 0),
        "workgroup": per_loop(0, 1),
        "workgroup_size": [IntKnob("wg_size_x"), 1, 1],
        "subgroup_size": IntKnob("sg_size"),
    }
    return (make_space(0, REDUCTION_PIPELINE, template, constraints, context),)


def reduction_siblings(config: ResolvedDict) -> tuple[tuple[str, ResolvedDict], ...]:
    """Derive the configs of the dispatch's other ops from the root's: other reductions take it
    without `workgroup`, parallel ops take `serial` for `partial_reduction`."""
    shared = {
        key: value
        for key, value in config.items()
        if key in ("lane_basis", "subgroup_basis", "thread")
    }
    return (
        ("reduction", {**shared, "partial_reduction": config["partial_reduction"]}),
        ("parallel", {**shared, "serial": config["partial_reduction"]}),
    )


def score_reduction(
    problem: Problem, space: ConstraintSpace, config: ResolvedDict, facts: GpuFacts
) -> float:
    """Score a reduction configuration (memory bound): 16-byte loads, 256-1024 threads, the
    whole row in one pass, and rows enough to keep every compute unit busy."""
    reduction = narrow(problem, ReductionProblem)
    thread = config["thread"]
    partial = config["partial_reduction"]
    threads = config["workgroup_size"]
    assert isinstance(thread, list) and isinstance(partial, list) and isinstance(threads, list)
    thread_r, chunk = int(thread[-1]), int(partial[-1])  # type: ignore[arg-type]
    thread_count = int(threads[0])  # type: ignore[arg-type]
    element_bytes = max(_BYTES.get(t, 4) for t in (*reduction.input_types, reduction.output_type))
    rows = math.prod(reduction.parallel_sizes)
    load_fit = 1.0 if thread_r * element_bytes == 16 else 0.0
    threads_fit = 0.0 if 256 <= thread_count <= 1024 else -0.5
    one_pass = 0.5 if chunk == reduction.loop_sizes[-1] else 0.0
    return load_fit + threads_fit + one_pass - occupancy_loss(rows, facts.compute_units)
