"""The reduction family: `linalg.generic` ops with reduction loops that are neither contractions
nor convolutions (sums, means, maxima, and the reductions of a softmax or a normalisation).

A softmax reaches codegen as one dispatch of three ops (the row maximum, the sum of exponentials,
the normalisation); IREE marks the sum of exponentials as the root:

    %sum = linalg.generic {indexing_maps = [(d0, d1) -> (d0, d1), (d0, d1) -> (d0),
        (d0, d1) -> (d0)], iterator_types = ["parallel", "reduction"]}
        ins(%x, %max : tensor<32x1024xf32>, tensor<32xf32>) outs(%zeros : tensor<32xf32>) {
      ^bb0(%in: f32, %m: f32, %acc: f32):
        %e = math.exp(%in - %m)   (arith.subf, math.exp)
        linalg.yield %acc + %e    (arith.addf)
    } -> tensor<32xf32>

No match op of IREE's transform extensions describes a generic reduction by its sizes, so the
matcher is `transform.iree.match.cast_compatible_dag_from_root` holding a copy of the root op (its
shapes, maps, iterator types and body); the reader parses that copy back into a problem. A body
that reads a constant defined outside it (a CNN's global average pool summing a ReLU of its
input, which reads the ReLU's 0) gets a body matcher instead (`body_matcher.py`). The
reference program is the root op alone, its result initialised as the dispatch initialises it
(zero for a sum, -inf or NaN for a maximum), and read by a consumer that keeps IREE from
collapsing its parallel loops (see `_keep_parallel_loops`).
"""

from __future__ import annotations

from dataclasses import dataclass

from iree.compiler import ir
from iree.compiler.dialects import arith

from ireetune.core.errors import IreetuneError
from ireetune.problem.body_matcher import BodyMatchedFamily, check_body_matchable
from ireetune.problem.family import (
    MatchPattern,
    Problem,
    clone_as_main,
    map_dim_positions,
    map_elements,
    narrow,
)
from ireetune.problem.generic import (
    NEUTRAL_BODY_OPS,
    GenericOpProblem,
    iterator_names,
    parse_generic,
)

# The bodies of a contraction: multiply, then accumulate.
_CONTRACTION_BODIES = frozenset({("arith.mulf", "arith.addf"), ("arith.muli", "arith.addi")})


@dataclass(frozen=True)
class ReductionProblem(GenericOpProblem):
    """A generic reduction's loops, operands and body, and which loops it reduces."""

    KIND = "reduction"

    parallel_dims: tuple[int, ...]
    reduction_dims: tuple[int, ...]

    @property
    def iterator_types(self) -> tuple[str, ...]:
        return tuple(
            "parallel" if d in self.parallel_dims else "reduction"
            for d in range(len(self.loop_sizes))
        )

    @property
    def parallel_sizes(self) -> tuple[int, ...]:
        return tuple(self.loop_sizes[d] for d in self.parallel_dims)

    @property
    def reduction_sizes(self) -> tuple[int, ...]:
        return tuple(self.loop_sizes[d] for d in self.reduction_dims)

    @property
    def strided_contraction(self) -> bool:
        """Say whether the op is a contraction in all but a strided read of its first input.

        A ResNet's strided 1x1 convolution reads its image as `(d3, d1 * 2, d2 * 2)` and its
        filter and output with plain dimensions; its body multiplies and adds. IREE rewrites such
        an op into a strided slice and a contraction only when its image comes from outside the
        model (`iree-global-opt-convert-strided-contraction-to-contraction`), so inside a network
        it stays a reduction that codegen does not vectorise.
        """
        work = tuple(op for op in self.body if op not in NEUTRAL_BODY_OPS)
        if len(self.input_types) != 2 or work not in _CONTRACTION_BODIES:
            return False
        image, *others = (map_dim_positions(text) for text in self.indexing_maps)
        return -1 in image and all(
            -1 not in positions and len(set(positions)) == len(positions) for positions in others
        )

    @property
    def output_channel_loops(self) -> tuple[int, ...]:
        """Return the parallel loops (positions among them) that only the second input and the
        output index: a strided contraction's output channels, blocked like a matmul's N."""
        image, weights, output = (set(map_dim_positions(text)) for text in self.indexing_maps)
        return tuple(
            index
            for index, dim in enumerate(self.parallel_dims)
            if dim in weights and dim in output and dim not in image
        )

    @property
    def signature(self) -> str:
        """Name it by its loop sizes (parallel ones first) and element types."""
        sizes = "x".join(str(s) for s in (*self.parallel_sizes, *self.reduction_sizes))
        types = "_".join((*self.input_types, self.output_type))
        return f"reduction_{sizes}_{types}"


def parse_reduction(root_op: ir.Operation) -> ReductionProblem:
    """Parse a `linalg.generic` with one result and at least one reduction loop."""
    if root_op.name != "linalg.generic":
        raise IreetuneError(f"root op '{root_op.name}' is not a generic reduction")
    iterators = iterator_names(root_op)
    if "reduction" not in iterators:
        raise IreetuneError(f"root op '{root_op.name}' has no reduction loop")
    if len(root_op.results) != 1:
        raise IreetuneError(
            f"a reduction with {len(root_op.results)} results (an arg-max?) is not supported yet"
        )
    check_body_matchable(root_op)
    return parse_generic(
        root_op,
        ReductionProblem,
        f"reduction '{root_op.name}'",
        parallel_dims=tuple(i for i, kind in enumerate(iterators) if kind == "parallel"),
        reduction_dims=tuple(i for i, kind in enumerate(iterators) if kind == "reduction"),
    )


class ReductionFamily(BodyMatchedFamily):
    """Generic reductions that no other family claims."""

    name = "reduction"
    record = ReductionProblem

    def recognises(self, root_op: ir.Operation) -> bool:
        if root_op.name != "linalg.generic" or len(root_op.results) != 1:
            return False
        return "reduction" in iterator_names(root_op)

    def parse(self, root_op: ir.Operation) -> Problem:
        return parse_reduction(root_op)

    def build_reference(
        self, root_op: ir.Operation, problem: Problem, context: ir.Context
    ) -> ir.Module:
        """Clone the root op, its result initialised with the dispatch's own fill value.

        An input read with strides (`(d3, d1 * 2, d2 * 2)`: a ResNet's strided 1x1 convolution,
        its unit loops folded away) first passes through a ReLU. Read straight from an
        argument, global optimisation rewrites such an op into a strided load and a plain
        contraction, which the reduction matcher never sees; in a model its input comes from
        another dispatch and the op keeps its form (the real-weights ResNet-50's three hottest
        dispatches, 2026-11-23).
        """
        reduction = narrow(problem, ReductionProblem)
        strided = frozenset(
            index
            for index, text in enumerate(reduction.indexing_maps[:-1])
            if -1 in map_dim_positions(text)
        )
        module = clone_as_main(
            root_op, context, init_value=_fill_value(root_op), produced_inputs=strided
        )
        if not strided and len(reduction.parallel_dims) > 1:
            _keep_parallel_loops(module, context)
        return module

    def claims(self, pattern: MatchPattern) -> bool:
        return "reduction" in pattern.body

    def describe(self, pattern: MatchPattern) -> str:
        *inputs, output = pattern.types
        sizes = pattern.sizes[0]
        iterators = [kind for kind in pattern.body if kind in ("parallel", "reduction")]
        work = [op for op in pattern.body[len(iterators) :] if op not in NEUTRAL_BODY_OPS]
        # A body matcher checks no maps (`body_matcher.py`).
        maps = "; ".join(pattern.indexing_maps) or "any"
        return (
            f"reduction {' x '.join(inputs)} -> {output}, loops={list(sizes or ())} "
            f"[{', '.join(iterators)}], body {', '.join(work)}, maps {maps}"
        )


def _keep_parallel_loops(module: ir.Module, context: ir.Context) -> None:
    """Negate `@main`'s result into a tensor of reversed dims, so the root keeps its loops.

    Alone in its dispatch, a reduction over a 12x128x128 softmax's rows is collapsed by IREE's
    dispatch creation into a 1536x128 one, which the spec's 12x128x128 matcher never matches:
    every candidate compiled to the default's binary. In the model the same op reads the row
    maximum of its own dispatch, which IREE never collapses (its #17948). A consumer in the same
    dispatch that reads the result with reversed dims has no loops to collapse, and IREE only
    collapses what the whole dispatch can; the negation keeps the consumer from folding into the
    root's output map, and costs one pass over the (small) reduced result.
    """
    with context, ir.Location.unknown():
        function = module.body.operations[0]
        block = function.regions[0].blocks[0]
        return_op = block.operations[len(block.operations) - 1]
        rank = ir.RankedTensorType(return_op.operands[0].type).rank
        reversed_dims = ir.AffineMap.get(
            rank, 0, [ir.AffineDimExpr.get(dim) for dim in reversed(range(rank))]
        )
        with ir.InsertionPoint(return_op):
            consumer = map_elements(return_op.operands[0], reversed_dims, _negated)
        return_op.operands[0] = consumer
        inputs = ir.FunctionType(ir.TypeAttr(function.attributes["function_type"]).value).inputs
        function.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get(inputs, [consumer.type])
        )
        assert module.operation.verify(), "reference module does not verify"


def _negated(element: ir.Value) -> ir.Value:
    element_type = element.type
    if isinstance(element_type, ir.IntegerType):
        zero = arith.ConstantOp(element_type, ir.IntegerAttr.get(element_type, 0))
        return arith.SubIOp(zero.result, element).result
    return arith.NegFOp(element).result


def _fill_value(root_op: ir.Operation) -> ir.Attribute | None:
    """Return the constant the dispatch fills the root op's result with, if it does."""
    init = root_op.operands[len(root_op.operands) - 1]
    owner = init.owner
    operation = getattr(owner, "operation", None)
    if operation is None or operation.name != "linalg.fill":
        return None
    value_owner = getattr(operation.operands[0].owner, "operation", None)
    if value_owner is None or value_owner.name != "arith.constant":
        return None
    return value_owner.attributes["value"]
