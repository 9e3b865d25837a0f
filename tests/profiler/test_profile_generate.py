"""Generated MLIR parses, and compiles with the real iree-compile for CPU, CUDA and ROCm."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from iree.compiler import ir

from ireetune.compile.driver import CompileStatus, build_request
from ireetune.compile.pool import CompileBatch, CompileJob
from ireetune.executor import LocalExecutor
from ireetune.profiler.generate import generate_mlir, write_operation
from ireetune.profiler.operations import (
    ConvLayout,
    ConvOperation,
    ElementType,
    MatmulLayout,
    MatmulOperation,
    Operation,
    OperationKind,
)
from ireetune.targets import parse_target as resolve_target


def _operations(input_type: ElementType, accumulator: ElementType) -> list[Operation]:
    """One small operation of every kind and layout."""
    matmuls: list[Operation] = [
        MatmulOperation(OperationKind.MATMUL, 32, 16, 24, input_type, accumulator, layout)
        for layout in MatmulLayout
    ]
    return [
        *matmuls,
        MatmulOperation(
            OperationKind.BATCH_MATMUL,
            32,
            16,
            24,
            input_type,
            accumulator,
            MatmulLayout.NT,
            batch=2,
        ),
        MatmulOperation(OperationKind.MATMUL_BIAS_RELU, 32, 16, 24, input_type, accumulator),
        ConvOperation(1, 9, 9, 8, 16, 3, 3, 2, 1, input_type, accumulator, ConvLayout.NHWC_HWCF),
        ConvOperation(1, 9, 9, 8, 16, 3, 3, 1, 2, input_type, accumulator, ConvLayout.NCHW_FCHW),
    ]


@pytest.mark.parametrize(
    ("input_type", "accumulator"),
    [
        (ElementType.F32, ElementType.F32),
        (ElementType.F16, ElementType.F16),
        (ElementType.BF16, ElementType.F32),
        (ElementType.I8, ElementType.I32),
    ],
)
def test_generated_mlir_parses_and_verifies(
    input_type: ElementType, accumulator: ElementType
) -> None:
    for operation in _operations(input_type, accumulator):
        with ir.Context():
            module = ir.Module.parse(generate_mlir(operation))
            assert module.operation.verify()
            text = str(module)
        assert "func.func @main" in text
        expected_op = {
            OperationKind.BATCH_MATMUL: "linalg.batch_matmul",
            OperationKind.CONV2D: f"linalg.conv_2d_{getattr(operation.layout, 'value', '')}",
        }.get(operation.kind, "linalg.matmul")
        assert expected_op in text, operation.name


@pytest.mark.parametrize(
    ("target_name", "input_type", "accumulator"),
    [
        ("cpu", ElementType.F32, ElementType.F32),
        ("cuda:sm_80", ElementType.F16, ElementType.F32),
        ("rocm:gfx942", ElementType.F16, ElementType.F32),
    ],
)
def test_generated_operations_compile_for_each_target(
    tmp_path: Path, target_name: str, input_type: ElementType, accumulator: ElementType
) -> None:
    target = resolve_target(target_name)
    operations = _operations(input_type, accumulator)
    jobs = []
    for index, operation in enumerate(operations):
        source = write_operation(tmp_path, operation)
        jobs.append(
            CompileJob(
                index,
                build_request(
                    target,
                    source,
                    source.with_suffix(".vmfb"),
                    reproducer_path=source.with_suffix(".crash.mlir"),
                ),
                source.with_suffix(".log"),
            )
        )
    outcomes = sorted(
        LocalExecutor().compile(CompileBatch(jobs, len(os.sched_getaffinity(0)), 120.0)),
        key=lambda o: o.candidate_id,
    )
    failures = {
        operations[o.candidate_id].name: o.reason
        for o in outcomes
        if o.status is not CompileStatus.COMPILED
    }
    assert failures == {}
    assert all(job.request.output_path.stat().st_size > 0 for job in jobs)
    folders = sorted(
        {source.parent.parent.name for source in (job.request.source_path for job in jobs)}
    )
    assert folders == ["batch_matmul", "conv2d", "matmul", "matmul_bias_relu"]
