"""Verification: reference programs on real inputs and dtype-aware comparison."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import numpy as np
import pytest
from iree.compiler import ir

from ireetune.executor import LocalExecutor
from ireetune.problem.root_op import find_root_op, parse_problem
from ireetune.verify.compare import (
    CONFIG_NOT_APPLIED,
    Comparison,
    compare_outputs,
    make_random_inputs,
    tolerance,
)
from ireetune.verify.reference import build_reference_module
from ireetune.verify.runner import ReferenceBatch
from ireetune.verify.stage import check_outputs, write_reference
from tests.conftest import CPU_FLAGS, IREE_COMPILE


def test_reference_program_computes_the_matmul(matmul_benchmark: Path, tmp_path: Path) -> None:
    context = ir.Context()
    with context:
        module = ir.Module.parse(matmul_benchmark.read_text())
        root_op = find_root_op(module)
        reference = build_reference_module(root_op, context, parse_problem(root_op))
    source = tmp_path / "reference.mlir"
    source.write_text(str(reference))
    assert "lowering_config" not in source.read_text() and "root_op" not in source.read_text()
    binary = tmp_path / "reference.vmfb"
    subprocess.run(
        [IREE_COMPILE, str(source), *CPU_FLAGS, "-o", str(binary)], check=True, capture_output=True
    )
    lhs, rhs = make_random_inputs([(64, 96), (96, 128)], ["f32", "f32"], seed=1)
    np.savez(tmp_path / "inputs.npz", arg0=lhs, arg1=rhs)
    runs = LocalExecutor().run_reference_programs(
        ReferenceBatch([(0, binary, tmp_path / "out.npy")], "local-task", tmp_path / "inputs.npz")
    )
    assert runs[0].output is not None and runs[0].median_ms is not None
    np.testing.assert_allclose(runs[0].output, lhs @ rhs, rtol=1e-4, atol=1e-4)


def test_broken_reference_binary_is_a_failure_not_a_crash(tmp_path: Path) -> None:
    (tmp_path / "bad.vmfb").write_bytes(b"junk")
    np.savez(tmp_path / "inputs.npz", arg0=np.zeros(2, np.float32))
    runs = LocalExecutor().run_reference_programs(
        ReferenceBatch(
            [(5, tmp_path / "bad.vmfb", tmp_path / "o.npy")], "local-task", tmp_path / "inputs.npz"
        )
    )
    assert runs[5].output is None and runs[5].reason


def test_summation_order_differences_pass_and_real_errors_fail() -> None:
    rng = np.random.default_rng(0)
    lhs = rng.standard_normal((64, 512)).astype(np.float32)
    rhs = rng.standard_normal((512, 32)).astype(np.float32)
    expected = lhs @ rhs
    reordered = (lhs[:, :256] @ rhs[:256] + lhs[:, 256:] @ rhs[256:]).astype(np.float32)
    assert compare_outputs(expected, reordered, "f32", 512).matches
    wrong = expected.copy()
    wrong[3, 7] += 0.5
    result = compare_outputs(expected, wrong, "f32", 512)
    assert (result.matches, result.mismatched, result.total) == (False, 1, 64 * 32)
    assert result.max_abs_error == np.float32(0.5) or abs(result.max_abs_error - 0.5) < 1e-5


def test_nan_and_shape_mismatch_never_match() -> None:
    expected = np.ones((4, 4), np.float32)
    with_nan = expected.copy()
    with_nan[0, 0] = np.nan
    assert not compare_outputs(expected, with_nan, "f32", 16).matches
    assert not compare_outputs(expected, np.ones((4, 5), np.float32), "f32", 16).matches


def test_infinities_compare_without_a_warning(recwarn: pytest.WarningsRecorder) -> None:
    """A model's default may give an infinity (IREE 3.13's ReduceLogSumExp overflowed where ONNX
    Runtime gave 184.6): the same infinity is equal, a NaN or another sign differs, and numpy's
    warnings never reach the user."""
    expected = np.array([np.inf, 1.0, -np.inf], np.float32)
    assert compare_outputs(expected, expected.copy(), "f32", 16) == Comparison(True, 0.0, 0, 3)
    flipped = np.array([np.inf, 1.0, np.inf], np.float32)
    assert compare_outputs(expected, flipped, "f32", 16) == Comparison(False, math.inf, 1, 3)
    with_nan = np.array([np.nan, 1.0, -np.inf], np.float32)
    assert compare_outputs(expected, with_nan, "f32", 16) == Comparison(False, math.inf, 1, 3)
    assert [str(w.message) for w in recwarn] == []


def test_tolerances_are_exact_for_integers_and_looser_for_half() -> None:
    assert tolerance("i32", 1024) == (0.0, 0.0)
    f32 = tolerance("f32", 1024)
    f16 = tolerance("f16", 1024)
    assert f32[0] < f16[0] and f32[1] < f16[1]
    assert make_random_inputs([(3,)], ["i8"], seed=0)[0].dtype == np.int8


def test_check_outputs_keeps_outputs_not_compared_apart_from_outputs_that_differ(
    matmul_benchmark: Path, tmp_path: Path
) -> None:
    """Four contenders against the default's reference program, all real binaries: one computes
    the same, one adds 1 to every element (compared: wrong), one is the default's own binary
    (config not applied: not compared) and one never built (not compared)."""
    context = ir.Context()
    with context:
        module = ir.Module.parse(matmul_benchmark.read_text())
        root_op = find_root_op(module)
        problem = parse_problem(root_op)
        setup = write_reference(root_op, context, problem, tmp_path / "verify", seed=3)
    wrong_source = tmp_path / "wrong.mlir"
    source_text = setup.source_path.read_text()
    assert source_text.count("arith.constant 0.000000e+00 : f32") == 1
    wrong_source.write_text(source_text.replace("0.000000e+00 : f32", "1.000000e+00 : f32"))
    binaries = {}
    for name, source in (("right", setup.source_path), ("wrong", wrong_source)):
        binaries[name] = tmp_path / f"{name}.vmfb"
        subprocess.run(
            [IREE_COMPILE, str(source), *CPU_FLAGS, "-o", str(binaries[name])],
            check=True, capture_output=True,
        )  # fmt: skip
    checks = check_outputs(
        LocalExecutor(),
        problem,
        {
            0: (binaries["right"], "default-hash"),
            1: (binaries["right"], "hash-1"),
            2: (binaries["wrong"], "hash-2"),
            3: (binaries["right"], "default-hash"),
            4: (None, "reference program failed to compile: error: injected"),
        },
        setup,
        "local-task",
    )
    assert checks.results == {
        1: (True, ""),
        2: (False, "outputs differ from the default's: 8192 of 8192 elements"),
        3: (None, CONFIG_NOT_APPLIED),
        4: (None, "reference program failed to compile: error: injected"),
    }
    assert sorted(checks.max_abs_errors) == [1, 2] and checks.max_abs_errors[1] == 0.0
