"""The element-wise family: `linalg.generic` ops of parallel loops only and one result (a bias
add and ReLU, a scale, an exponential; copies, transposes and broadcasts, whose body only
yields, are element-wise too).

IREE's dispatch creation collapses an element-wise dispatch's loops as far as its maps allow (a
plain 4x8x16 add becomes one loop of 512; a bias add over rows keeps its two loops), so the root
a dispatch shows is already in its final form:

    %r = linalg.generic {indexing_maps = [(d0, d1) -> (d0, d1), (d0, d1) -> (d1),
        (d0, d1) -> (d0, d1)], iterator_types = ["parallel", "parallel"]}
        ins(%x, %b : tensor<64x96xf32>, tensor<96xf32>) outs(%e : tensor<64x96xf32>) {
      ^bb0(%in: f32, %bias: f32, %out: f32):
        linalg.yield max(%in + %bias, 0)   (arith.addf, arith.maximumf)
    } -> tensor<64x96xf32>

As for reductions, no match op of IREE's transform extensions describes a generic by its sizes:
the matcher is a `cast_compatible_dag_from_root` holding a copy of the op (`generic.py` builds
and reads it for both families; the two are told apart by their iterator types), or a body
matcher for a body that reads a constant defined outside it (a ReLU's 0, a sigmoid's 1;
`body_matcher.py`). The reference program is the op alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from iree.compiler import ir

from ireetune.core.errors import IreetuneError
from ireetune.problem.body_matcher import BodyMatchedFamily, check_body_matchable
from ireetune.problem.family import MatchPattern, Problem
from ireetune.problem.generic import (
    NEUTRAL_BODY_OPS,
    GenericOpProblem,
    iterator_names,
    parse_generic,
)
from ireetune.problem.op_kind import name_root_op


@dataclass(frozen=True)
class ElementwiseProblem(GenericOpProblem):
    """An element-wise generic's loops, operands and body."""

    KIND = "elementwise"

    @property
    def signature(self) -> str:
        """Name it by its loop sizes and element types."""
        sizes = "x".join(str(s) for s in self.loop_sizes)
        types = "_".join((*self.input_types, self.output_type))
        return f"elementwise_{sizes}_{types}"


def parse_elementwise(root_op: ir.Operation) -> ElementwiseProblem:
    """Parse a `linalg.generic` with one result and parallel loops only."""
    if root_op.name == "linalg.generic" and not root_op.results:
        # Pinned by tests/targets/llvm_cpu/test_cpu_spec_reach.py.
        raise IreetuneError(
            f"{name_root_op(root_op)} on buffers is not tuned yet: IREE 3.13 bufferises a "
            "copy-only dispatch before it applies tuning specs, and only a copy into a padded "
            "buffer has a space (the buffer_copy family, matched by a transform.match.structured "
            "matcher)"
        )
    if root_op.name != "linalg.generic" or len(root_op.results) != 1:
        raise IreetuneError(f"root op '{root_op.name}' is not a one-result generic")
    if "reduction" in iterator_names(root_op):
        raise IreetuneError(f"root op '{root_op.name}' has a reduction loop")
    check_body_matchable(root_op)
    return parse_generic(root_op, ElementwiseProblem, f"element-wise op '{root_op.name}'")


class ElementwiseFamily(BodyMatchedFamily):
    """One-result generics of parallel loops only (a generic without results, on buffers, is
    recognised to be refused with its reason)."""

    name = "elementwise"
    record = ElementwiseProblem

    def recognises(self, root_op: ir.Operation) -> bool:
        return (
            root_op.name == "linalg.generic"
            and len(root_op.results) <= 1
            and "reduction" not in iterator_names(root_op)
        )

    def parse(self, root_op: ir.Operation) -> Problem:
        return parse_elementwise(root_op)

    def claims(self, pattern: MatchPattern) -> bool:
        return "reduction" not in pattern.body

    def describe(self, pattern: MatchPattern) -> str:
        *inputs, output = pattern.types
        sizes = pattern.sizes[0]
        work = [op for op in pattern.body if op != "parallel" and op not in NEUTRAL_BODY_OPS]
        return (
            f"element-wise {' x '.join(inputs)} -> {output}, loops={list(sizes or ())}, "
            f"body {', '.join(work) or 'a copy'}, maps {'; '.join(pattern.indexing_maps) or 'any'}"
        )
