"""Shapes and sweeps: dimension syntax, crossing, problem files and the errors users see."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ireetune.core.errors import IreetuneError
from ireetune.profiler.operations import (
    ConvLayout,
    ConvOperation,
    ElementType,
    MatmulLayout,
    MatmulOperation,
    OperationKind,
    compute_bytes_moved,
)
from ireetune.profiler.shapes import (
    SweepRequest,
    expand_requests,
    expand_sweep,
    parse_dimension,
    read_problem_file,
)


def test_parse_dimension_values_lists_and_inclusive_ranges() -> None:
    assert parse_dimension("4096") == (4096,)
    assert parse_dimension("128,64") == (64, 128)
    assert parse_dimension("64:1024:128") == (64, 192, 320, 448, 576, 704, 832, 960)
    assert parse_dimension("64:256:64") == (64, 128, 192, 256)
    assert parse_dimension("32,64:128:64,64") == (32, 64, 128)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("64:32:8", "starts after it stops"),
        ("64:128:0", "positive step"),
        ("64:128", "start:stop:step"),
        ("abc", "not an integer"),
        ("0", "at least 1"),
        ("64,,128", "empty value"),
    ],
)
def test_parse_dimension_rejects_bad_text(text: str, message: str) -> None:
    with pytest.raises(IreetuneError) as excinfo:
        parse_dimension(text, "m")
    assert message in str(excinfo.value)
    assert str(excinfo.value).startswith("--m:")


def test_expand_sweep_crosses_dimensions_layouts_and_types() -> None:
    operations = expand_sweep(
        SweepRequest(
            OperationKind.MATMUL, {"m": "64,128", "n": "32", "k": "16"}, "f16,i8", "", "nn,nt"
        )
    )
    assert [op.name for op in operations] == [
        "matmul_64x32x16_f16t_f16t_f32t",
        "matmul_128x32x16_f16t_f16t_f32t",
        "matmul_64x32x16_i8t_i8t_i32t",
        "matmul_128x32x16_i8t_i8t_i32t",
        "mmt_64x32x16_f16t_f16t_f32t",
        "mmt_128x32x16_f16t_f16t_f32t",
        "mmt_64x32x16_i8t_i8t_i32t",
        "mmt_128x32x16_i8t_i8t_i32t",
    ]


def test_operation_records_describe_shapes_and_costs() -> None:
    mmt = MatmulOperation(
        OperationKind.MATMUL, 3456, 1024, 2048, ElementType.F16, ElementType.F32, MatmulLayout.NT
    )
    assert (mmt.lhs_shape, mmt.rhs_shape, mmt.output_shape) == (
        (3456, 2048),
        (1024, 2048),
        (3456, 1024),
    )
    assert mmt.flops == 2 * 3456 * 1024 * 2048
    assert compute_bytes_moved(mmt) == (3456 * 2048 + 1024 * 2048) * 2 + 3456 * 1024 * 4
    tn = MatmulOperation(
        OperationKind.BATCH_MATMUL,
        8,
        4,
        2,
        ElementType.F32,
        ElementType.F32,
        MatmulLayout.TN,
        batch=3,
    )
    assert (tn.name, tn.lhs_shape, tn.rhs_shape) == (
        "batch_mtm_3x8x4x2_f32t_f32t_f32t",
        (3, 2, 8),
        (3, 2, 4),
    )
    conv = ConvOperation(
        1, 9, 9, 4, 8, 3, 3, 2, 2, ElementType.F32, ElementType.F32, ConvLayout.NCHW_FCHW
    )
    assert conv.name == "conv2d_nchw_fchw_1x9x9x4_3x3x8_s2_d2_f32t_f32t_f32t"
    assert (conv.image_shape, conv.filter_shape, conv.output_shape) == (
        (1, 4, 9, 9),
        (8, 4, 3, 3),
        (1, 8, 3, 3),
    )
    assert conv.flops == 2 * (1 * 8 * 3 * 3) * (4 * 3 * 3)


def test_accumulator_option_and_invalid_pairs() -> None:
    (f16_acc,) = expand_sweep(SweepRequest(OperationKind.MATMUL, {}, "f16", "f16"))
    assert f16_acc.accumulator_type is ElementType.F16
    with pytest.raises(IreetuneError) as excinfo:
        expand_sweep(SweepRequest(OperationKind.MATMUL, {}, "i8", "f16"))
    assert "no input/accumulator pair fits" in str(excinfo.value)


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (SweepRequest(OperationKind.MATMUL, {}, "f64"), "unknown element type 'f64'"),
        (SweepRequest(OperationKind.MATMUL, {"height": "3"}), "matmul takes no height"),
        (SweepRequest(OperationKind.MATMUL, {}, "f32", "", "xx"), "unknown value 'xx'"),
        (
            SweepRequest(OperationKind.CONV2D, {"height": "4", "kernel_h": "3", "dilation": "2"}),
            "does not fit",
        ),
        (
            SweepRequest(OperationKind.MATMUL, {"m": "1:100000:1", "n": "1:100:1"}),
            "narrow the ranges",
        ),
    ],
)
def test_expand_sweep_rejects_user_mistakes(request_: SweepRequest, message: str) -> None:
    with pytest.raises(IreetuneError) as excinfo:
        expand_sweep(request_)
    assert message in str(excinfo.value)


def test_problem_files_in_csv_and_json(tmp_path: Path) -> None:
    csv_path = tmp_path / "problems.csv"
    csv_path.write_text(
        "# shapes from a model\nop,m,n,k,dtype,acc,layout\nmatmul,2048,1280,5120,f16,f32,nt\nmatmul,64:128:64,8,8,f32,,\n"
    )
    json_path = tmp_path / "problems.json"
    json_path.write_text(
        json.dumps(
            [
                {
                    "op": "conv2d",
                    "height": 14,
                    "width": 14,
                    "channels": 8,
                    "filters": 16,
                    "stride": 2,
                    "dtype": "f32",
                },
                {"op": "matmul", "m": 2048, "n": 1280, "k": 5120, "dtype": "f16", "layout": "nt"},
            ]
        )
    )
    names = [
        op.name
        for op in expand_requests([*read_problem_file(csv_path), *read_problem_file(json_path)])
    ]
    assert names == [
        "mmt_2048x1280x5120_f16t_f16t_f32t",
        "matmul_64x8x8_f32t_f32t_f32t",
        "matmul_128x8x8_f32t_f32t_f32t",
        "conv2d_nhwc_hwcf_1x14x14x8_3x3x16_s2_d1_f32t_f32t_f32t",
    ]


def test_problem_file_errors(tmp_path: Path) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_text("op,m,n,k\n")
    no_op = tmp_path / "no_op.json"
    no_op.write_text('[{"m": 4}]')
    messages = []
    for path in (empty, no_op, tmp_path / "missing.csv"):
        with pytest.raises(IreetuneError) as excinfo:
            read_problem_file(path)
        messages.append(str(excinfo.value))
    assert messages == [
        f"{empty} lists no problems",
        f"{no_op}, problem 1: no 'op' given",
        f"problem file not found: {tmp_path / 'missing.csv'}",
    ]
    with pytest.raises(IreetuneError) as excinfo:
        expand_requests([])
    assert str(excinfo.value) == "the sweep is empty"
