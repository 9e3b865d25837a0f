"""The convolution family: named convolution ops and their `linalg.generic` forms.

Its matcher is `transform.iree.match.convolution` with the element types, the indexing maps and a
`dims_equal` for each of its eight results: the batch, output image, output channel, filter,
input channel and depth sizes, the strides and the dilations.
"""

from __future__ import annotations

from dataclasses import dataclass

from iree.compiler import ir
from iree.compiler.dialects import linalg

from ireetune.core.errors import IreetuneError
from ireetune.problem.family import MatchOpSpec, MatchPattern, bind_loop_sizes, static_shape
from ireetune.problem.matmul import MatmulFamily, MatmulProblem, build_matmul_problem

# How a space's refusal of a grouped convolution (group loops and input channels) begins; the
# model flow's notes look for it.
GROUPED_CONVOLUTION = "a grouped convolution"

CONVOLUTION_MATCH = MatchOpSpec(
    "transform.iree.match.convolution",
    ("lhs_type", "rhs_type", "output_type"),
    (
        "batch",
        "output_image",
        "output_channel",
        "filter",
        "input_channel",
        "depth",
        "strides",
        "dilations",
    ),
)


@dataclass(frozen=True)
class ConvolutionProblem(MatmulProblem):
    """A convolution's loops by role, its shapes and its element types.

    Seen as a matrix multiplication (im2col), M spans batch and output image, N the output
    channels and K the filter window and input channels: `m_dims`, `n_dims` and `k_dims` say so.
    The reference program takes the spec's config as for contractions: its unit batch is folded
    away as in a model, and the llvm-cpu spec prologue restores it before matching
    (`Target.spec_prologue`), so convolutions are searched on real inputs like contractions.
    """

    output_image_dims: tuple[int, ...]
    output_channel_dims: tuple[int, ...]
    filter_dims: tuple[int, ...]
    input_channel_dims: tuple[int, ...]
    depth_dims: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]

    @property
    def m_dims(self) -> tuple[int, ...]:
        return (*self.batch_dims, *self.output_image_dims)

    @property
    def n_dims(self) -> tuple[int, ...]:
        return (*self.depth_dims, *self.output_channel_dims)

    @property
    def k_dims(self) -> tuple[int, ...]:
        return (*self.filter_dims, *self.input_channel_dims)

    @property
    def family(self) -> str:
        return "convolution"

    @property
    def kind(self) -> str:
        return "conv"

    @property
    def signature(self) -> str:
        """Name it by loop sizes in loop order, strides and dilations when not 1, and types."""
        sizes = "x".join(str(s) for s in self.loop_sizes)
        extras = ""
        if any(s != 1 for s in self.strides):
            extras += "_s" + "x".join(str(s) for s in self.strides)
        if any(d != 1 for d in self.dilations):
            extras += "_d" + "x".join(str(d) for d in self.dilations)
        return f"conv_{sizes}{extras}_{self.lhs_type}_{self.rhs_type}_{self.output_type}"


def parse_convolution(root_op: ir.Operation) -> ConvolutionProblem:
    """Parse a convolution with one input image, one filter and one output, all static."""
    dimensions = linalg.infer_convolution_dimensions(root_op)
    if dimensions is None:
        raise IreetuneError(
            f"root op '{root_op.name}' is not a convolution the bindings understand"
        )
    operands = list(root_op.operands)
    if len(operands) != 3:
        raise IreetuneError(
            f"root op '{root_op.name}' has {len(operands)} operands; a convolution with an image, "
            "a filter and one output is supported"
        )
    affine_maps = [ir.AffineMapAttr(attr).value for attr in root_op.attributes["indexing_maps"]]
    shapes = [
        static_shape(operand.type, name)
        for operand, name in zip(operands, ("image", "filter", "output"), strict=True)
    ]
    # The filter and output maps index plain loops; the image map mixes output image and filter
    # loops (`d1 + d4`), so it binds only what they leave unbound.
    loop_sizes = bind_loop_sizes(
        [*affine_maps[1:], affine_maps[0]],
        [*shapes[1:], shapes[0]],
        f"convolution '{root_op.name}'",
    )
    roles = {
        "batch_dims": tuple(dimensions.batch),
        "output_image_dims": tuple(dimensions.output_image),
        "output_channel_dims": tuple(dimensions.output_channel),
        "filter_dims": tuple(dimensions.filter_loop),
        "input_channel_dims": tuple(dimensions.input_channel),
        "depth_dims": tuple(dimensions.depth),
        "strides": tuple(int(s) for s in dimensions.strides),
        "dilations": tuple(int(d) for d in dimensions.dilations),
    }
    return build_matmul_problem(ConvolutionProblem, root_op, affine_maps, shapes, loop_sizes, roles)


def convolution_pattern(problem: ConvolutionProblem) -> MatchPattern:
    """Return the pattern of a convolution matcher: types, maps, every group's sizes, strides
    and dilations."""

    def sizes(dims: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(problem.loop_sizes[d] for d in dims)

    return MatchPattern(
        CONVOLUTION_MATCH.name,
        (problem.lhs_type, problem.rhs_type, problem.output_type),
        problem.indexing_maps,
        (
            sizes(problem.batch_dims), sizes(problem.output_image_dims),
            sizes(problem.output_channel_dims), sizes(problem.filter_dims),
            sizes(problem.input_channel_dims), sizes(problem.depth_dims),
            problem.strides, problem.dilations,
        ),
    )  # fmt: skip


# Convolutions with one image, one filter and one output.
CONVOLUTION_FAMILY = MatmulFamily(
    "convolution",
    CONVOLUTION_MATCH,
    ConvolutionProblem,
    lambda root_op: bool(linalg.isa_convolution_op(root_op)),
    parse_convolution,
    convolution_pattern,
)
