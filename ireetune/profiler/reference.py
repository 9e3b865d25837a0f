"""NumPy references for the profiler's operations and the dtype-aware check of an output.

References are computed exactly in float64 (int64 for integer types) from the very inputs the
dispatch saw, then rounded to the result type; the only error left to tolerate is the dispatch's
own accumulation. Large problems are checked on a random sample of output elements, each
computed directly, so verification costs the sample's size times the reduction, not the product.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ireetune.profiler.operations import (
    ConvLayout,
    ConvOperation,
    ElementType,
    MatmulOperation,
    Operation,
    OperationKind,
)
from ireetune.profiler.options import DEFAULT_SAMPLES
from ireetune.verify.compare import numpy_dtype

Array = npt.NDArray[np.generic]
# Exact values (float64 or int64) computed from the inputs.
Exact = npt.NDArray[Any]
Indices = npt.NDArray[np.intp]
# Above this many multiply-adds the reference is computed on sampled output elements only.
FULL_REFERENCE_MACS = 1 << 24

_EPSILON = {
    ElementType.F32: 2.0**-23,
    ElementType.F16: 2.0**-10,
    ElementType.BF16: 2.0**-7,
}


def _exact(array: Array, element_type: ElementType) -> Exact:
    if element_type.is_integer:
        return np.asarray(array).astype(np.int64)
    return np.asarray(array).astype(np.float64)


def _matmul_operands(operation: MatmulOperation, inputs: Sequence[Array]) -> tuple[Exact, Exact]:
    """Return A as (batch, M, K) and B as (batch, K, N) views, whatever the stored layout."""
    lhs = _exact(inputs[0], operation.input_type)
    rhs = _exact(inputs[1], operation.input_type)
    if operation.batch is None:
        lhs, rhs = lhs[None], rhs[None]
    if operation.layout.lhs_transposed:
        lhs = lhs.transpose(0, 2, 1)
    if operation.layout.rhs_transposed:
        rhs = rhs.transpose(0, 2, 1)
    return lhs, rhs


def _conv_operands(operation: ConvOperation, inputs: Sequence[Array]) -> tuple[Exact, Exact]:
    """Return the image as NHWC and the filter as HWCF, whatever the stored layout."""
    image = _exact(inputs[0], operation.input_type)
    weights = _exact(inputs[1], operation.input_type)
    if operation.layout is ConvLayout.NCHW_FCHW:
        image = image.transpose(0, 2, 3, 1)
        weights = weights.transpose(2, 3, 1, 0)
    return image, weights


def compute_reference(operation: Operation, inputs: Sequence[Array]) -> Exact:
    """Compute the whole exact result (float64 or int64) in the operation's output layout."""
    if isinstance(operation, ConvOperation):
        image, weights = _conv_operands(operation, inputs)
        stride, dilation = operation.stride, operation.dilation
        out_h, out_w = operation.output_height, operation.output_width
        result = np.zeros((operation.batch, out_h, out_w, operation.filters), dtype=image.dtype)
        for kh in range(operation.kernel_h):
            for kw in range(operation.kernel_w):
                rows = slice(kh * dilation, kh * dilation + stride * (out_h - 1) + 1, stride)
                cols = slice(kw * dilation, kw * dilation + stride * (out_w - 1) + 1, stride)
                result += image[:, rows, cols, :] @ weights[kh, kw]
        if operation.layout is ConvLayout.NCHW_FCHW:
            result = result.transpose(0, 3, 1, 2)
        return result
    lhs, rhs = _matmul_operands(operation, inputs)
    product = np.matmul(lhs, rhs)
    if operation.kind is OperationKind.MATMUL_BIAS_RELU:
        product = np.maximum(product + _exact(inputs[2], operation.accumulator_type), 0)
    return product if operation.batch is not None else product[0]


def compute_reference_at(
    operation: Operation, inputs: Sequence[Array], flat_indices: Indices
) -> Exact:
    """Compute the exact result only at the given flat indices of the output."""
    positions = np.unravel_index(flat_indices, operation.output_shape)
    if isinstance(operation, ConvOperation):
        image, weights = _conv_operands(operation, inputs)
        if operation.layout is ConvLayout.NHWC_HWCF:
            n, oh, ow, f = positions
        else:
            n, f, oh, ow = positions
        kh = np.arange(operation.kernel_h) * operation.dilation
        kw = np.arange(operation.kernel_w) * operation.dilation
        rows = (oh * operation.stride)[:, None, None] + kh[None, :, None]
        cols = (ow * operation.stride)[:, None, None] + kw[None, None, :]
        patches = image[n[:, None, None], rows, cols, :]  # samples x KH x KW x C
        filters = np.moveaxis(weights[..., f], -1, 0)  # samples x KH x KW x C
        return np.asarray((patches * filters).sum(axis=(1, 2, 3)))
    lhs, rhs = _matmul_operands(operation, inputs)
    if operation.batch is None:
        batch = np.zeros_like(positions[0])
        rows, columns = positions
    else:
        batch, rows, columns = positions
    values = np.einsum("sk,sk->s", lhs[batch, rows, :], rhs[batch, :, columns])
    if operation.kind is OperationKind.MATMUL_BIAS_RELU:
        values = np.maximum(values + _exact(inputs[2], operation.accumulator_type)[columns], 0)
    return np.asarray(values)


def compute_tolerance(operation: Operation) -> tuple[float, float]:
    """Return (rtol, atol) for comparing the dispatch's result with the exact reference.

    Integers must match exactly. For floats the result is rounded once to its type (rtol of two
    units in the last place), and summing K products of standard-normal inputs in the
    accumulator type loses at most a few accumulator round-offs per partial sum: partial sums
    grow like sqrt(i), so the error stays near epsilon * K in absolute terms. GPU matrix units
    accumulate in f32 without IEEE rounding inside one instruction (seen on an H100: 11 of 4096
    sampled elements of a K=4096 f16 matmul off by 1.0e-3, against a bound of 2 * epsilon * K =
    9.9e-4, for the default configuration too), so the bound carries a margin of 8.
    """
    output_type = operation.accumulator_type
    if output_type.is_integer:
        return 0.0, 0.0
    epsilon = _EPSILON[output_type]
    reduction = max(1, operation.reduction_size)
    return 2 * epsilon, 8 * epsilon * reduction + 2 * epsilon * math.sqrt(reduction)


class VerificationStatus(enum.Enum):
    SUCCESS = "SUCCESS"
    FAILED = "FAILED"
    NOT_VERIFIED = "Not verified"


@dataclass(frozen=True)
class Verification:
    """The outcome of one check: how many elements were compared and how many were off."""

    status: VerificationStatus
    checked: int
    mismatched: int
    max_abs_error: float
    detail: str = ""

    @classmethod
    def unchecked_failure(cls, detail: str) -> Verification:
        """Return the failure of an output that could not be compared at all (`detail`: why)."""
        return cls(VerificationStatus.FAILED, 0, 0, math.inf, detail)


def choose_sample(operation: Operation, samples: int, seed: int) -> Indices | None:
    """Pick output elements to check, or None when the whole reference is cheap enough."""
    size = math.prod(operation.output_shape)
    if size * operation.reduction_size <= FULL_REFERENCE_MACS or size <= samples:
        return None
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(size, size=samples, replace=False))


@dataclass(frozen=True)
class Expected:
    """The reference values to check, rounded to the result type (float64), and where they lie.

    `sample` holds the flat output indices checked, or is None when every element is.
    """

    values: npt.NDArray[np.float64]
    sample: Indices | None


def compute_expected(
    operation: Operation, inputs: Sequence[Array], samples: int = DEFAULT_SAMPLES, seed: int = 0
) -> Expected:
    """Compute the reference once per operation, on a sample of elements when it is large."""
    sample = choose_sample(operation, samples, seed)
    if sample is None:
        exact = compute_reference(operation, inputs).reshape(-1)
    else:
        exact = compute_reference_at(operation, inputs, sample)
    output_dtype = numpy_dtype(operation.accumulator_type.value)
    return Expected(np.asarray(exact).astype(output_dtype).astype(np.float64), sample)


def check_output(operation: Operation, expected: Expected, actual: Array) -> Verification:
    """Compare a dispatch's output with the reference within the dtype-aware tolerance."""
    if tuple(actual.shape) != operation.output_shape:
        return Verification.unchecked_failure(
            f"output shape {tuple(actual.shape)} is not {operation.output_shape}"
        )
    flat = as_typed(actual, operation.accumulator_type).reshape(-1)
    observed = (flat if expected.sample is None else flat[expected.sample]).astype(np.float64)
    reference = expected.values
    rtol, atol = compute_tolerance(operation)
    error = np.abs(observed - reference)
    bad = ~(error <= atol + rtol * np.abs(reference))  # NaN compares false, so it counts as bad.
    mismatched = int(np.count_nonzero(bad))
    finite = error[~np.isnan(error)]
    max_error = (
        math.inf if finite.size < error.size else (float(finite.max()) if finite.size else 0.0)
    )
    where = (
        f"{error.size} sampled elements"
        if expected.sample is not None
        else f"all {error.size} elements"
    )
    if mismatched:
        first = int(np.argmax(bad))
        index = int(expected.sample[first]) if expected.sample is not None else first
        position = tuple(int(i) for i in np.unravel_index(index, operation.output_shape))
        detail = (
            f"{mismatched} of {where} differ from the reference (first at {position}: "
            f"{observed[first]:.6g} vs {reference[first]:.6g}, tolerance {atol:.3g} + {rtol:.3g}*|ref|)"
        )
        return Verification(VerificationStatus.FAILED, error.size, mismatched, max_error, detail)
    return Verification(VerificationStatus.SUCCESS, error.size, 0, max_error, f"checked {where}")


def as_typed(array: Array, element_type: ElementType) -> Array:
    """Give raw 2-byte arrays read back from .npy files (bf16 is stored as `V2`) their type."""
    if array.dtype.kind == "V" and array.dtype.itemsize == 2 and element_type is ElementType.BF16:
        return array.view(numpy_dtype("bf16"))
    return array
