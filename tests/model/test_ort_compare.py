"""IREE against ONNX Runtime: the output check refuses, the threads follow IREE's workers."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import numpy as np
import pytest

from ireetune.core.input_archive import write_input_archive
from ireetune.decision.medians import compare_side_by_side
from ireetune.model.ort_compare import (
    IREE_DEFAULT,
    SETTLE_CALLS,
    OrtComparison,
    OrtComparisonRequest,
    OrtStatus,
    compare_with_onnxruntime,
)
from ireetune.model.ort_worker import ONNXRUNTIME, compare_outputs, time_interleaved
from tests.conftest import CPU_FLAGS, IREE_COMPILE

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")


def write_tiny_onnx(path: Path, seed: int) -> Path:
    """Write `tanh(x @ w)` for x of [1, 16] and a seeded weight w of [16, 8] (opset 17)."""
    from onnx import TensorProto, helper, numpy_helper

    weight = np.random.default_rng(seed).standard_normal((16, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Tanh", ["y"], ["z"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 8])],
        [numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """The tiny model with weights of seed 0 compiled by IREE, its inputs, and the same graph
    with weights of seed 1 (for ONNX Runtime to disagree with)."""
    folder = tmp_path_factory.mktemp("tiny")
    model = write_tiny_onnx(folder / "tiny.onnx", seed=0)
    other = write_tiny_onnx(folder / "other_weights.onnx", seed=1)
    mlir = folder / "tiny.mlir"
    vmfb = folder / "tiny.vmfb"
    subprocess.run([str(Path(IREE_COMPILE).parent / "iree-import-onnx"), str(model), "-o", str(mlir)], check=True)  # fmt: skip
    subprocess.run([IREE_COMPILE, str(mlir), *CPU_FLAGS, "-o", str(vmfb)], check=True)
    inputs = folder / "inputs.npz"
    write_input_archive(
        inputs, [np.random.default_rng(3).standard_normal((1, 16)).astype(np.float32)]
    )
    return vmfb, inputs, other


def _request(onnx_path: Path, vmfb: Path, inputs: Path, **extra: object) -> OrtComparisonRequest:
    return OrtComparisonRequest(
        onnx_path,
        [(IREE_DEFAULT, vmfb)],
        "tiny",
        inputs,
        rounds=2,
        calls=1,
        warmup=0,
        **extra,  # type: ignore[arg-type]
    )


def test_the_comparison_times_iree_and_onnxruntime_when_outputs_agree(
    tiny: tuple[Path, Path, Path],
) -> None:
    vmfb, inputs, _ = tiny
    comparison = compare_with_onnxruntime(_request(vmfb.with_suffix(".onnx"), vmfb, inputs))
    assert (comparison.status, comparison.problems) == (OrtStatus.MEASURED, ())
    assert sorted(comparison.medians) == [IREE_DEFAULT, ONNXRUNTIME]
    assert list(comparison.ratios) == [IREE_DEFAULT]
    assert {name: len(rounds) for name, rounds in comparison.times_ms.items()} == {
        IREE_DEFAULT: 2,
        ONNXRUNTIME: 2,
    }
    assert comparison.max_error is not None and comparison.max_error < 1e-3
    assert comparison.describe().startswith("median ")
    assert f"{IREE_DEFAULT} takes " in comparison.describe()


def test_the_comparison_refuses_outputs_that_differ(tiny: tuple[Path, Path, Path]) -> None:
    vmfb, inputs, other_weights = tiny
    comparison = compare_with_onnxruntime(_request(other_weights, vmfb, inputs))
    assert comparison.status is OrtStatus.REFUSED
    # No speed of a wrong result: nothing was timed.
    assert (comparison.medians, comparison.ratios, comparison.times_ms) == ({}, {}, {})
    assert comparison.max_error is not None and comparison.max_error > 0.1
    assert [line.split(":")[0] for line in comparison.problems] == [f"{IREE_DEFAULT} output 0"]
    assert comparison.describe().startswith("refused: IREE's outputs differ from ONNX Runtime's")
    assert f"{comparison.max_error:.3g}" in comparison.describe()
    assert comparison.to_json()["status"] == "refused"


def test_onnxruntime_gets_as_many_threads_as_the_runtime_flags_give_iree(
    tiny: tuple[Path, Path, Path],
) -> None:
    vmfb, inputs, _ = tiny
    flags = ("--task_topology_max_group_count=1",)
    comparison = compare_with_onnxruntime(
        _request(vmfb.with_suffix(".onnx"), vmfb, inputs, runtime_flags=flags)
    )
    assert (comparison.status, comparison.threads, comparison.runtime_flags) == (
        OrtStatus.MEASURED,
        1,
        flags,
    )


def test_a_model_onnxruntime_cannot_feed_is_a_failed_comparison(
    tiny: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    vmfb, _, _ = tiny
    two_inputs = tmp_path / "two.npz"
    write_input_archive(two_inputs, [np.zeros((1, 16), np.float32), np.zeros((1, 16), np.float32)])
    comparison = compare_with_onnxruntime(_request(vmfb.with_suffix(".onnx"), vmfb, two_inputs))
    assert (comparison.status, comparison.reason) == (
        OrtStatus.FAILED,
        "the model takes 1 inputs in ONNX Runtime, IREE's 2",
    )


def test_output_check_measures_the_largest_error_against_the_reference() -> None:
    reference = [np.array([1.0, -2.0], np.float32)]
    assert compare_outputs("v", [np.array([1.0, -2.0005], np.float32)], reference, 1e-3, 1e-3) == (
        [],
        pytest.approx(0.0005, rel=1e-3),
    )
    problems, error = compare_outputs(
        "v", [np.array([1.0, -1.0], np.float32)], reference, 1e-3, 1e-3
    )
    assert (len(problems), error) == (1, 1.0)
    assert compare_outputs("v", [np.zeros(3, np.float32)], reference, 1e-3, 1e-3) == (
        ["v output 0: shape (3,), ONNX Runtime (2,)"],
        np.inf,
    )


def test_a_refusal_for_values_that_are_not_finite_names_the_output() -> None:
    problems = ("iree_default output 1: values that are not finite",)
    refused = OrtComparison(OrtStatus.REFUSED, max_error=math.inf, problems=problems)
    assert refused.describe() == (
        "refused: IREE's outputs differ from ONNX Runtime's (iree_default output 1: values that "
        "are not finite); no speed reported"
    )


def test_ratios_to_the_reference_come_from_the_same_rounds() -> None:
    times = {
        "slow": ((4.0, 4.0), (4.2, 4.1), (3.9, 4.0)),
        "fast": ((2.0, 2.0), (2.1, 2.0), (2.0, 1.9)),
    }
    summary = compare_side_by_side(times, "fast")
    assert summary.medians["slow"].value == 4.0
    assert summary.ratios["slow"].value == 2.0
    assert summary.ratios["slow"].low <= 2.0 <= summary.ratios["slow"].high
    assert list(summary.ratios) == ["slow"]
    assert summary.median_over_fastest == {"slow": 4.0 / 3.9, "fast": 2.0 / 1.9}


def test_each_turn_starts_with_untimed_calls_of_its_own_variant() -> None:
    """ONNX Runtime's spinning threads slow the call that follows its turn: a turn's first calls
    are untimed (`settle`), so every timed call follows a call of the same variant."""
    log: list[str] = []
    variants = {name: (lambda name=name: log.append(name)) for name in ("iree", "ort")}
    times = time_interleaved(variants, rounds=3, calls=2, warmup=1, pause_s=0.0, settle=1)
    assert {name: [len(calls) for calls in rounds] for name, rounds in times.items()} == {
        "iree": [2, 2, 2],
        "ort": [2, 2, 2],
    }
    turns = ["iree"] * 3 + ["ort"] * 3 + ["ort"] * 3 + ["iree"] * 3 + ["iree"] * 3 + ["ort"] * 3
    assert log == ["iree", "ort", *turns]
    log.clear()
    time_interleaved(variants, rounds=2, calls=1, warmup=0, pause_s=0.0)
    assert log == ["iree", "ort", "ort", "iree"]


def test_the_comparison_times_each_turn_after_an_untimed_call(
    tiny: tuple[Path, Path, Path],
) -> None:
    vmfb, inputs, _ = tiny
    comparison = compare_with_onnxruntime(
        _request(vmfb.with_suffix(".onnx"), vmfb, inputs, settle=SETTLE_CALLS)
    )
    assert (comparison.status, comparison.settle, SETTLE_CALLS) == (OrtStatus.MEASURED, 1, 1)
    assert comparison.to_json()["untimed_calls_per_turn"] == 1
    assert "2 interleaved rounds of 1 calls, each turn after 1 untimed;" in comparison.describe()
    assert OrtComparisonRequest(vmfb, [], "tiny", inputs).settle == SETTLE_CALLS
