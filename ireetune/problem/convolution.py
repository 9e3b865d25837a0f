"""Parse a convolution root op (named conv ops and their `linalg.generic` forms) into a record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from iree.compiler import ir
from iree.compiler.dialects import linalg

from ireetune.errors import IreetuneError
from ireetune.problem.contraction import (
    _element_type_name,
    _result_positions,
    _static_shape,
)


@dataclass(frozen=True)
class ConvolutionProblem:
    """A convolution's loops by role, its shapes and its element types.

    Loop dimensions are numbered as in the op's indexing maps, as for contractions. Seen as a
    matrix multiplication (im2col), M spans batch and output image, N the output channels and K
    the filter window and input channels: `m_dims`, `n_dims` and `k_dims` say so.
    """

    # In IREE 3.13 the reference program of a convolution often does not take the spec's config
    # (its dispatch is formed differently), so its search is timed on the dispatch benchmark.
    reference_carries_config: ClassVar[bool] = False

    op_name: str
    loop_sizes: tuple[int, ...]
    batch_dims: tuple[int, ...]
    output_image_dims: tuple[int, ...]
    output_channel_dims: tuple[int, ...]
    filter_dims: tuple[int, ...]
    input_channel_dims: tuple[int, ...]
    depth_dims: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    lhs_type: str
    rhs_type: str
    output_type: str
    indexing_maps: tuple[str, str, str]
    lhs_shape: tuple[int, ...]
    rhs_shape: tuple[int, ...]
    output_shape: tuple[int, ...]

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
    def m_sizes(self) -> tuple[int, ...]:
        return tuple(self.loop_sizes[d] for d in self.m_dims)

    @property
    def n_sizes(self) -> tuple[int, ...]:
        return tuple(self.loop_sizes[d] for d in self.n_dims)

    @property
    def k_sizes(self) -> tuple[int, ...]:
        return tuple(self.loop_sizes[d] for d in self.k_dims)

    @property
    def flops(self) -> int:
        """Count multiply and add as two operations."""
        count = 2
        for size in self.loop_sizes:
            count *= size
        return count

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
        _static_shape(operand.type, name)
        for operand, name in zip(operands, ("image", "filter", "output"), strict=True)
    ]
    loop_sizes = [0] * affine_maps[0].n_dims
    # The filter and output maps index plain loops; the image map mixes output image and filter
    # loops (`d1 + d4`), so it binds no size on its own.
    for affine_map, shape in zip(affine_maps[1:], shapes[1:], strict=True):
        for position, extent in zip(_result_positions(affine_map), shape, strict=True):
            if position >= 0:
                loop_sizes[position] = extent
    for position, extent in zip(_result_positions(affine_maps[0]), shapes[0], strict=True):
        if position >= 0 and loop_sizes[position] == 0:
            loop_sizes[position] = extent
    if any(size == 0 for size in loop_sizes):
        raise IreetuneError(f"cannot bind every loop of convolution '{root_op.name}' to a size")
    return ConvolutionProblem(
        op_name=root_op.name,
        loop_sizes=tuple(loop_sizes),
        batch_dims=tuple(dimensions.batch),
        output_image_dims=tuple(dimensions.output_image),
        output_channel_dims=tuple(dimensions.output_channel),
        filter_dims=tuple(dimensions.filter_loop),
        input_channel_dims=tuple(dimensions.input_channel),
        depth_dims=tuple(dimensions.depth),
        strides=tuple(int(s) for s in dimensions.strides),
        dilations=tuple(int(d) for d in dimensions.dilations),
        lhs_type=_element_type_name(operands[0].type),
        rhs_type=_element_type_name(operands[1].type),
        output_type=_element_type_name(operands[2].type),
        indexing_maps=tuple(str(m) for m in affine_maps),  # type: ignore[arg-type]
        lhs_shape=shapes[0],
        rhs_shape=shapes[1],
        output_shape=shapes[2],
    )
