"""Operations the profiler generates: what is computed, on which shapes and element types.

An operation is the functional description of a dispatch (seeds/003): a matmul in one of four
operand layouts, a batch matmul, a 2-D convolution, or a matmul fused with a bias and a ReLU. A
*dispatch* is an operation plus a configuration (see `configs.py`). Everything here is pure data:
no IR, no compiler, so the records also describe a sweep on a machine that only runs binaries.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Annotated

from pydantic import Field

from ireetune.core.errors import IreetuneError


class OperationKind(enum.Enum):
    MATMUL = "matmul"
    BATCH_MATMUL = "batch_matmul"
    CONV2D = "conv2d"
    MATMUL_BIAS_RELU = "matmul_bias_relu"


class ElementType(enum.Enum):
    F32 = "f32"
    F16 = "f16"
    BF16 = "bf16"
    I8 = "i8"
    I32 = "i32"

    @property
    def is_integer(self) -> bool:
        return self.value.startswith("i")

    @property
    def bytes(self) -> int:
        return {"f32": 4, "f16": 2, "bf16": 2, "i8": 1, "i32": 4}[self.value]


class MatmulLayout(enum.Enum):
    """Operand layouts, BLAS style: `n` stores an operand as in the product, `t` transposed.

    nn: A is MxK, B is KxN (`matmul`); nt: B is NxK (`mmt`); tn: A is KxM; tt: both transposed.
    """

    NN = "nn"
    NT = "nt"
    TN = "tn"
    TT = "tt"

    @property
    def lhs_transposed(self) -> bool:
        return self.value[0] == "t"

    @property
    def rhs_transposed(self) -> bool:
        return self.value[1] == "t"

    @property
    def family_name(self) -> str:
        """Name the layout as IREE's contraction kinds do (matmul, mmt, mtm, mtmt)."""
        return {"nn": "matmul", "nt": "mmt", "tn": "mtm", "tt": "mtmt"}[self.value]


class ConvLayout(enum.Enum):
    NHWC_HWCF = "nhwc_hwcf"
    NCHW_FCHW = "nchw_fchw"


# The accumulator (result) type used when none is asked for: wide enough not to lose precision.
DEFAULT_ACCUMULATOR = {
    ElementType.F32: ElementType.F32,
    ElementType.F16: ElementType.F32,
    ElementType.BF16: ElementType.F32,
    ElementType.I8: ElementType.I32,
}
# Accumulator types that make sense for each input type.
ALLOWED_ACCUMULATORS = {
    ElementType.F32: (ElementType.F32,),
    ElementType.F16: (ElementType.F16, ElementType.F32),
    ElementType.BF16: (ElementType.BF16, ElementType.F32),
    ElementType.I8: (ElementType.I32,),
}


def parse_element_type(text: str) -> ElementType:
    """Turn `f16` into ElementType.F16, or raise a one-line error listing the choices."""
    try:
        return ElementType(text.strip().lower())
    except ValueError:
        choices = ", ".join(t.value for t in ElementType)
        raise IreetuneError(f"unknown element type '{text}'; choose from {choices}") from None


# One size of an operation. The bounds are declared here, on the records, so the manifest's reader
# (manifest.py) checks a stored operation against these same records: at least 1, and small
# enough for the runtime's 32-bit sizes.
MAX_DIMENSION = 2**31 - 1
Dimension = Annotated[int, Field(ge=1, le=MAX_DIMENSION)]


def _tag(element_type: ElementType) -> str:
    # The `t` suffix follows seeds/003's names (`f16t`: an f16 tensor).
    return f"{element_type.value}t"


@dataclass(frozen=True)
class MatmulOperation:
    """C[b, m, n] = sum_k A[b, m, k] * B[b, k, n], optionally followed by `+ bias[n]` and ReLU.

    `batch` is None for a plain (unbatched) matmul. Operands are stored as `layout` says.
    """

    kind: OperationKind
    m: Dimension
    n: Dimension
    k: Dimension
    input_type: ElementType
    accumulator_type: ElementType
    layout: MatmulLayout = MatmulLayout.NN
    batch: Dimension | None = None

    def __post_init__(self) -> None:
        assert self.kind is not OperationKind.CONV2D
        # A ValueError, not an assert: the manifest's reader validates stored operations into
        # this record, and pydantic reports a ValueError as the file's one-line error.
        if (self.batch is not None) != (self.kind is OperationKind.BATCH_MATMUL):
            raise ValueError("must give batch for batch_matmul, and only for it")

    @property
    def name(self) -> str:
        """Name the operation: `matmul_3456x1024x2048_f16t_f16t_f32t`, `mmt_...`, `batch_mmt_...`."""
        family = self.layout.family_name
        if self.kind is OperationKind.BATCH_MATMUL:
            family = f"batch_{family}"
        elif self.kind is OperationKind.MATMUL_BIAS_RELU:
            family = f"{family}_bias_relu"
        sizes = (
            [self.m, self.n, self.k] if self.batch is None else [self.batch, self.m, self.n, self.k]
        )
        types = (self.input_type, self.input_type, self.accumulator_type)
        return f"{family}_{'x'.join(map(str, sizes))}_" + "_".join(_tag(t) for t in types)

    @property
    def batch_count(self) -> int:
        return self.batch or 1

    @property
    def lhs_shape(self) -> tuple[int, ...]:
        shape = (self.k, self.m) if self.layout.lhs_transposed else (self.m, self.k)
        return shape if self.batch is None else (self.batch, *shape)

    @property
    def rhs_shape(self) -> tuple[int, ...]:
        shape = (self.n, self.k) if self.layout.rhs_transposed else (self.k, self.n)
        return shape if self.batch is None else (self.batch, *shape)

    @property
    def output_shape(self) -> tuple[int, ...]:
        return (self.m, self.n) if self.batch is None else (self.batch, self.m, self.n)

    @property
    def input_shapes(self) -> tuple[tuple[int, ...], ...]:
        if self.kind is OperationKind.MATMUL_BIAS_RELU:
            return (self.lhs_shape, self.rhs_shape, (self.n,))
        return (self.lhs_shape, self.rhs_shape)

    @property
    def input_types(self) -> tuple[ElementType, ...]:
        if self.kind is OperationKind.MATMUL_BIAS_RELU:
            return (self.input_type, self.input_type, self.accumulator_type)
        return (self.input_type, self.input_type)

    @property
    def reduction_size(self) -> int:
        return self.k

    @property
    def flops(self) -> int:
        """Count a multiply-add as two operations (plus bias and ReLU for the fused op)."""
        count = 2 * self.batch_count * self.m * self.n * self.k
        if self.kind is OperationKind.MATMUL_BIAS_RELU:
            count += 2 * self.m * self.n
        return count

    @property
    def arguments(self) -> str:
        """Describe the problem as seeds/003's `Arguments` line does."""
        tags = [_tag(t) for t in (self.input_type, self.input_type, self.accumulator_type)]
        return (
            f"--batch_count={self.batch_count} --m={self.m} --n={self.n} --k={self.k} "
            f"--lhs={tags[0]} --rhs={tags[1]} --result={tags[2]} --layout={self.layout.value}"
            + (" --epilogue=bias,relu" if self.kind is OperationKind.MATMUL_BIAS_RELU else "")
        )


@dataclass(frozen=True)
class ConvOperation:
    """A 2-D convolution of `batch` images (height x width x channels) with `filters` filters."""

    batch: Dimension
    height: Dimension
    width: Dimension
    channels: Dimension
    filters: Dimension
    kernel_h: Dimension
    kernel_w: Dimension
    stride: Dimension
    dilation: Dimension
    input_type: ElementType
    accumulator_type: ElementType
    layout: ConvLayout = ConvLayout.NHWC_HWCF

    @property
    def kind(self) -> OperationKind:
        return OperationKind.CONV2D

    @property
    def output_height(self) -> int:
        return (self.height - self.dilation * (self.kernel_h - 1) - 1) // self.stride + 1

    @property
    def output_width(self) -> int:
        return (self.width - self.dilation * (self.kernel_w - 1) - 1) // self.stride + 1

    @property
    def name(self) -> str:
        """Name the convolution: `conv2d_nhwc_hwcf_1x56x56x64_3x3x64_s1_d1_f32t_f32t_f32t`."""
        image = f"{self.batch}x{self.height}x{self.width}x{self.channels}"
        filter_shape = f"{self.kernel_h}x{self.kernel_w}x{self.filters}"
        types = (self.input_type, self.input_type, self.accumulator_type)
        return (
            f"conv2d_{self.layout.value}_{image}_{filter_shape}_s{self.stride}_d{self.dilation}_"
            + "_".join(_tag(t) for t in types)
        )

    @property
    def image_shape(self) -> tuple[int, ...]:
        if self.layout is ConvLayout.NHWC_HWCF:
            return (self.batch, self.height, self.width, self.channels)
        return (self.batch, self.channels, self.height, self.width)

    @property
    def filter_shape(self) -> tuple[int, ...]:
        if self.layout is ConvLayout.NHWC_HWCF:
            return (self.kernel_h, self.kernel_w, self.channels, self.filters)
        return (self.filters, self.channels, self.kernel_h, self.kernel_w)

    @property
    def output_shape(self) -> tuple[int, ...]:
        if self.layout is ConvLayout.NHWC_HWCF:
            return (self.batch, self.output_height, self.output_width, self.filters)
        return (self.batch, self.filters, self.output_height, self.output_width)

    @property
    def input_shapes(self) -> tuple[tuple[int, ...], ...]:
        return (self.image_shape, self.filter_shape)

    @property
    def input_types(self) -> tuple[ElementType, ...]:
        return (self.input_type, self.input_type)

    @property
    def reduction_size(self) -> int:
        return self.channels * self.kernel_h * self.kernel_w

    @property
    def flops(self) -> int:
        return 2 * math.prod(self.output_shape) * self.reduction_size

    @property
    def arguments(self) -> str:
        tags = [_tag(t) for t in (self.input_type, self.input_type, self.accumulator_type)]
        return (
            f"--n={self.batch} --h={self.height} --w={self.width} --c={self.channels} "
            f"--f={self.filters} --kh={self.kernel_h} --kw={self.kernel_w} "
            f"--stride={self.stride} --dilation={self.dilation} --input={tags[0]} "
            f"--filter={tags[1]} --result={tags[2]} --layout={self.layout.value}"
        )


Operation = MatmulOperation | ConvOperation


def compute_bytes_moved(operation: Operation) -> int:
    """Return the least memory traffic of the operation: every input read and output written once."""
    total = math.prod(operation.output_shape) * operation.accumulator_type.bytes
    for shape, element_type in zip(operation.input_shapes, operation.input_types, strict=True):
        total += math.prod(shape) * element_type.bytes
    return total


def check_operation(operation: Operation) -> None:
    """Raise a one-line error for an operation no dispatch can compute."""
    allowed = ALLOWED_ACCUMULATORS.get(operation.input_type, ())
    if operation.accumulator_type not in allowed:
        raise IreetuneError(
            f"{operation.name}: accumulator {operation.accumulator_type.value} does not suit "
            f"{operation.input_type.value} inputs (use {', '.join(t.value for t in allowed)})"
        )
    if isinstance(operation, ConvOperation):
        sizes = (
            operation.batch,
            operation.height,
            operation.width,
            operation.channels,
            operation.filters,
            operation.kernel_h,
            operation.kernel_w,
            operation.stride,
            operation.dilation,
        )
        if min(sizes) < 1:
            raise IreetuneError(f"{operation.name}: every convolution size must be at least 1")
        if operation.output_height < 1 or operation.output_width < 1:
            raise IreetuneError(
                f"{operation.name}: the dilated {operation.kernel_h}x{operation.kernel_w} kernel "
                f"does not fit the {operation.height}x{operation.width} image"
            )
    elif min(operation.m, operation.n, operation.k, operation.batch_count) < 1:
        raise IreetuneError(f"{operation.name}: every matmul size must be at least 1")
