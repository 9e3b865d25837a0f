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
the matcher is a `cast_compatible_dag_from_root` holding a copy of the op (the reduction family's
helpers build and read it; the two are told apart by their iterator types). The reference
program is the op alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from iree.compiler import ir

from ireetune.errors import IreetuneError
from ireetune.problem.family import (
    MatchPattern,
    OpFamily,
    Problem,
    ReferenceInputs,
    bind_loop_sizes,
    captured_values,
    element_type_name,
    static_shape,
)
from ireetune.problem.op_kind import name_root_op
from ireetune.problem.reduction import (
    DAG_MATCH,
    REDUCTION_MATCH,
    build_dag_matcher,
    dag_root,
    dag_source,
)

# Body ops that move values around rather than compute.
_NEUTRAL_BODY_OPS = frozenset({"linalg.yield", "linalg.index"})


@dataclass(frozen=True)
class ElementwiseProblem:
    """An element-wise generic's loops, operands and body."""

    KIND: ClassVar[str] = "elementwise"
    reference_carries_config: ClassVar[bool] = True

    kind: str
    op_name: str
    loop_sizes: tuple[int, ...]
    input_types: tuple[str, ...]
    input_shapes: tuple[tuple[int, ...], ...]
    output_type: str
    output_shape: tuple[int, ...]
    indexing_maps: tuple[str, ...]
    body: tuple[str, ...]
    # The op alone, its operands the arguments of a function (what the matcher copies).
    source: str

    @property
    def family(self) -> str:
        return "elementwise"

    @property
    def moves_only(self) -> bool:
        """Say whether the body only yields an input (a copy, transpose or broadcast)."""
        return all(op in _NEUTRAL_BODY_OPS for op in self.body)

    @property
    def flops(self) -> int:
        """Count one operation per body op and element."""
        work = [op for op in self.body if op not in _NEUTRAL_BODY_OPS]
        return math.prod(self.loop_sizes) * max(1, len(work))

    @property
    def signature(self) -> str:
        """Name it by its loop sizes and element types."""
        sizes = "x".join(str(s) for s in self.loop_sizes)
        types = "_".join((*self.input_types, self.output_type))
        return f"elementwise_{sizes}_{types}"


def _iterators(root_op: ir.Operation) -> list[str]:
    return [
        "reduction" if "reduction" in str(a) else "parallel"
        for a in ir.ArrayAttr(root_op.attributes["iterator_types"])
    ]


def parse_elementwise(root_op: ir.Operation) -> ElementwiseProblem:
    """Parse a `linalg.generic` with one result and parallel loops only."""
    if root_op.name != "linalg.generic" or len(root_op.results) != 1:
        raise IreetuneError(f"root op '{root_op.name}' is not a one-result generic")
    if "reduction" in _iterators(root_op):
        raise IreetuneError(f"root op '{root_op.name}' has a reduction loop")
    captured = len(captured_values(root_op))
    if captured:
        # IREE 3.13's DAG matcher maps only the results of the ops it walks (the root's operand
        # producers); a body value defined above the op is never mapped, so the body never
        # compares equal and no spec would reach the op (a ReLU's 0 kept every candidate the
        # default's binary).
        raise IreetuneError(
            f"{name_root_op(root_op)} is not tunable: its body reads {captured} value"
            f"{'' if captured == 1 else 's'} from outside it (a constant: a ReLU's 0, say), "
            "which IREE 3.13's DAG matcher (cast_compatible_dag_from_root) never matches, so no "
            "spec would reach it"
        )
    operands = list(root_op.operands)
    maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(root_op.attributes["indexing_maps"])]
    shapes = [static_shape(operand.type, f"operand {i}") for i, operand in enumerate(operands)]
    loop_sizes = bind_loop_sizes(maps, shapes, f"element-wise op '{root_op.name}'")
    block = root_op.regions[0].blocks[0]
    return ElementwiseProblem(
        kind=ElementwiseProblem.KIND,
        op_name=root_op.name,
        loop_sizes=loop_sizes,
        input_types=tuple(element_type_name(operand.type) for operand in operands[:-1]),
        input_shapes=tuple(shapes[:-1]),
        output_type=element_type_name(operands[-1].type),
        output_shape=shapes[-1],
        indexing_maps=tuple(str(m) for m in maps),
        body=tuple(op.operation.name for op in block.operations),
        source=dag_source(root_op),
    )


def as_elementwise(problem: Problem) -> ElementwiseProblem:
    """Narrow a problem its family says is element-wise (an invariant, not a user error)."""
    assert isinstance(problem, ElementwiseProblem), f"{problem.signature} is not element-wise"
    return problem


def _tensor_type(shape: tuple[int, ...], element: str) -> str:
    return "tensor<" + "x".join(str(s) for s in (*shape, element)) + ">"


class ElementwiseFamily(OpFamily):
    """One-result generics of parallel loops only."""

    name = "elementwise"
    match_op = REDUCTION_MATCH

    def recognises(self, root_op: ir.Operation) -> bool:
        return (
            root_op.name == "linalg.generic"
            and len(root_op.results) == 1
            and "reduction" not in _iterators(root_op)
        )

    def parse(self, root_op: ir.Operation) -> Problem:
        return parse_elementwise(root_op)

    def expected_pattern(self, problem: Problem) -> MatchPattern:
        elementwise = as_elementwise(problem)
        return MatchPattern(
            DAG_MATCH,
            tuple(
                _tensor_type(shape, element)
                for shape, element in zip(
                    (*elementwise.input_shapes, elementwise.output_shape),
                    (*elementwise.input_types, elementwise.output_type),
                    strict=True,
                )
            ),
            elementwise.indexing_maps,
            (elementwise.loop_sizes,),
            ("parallel",) * len(elementwise.loop_sizes) + elementwise.body,
        )

    def reference_inputs(self, problem: Problem) -> ReferenceInputs:
        elementwise = as_elementwise(problem)
        return ReferenceInputs(
            elementwise.input_shapes, elementwise.input_types, elementwise.output_type, 1
        )

    def build_matcher(self, problem: Problem, op_handle: ir.Value) -> None:
        """Emit a DAG matcher holding a copy of the problem's op."""
        build_dag_matcher(as_elementwise(problem).source, op_handle)

    def claims(self, pattern: MatchPattern) -> bool:
        return "reduction" not in pattern.body

    def read_pattern(self, match_op: ir.Operation, body: list[ir.Operation]) -> MatchPattern | None:
        """Parse the op inside a DAG matcher; None when it is no static element-wise generic."""
        root = dag_root(match_op)
        if root is None:
            return None
        try:
            problem = parse_elementwise(root)
        except IreetuneError:
            return None
        return self.expected_pattern(problem)

    def describe(self, pattern: MatchPattern) -> str:
        *inputs, output = pattern.types
        sizes = pattern.sizes[0]
        work = [op for op in pattern.body if op != "parallel" and op not in _NEUTRAL_BODY_OPS]
        return (
            f"element-wise {' x '.join(inputs)} -> {output}, loops={list(sizes or ())}, "
            f"body {', '.join(work) or 'a copy'}, maps {'; '.join(pattern.indexing_maps)}"
        )
