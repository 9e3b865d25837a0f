"""The NumPy references against hand-computed results, sampling, and the dtype-aware check."""

from __future__ import annotations

import numpy as np
import pytest

from ireetune.profiler.operations import (
    ConvLayout,
    ConvOperation,
    ElementType,
    MatmulLayout,
    MatmulOperation,
    Operation,
    OperationKind,
)
from ireetune.profiler.reference import (
    VerificationStatus,
    check_output,
    choose_sample,
    compute_expected,
    compute_reference,
    compute_reference_at,
    compute_tolerance,
)
from ireetune.verify.compare import make_random_inputs

F32 = ElementType.F32
A = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
B = np.array([[5.0, 6.0], [7.0, 8.0]], dtype=np.float32)
A_TIMES_B = [[19.0, 22.0], [43.0, 50.0]]


def _matmul(
    layout: MatmulLayout, kind: OperationKind = OperationKind.MATMUL, batch: int | None = None
) -> MatmulOperation:
    return MatmulOperation(kind, 2, 2, 2, F32, F32, layout, batch)


@pytest.mark.parametrize(
    ("layout", "lhs", "rhs"),
    [
        (MatmulLayout.NN, A, B),
        (MatmulLayout.NT, A, B.T),
        (MatmulLayout.TN, A.T, B),
        (MatmulLayout.TT, A.T, B.T),
    ],
)
def test_matmul_reference_in_every_layout(
    layout: MatmulLayout, lhs: np.ndarray, rhs: np.ndarray
) -> None:
    assert compute_reference(_matmul(layout), [lhs, rhs]).tolist() == A_TIMES_B


def test_batch_matmul_and_fused_bias_relu_references() -> None:
    lhs = np.stack([A, np.eye(2, dtype=np.float32)])
    rhs = np.stack([B, A])
    batched = compute_reference(
        _matmul(MatmulLayout.NN, OperationKind.BATCH_MATMUL, batch=2), [lhs, rhs]
    )
    assert batched.tolist() == [A_TIMES_B, [[1.0, 2.0], [3.0, 4.0]]]
    bias = np.array([-20.0, -30.0], dtype=np.float32)
    fused = compute_reference(
        _matmul(MatmulLayout.NN, OperationKind.MATMUL_BIAS_RELU), [A, B, bias]
    )
    assert fused.tolist() == [[0.0, 0.0], [23.0, 20.0]]


def _conv(layout: ConvLayout) -> ConvOperation:
    return ConvOperation(
        1,
        5,
        5,
        1,
        2,
        2,
        2,
        stride=2,
        dilation=2,
        input_type=F32,
        accumulator_type=F32,
        layout=layout,
    )


def test_conv_reference_with_stride_and_dilation_in_both_layouts() -> None:
    # image[h, w] = 5h + w; filter 0 sums the four dilated taps, filter 1 takes tap (0,0) minus tap (1,1).
    image = np.arange(25, dtype=np.float32).reshape(5, 5)
    taps = np.array(
        [[[1.0, 1.0], [1.0, 1.0]], [[1.0, 0.0], [0.0, -1.0]]], dtype=np.float32
    )  # F x KH x KW
    expected_per_filter = [[[24.0, 32.0], [64.0, 72.0]], [[-12.0, -12.0], [-12.0, -12.0]]]
    nhwc = compute_reference(
        _conv(ConvLayout.NHWC_HWCF),
        [image[None, :, :, None], taps.transpose(1, 2, 0)[:, :, None, :]],
    )
    assert nhwc.transpose(0, 3, 1, 2).tolist() == [expected_per_filter]
    nchw = compute_reference(_conv(ConvLayout.NCHW_FCHW), [image[None, None], taps[:, None]])
    assert nchw.tolist() == [expected_per_filter]


SAMPLED_OPERATIONS: list[Operation] = [
    MatmulOperation(OperationKind.MATMUL, 5, 7, 3, F32, F32, MatmulLayout.TT),
    MatmulOperation(OperationKind.BATCH_MATMUL, 4, 3, 6, F32, F32, MatmulLayout.NT, batch=2),
    MatmulOperation(
        OperationKind.MATMUL_BIAS_RELU, 6, 5, 4, ElementType.I8, ElementType.I32, MatmulLayout.TN
    ),
    ConvOperation(2, 9, 8, 3, 4, 3, 2, 2, 1, F32, F32, ConvLayout.NHWC_HWCF),
    ConvOperation(1, 9, 9, 2, 3, 2, 3, 1, 2, ElementType.F16, F32, ConvLayout.NCHW_FCHW),
]


@pytest.mark.parametrize("operation", SAMPLED_OPERATIONS, ids=lambda op: op.name)
def test_reference_at_sampled_indices_equals_the_full_reference(operation: Operation) -> None:
    inputs = make_random_inputs(
        list(operation.input_shapes), [t.value for t in operation.input_types], seed=3
    )
    full = compute_reference(operation, inputs)
    assert full.shape == operation.output_shape
    everywhere = np.arange(full.size)
    np.testing.assert_allclose(
        compute_reference_at(operation, inputs, everywhere), full.reshape(-1), rtol=1e-12
    )


def test_check_output_passes_the_exact_result_and_fails_a_corrupted_element() -> None:
    operation = MatmulOperation(OperationKind.MATMUL, 16, 8, 32, F32, F32)
    inputs = make_random_inputs(list(operation.input_shapes), ["f32", "f32"], seed=1)
    expected = compute_expected(operation, inputs)
    result = compute_reference(operation, inputs).astype(np.float32)
    good = check_output(operation, expected, result)
    assert (good.status, good.checked, good.mismatched) == (VerificationStatus.SUCCESS, 128, 0)
    result[3, 5] += 0.5
    bad = check_output(operation, expected, result)
    assert (bad.status, bad.mismatched) == (VerificationStatus.FAILED, 1)
    assert "1 of all 128 elements differ from the reference (first at (3, 5)" in bad.detail
    result[3, 5] = np.nan
    assert check_output(operation, expected, result).status is VerificationStatus.FAILED
    wrong_shape = check_output(operation, expected, result.T)
    assert wrong_shape.detail == "output shape (8, 16) is not (16, 8)"


def test_integers_must_match_exactly() -> None:
    operation = MatmulOperation(OperationKind.MATMUL, 4, 4, 8, ElementType.I8, ElementType.I32)
    inputs = make_random_inputs(list(operation.input_shapes), ["i8", "i8"], seed=2)
    assert compute_tolerance(operation) == (0.0, 0.0)
    result = compute_reference(operation, inputs).astype(np.int32)
    expected = compute_expected(operation, inputs)
    assert check_output(operation, expected, result).status is VerificationStatus.SUCCESS
    result[0, 0] += 1
    assert check_output(operation, expected, result).status is VerificationStatus.FAILED


def test_f16_accumulation_error_is_tolerated_but_a_wrong_value_is_not() -> None:
    operation = MatmulOperation(OperationKind.MATMUL, 8, 8, 256, ElementType.F16, ElementType.F16)
    inputs = make_random_inputs(list(operation.input_shapes), ["f16", "f16"], seed=4)
    lhs, rhs = (x.astype(np.float32) for x in inputs)
    # Accumulate in f16, one product at a time: the worst summation order a dispatch could use.
    accumulated = np.zeros((8, 8), dtype=np.float16)
    for k in range(256):
        accumulated = (accumulated + np.outer(lhs[:, k], rhs[k, :]).astype(np.float16)).astype(
            np.float16
        )
    expected = compute_expected(operation, inputs)
    assert check_output(operation, expected, accumulated).status is VerificationStatus.SUCCESS
    accumulated[2, 2] += 8.0
    assert check_output(operation, expected, accumulated).status is VerificationStatus.FAILED


def test_large_problems_are_checked_on_a_sample() -> None:
    small = MatmulOperation(OperationKind.MATMUL, 64, 64, 64, F32, F32)
    assert choose_sample(small, 4096, seed=0) is None
    large = MatmulOperation(OperationKind.MATMUL, 1024, 512, 64, F32, F32)
    inputs = make_random_inputs(list(large.input_shapes), ["f32", "f32"], seed=0)
    expected = compute_expected(large, inputs, samples=500, seed=0)
    assert expected.sample is not None and expected.values.shape == (500,)
    result = compute_reference(large, inputs).astype(np.float32)
    verdict = check_output(large, expected, result)
    assert (verdict.status, verdict.checked, verdict.detail) == (
        VerificationStatus.SUCCESS,
        500,
        "checked 500 sampled elements",
    )
    sampled_row, sampled_column = np.unravel_index(int(expected.sample[7]), large.output_shape)
    result[sampled_row, sampled_column] = -result[sampled_row, sampled_column] + 1.0
    assert check_output(large, expected, result).status is VerificationStatus.FAILED
