"""A strided convolution of few input channels as a space-to-depth and a stride-1 convolution,
rewritten before import (part of the rewritten import, `--split-grouped-convs`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from ireetune.core.errors import IreetuneError
from ireetune.executor import LocalExecutor
from ireetune.flows.model import import_choice, phases
from ireetune.flows.model.options import ModelTuneOptions
from ireetune.flows.model.run import Mode, ModelTuningRun
from ireetune.frontend.model_import import count_rewrites, import_model
from ireetune.frontend.onnx_space_to_depth import space_to_depth_convolutions
from ireetune.targets import parse_target
from tests.conftest import CPU_FLAGS, IREE_COMPILE, TEST_TARGET


def _strided_model(height: int, kernel: int, stride: int, pads: list[int], channels: int = 3):
    """One strided convolution with bias, then a ReLU and a 3x3 convolution of 8 channels at
    stride 2 (too many input channels to rewrite), with seeded weights."""
    rng = np.random.default_rng(11)

    def weights(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=[stride, stride], pads=pads,
                         kernel_shape=[kernel, kernel], name="first"),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["y"], strides=[2, 2], kernel_shape=[3, 3]),
    ]  # fmt: skip
    first = (height + pads[0] + pads[2] - kernel) // stride + 1
    out = (first - 3) // 2 + 1
    graph = helper.make_graph(
        nodes, "strided",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, height, height])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, out, out])],
        [weights("w", 8, channels, kernel, kernel), weights("b", 8), weights("w2", 4, 8, 3, 3)],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = onnxruntime.InferenceSession(model.SerializeToString())
    return np.asarray(session.run(None, {"x": x})[0])


@pytest.mark.parametrize(
    ("height", "kernel", "stride", "pads"),
    # AlexNet's first (11x11, stride 4, no pads), ResNet's (7x7, stride 2, pads 3), a 3x3 at
    # stride 2 with pads 1 on an odd size, and one whose windows leave the last rows unread.
    [(35, 11, 4, [0, 0, 0, 0]), (32, 7, 2, [3, 3, 3, 3]), (17, 3, 2, [1, 1, 1, 1]),
     (21, 5, 3, [0, 1, 0, 2])],
)  # fmt: skip
def test_a_strided_convolution_becomes_a_space_to_depth_with_the_same_outputs(
    height: int, kernel: int, stride: int, pads: list[int]
) -> None:
    model = _strided_model(height, kernel, stride, pads)
    x = np.random.default_rng(3).standard_normal((1, 3, height, height)).astype(np.float32)
    expected = _run(model, x)
    assert space_to_depth_convolutions(model) == 1
    ops = [node.op_type for node in model.graph.node]
    assert "SpaceToDepth" in ops and ops.count("Conv") == 2
    first = next(node for node in model.graph.node if node.op_type == "Conv")
    assert helper.get_attribute_value(first.attribute[1]) == [1, 1]  # strides
    # The old weights are gone; the new ones hold stride * stride times the input channels.
    weights = {t.name: t for t in model.graph.initializer}
    assert "w" not in weights and weights[first.input[1]].dims[1] == 3 * stride * stride
    np.testing.assert_allclose(_run(model, x), expected, rtol=1e-4, atol=1e-4)


def test_weights_listed_as_inputs_too_are_no_inputs_after_the_rewrite() -> None:
    # PyTorch's older exporters list every weight as a graph input as well (onnx's
    # `test_Conv2d_strided`): the dropped weights must not stay inputs the caller has to give.
    model = _strided_model(17, 3, 2, [1, 1, 1, 1])
    graph = model.graph
    graph.input.extend(
        helper.make_tensor_value_info(t.name, TensorProto.FLOAT, list(t.dims))
        for t in graph.initializer
    )
    x = np.random.default_rng(3).standard_normal((1, 3, 17, 17)).astype(np.float32)
    expected = _run(model, x)
    assert space_to_depth_convolutions(model) == 1
    assert [value.name for value in graph.input] == ["x", "b", "w2"]
    np.testing.assert_allclose(_run(model, x), expected, rtol=1e-4, atol=1e-4)


def test_a_weight_a_subgraph_reads_stays() -> None:
    # An `If` branch reads the outer graph's initializer `k`: no top-level node does.
    model = _strided_model(17, 3, 2, [1, 1, 1, 1])
    graph = model.graph
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    branch = helper.make_graph([helper.make_node("Add", ["y", "k"], ["z"])], "then", [], [y])
    other = helper.make_graph([helper.make_node("Identity", ["y"], ["z2"])], "else", [], [y])
    branch.output[0].name, other.output[0].name = "z", "z2"
    graph.initializer.extend(
        [
            numpy_helper.from_array(np.float32(1.5), "k"),
            numpy_helper.from_array(np.array(True), "flag"),
        ]
    )
    graph.node.append(
        helper.make_node("If", ["flag"], ["out"], then_branch=branch, else_branch=other)
    )
    graph.output[0].name = "out"
    x = np.random.default_rng(3).standard_normal((1, 3, 17, 17)).astype(np.float32)
    expected = _run(model, x)
    assert space_to_depth_convolutions(model) == 1
    assert "k" in {t.name for t in graph.initializer}
    np.testing.assert_allclose(_run(model, x), expected, rtol=1e-4, atol=1e-4)


def test_only_strided_convolutions_of_few_channels_are_rewritten() -> None:
    """Stride 1, more than four input channels, or a window narrower than the stride: as is."""
    for model in (
        _strided_model(16, 3, 1, [1, 1, 1, 1]),
        _strided_model(16, 3, 2, [1, 1, 1, 1], channels=5),
        _strided_model(16, 1, 2, [0, 0, 0, 0]),
    ):
        before = model.SerializeToString()
        assert space_to_depth_convolutions(model) == 0
        assert model.SerializeToString() == before


def test_the_rewritten_import_counts_and_runs_both_rewrites(tmp_path: Path) -> None:
    """The import with its convolutions rewritten runs in IREE with ONNX Runtime's outputs'
    shape; the counts name the strided convolution, and without `space_to_depth` it stays."""
    path = tmp_path / "strided.onnx"
    onnx.save(_strided_model(32, 7, 2, [3, 3, 3, 3]), str(path))
    assert count_rewrites(path) == (0, 1)
    notes: list[str] = []
    mlir = import_model(path, tmp_path / "rewritten", split_groups=True, notes=notes)
    text = mlir.read_text()
    assert '"onnx.SpaceToDepth"' in text
    assert notes[0].startswith("1 strided convolution(s) of few input channels as space-to-depth")
    kept = import_model(path, tmp_path / "kept", split_groups=True, space_to_depth=False)
    assert '"onnx.SpaceToDepth"' not in kept.read_text()


@pytest.mark.parametrize("im2col", [False, True])
def test_the_import_choice_times_the_rewrite_except_under_the_im2col_flag(
    im2col: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model whose only rewrite is a strided convolution: the in-process choice imports it
    rewritten, unless the flags kept turn every convolution into a matrix product already."""
    path = tmp_path / "strided.onnx"
    onnx.save(_strided_model(32, 7, 2, [3, 3, 3, 3]), str(path))
    imports: list[bool] = []

    def recording(*args: object, space_to_depth: bool = True, **kwargs: object) -> Path:
        imports.append(space_to_depth)
        raise IreetuneError("stopped here")

    target = parse_target(TEST_TARGET)
    if im2col:
        target = target.with_global_flags((import_choice.IM2COL_FLAG,))
    options = ModelTuneOptions(model_path=path, output_dir=tmp_path, target=TEST_TARGET, rounds=1)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    run = ModelTuningRun(Mode.IN_PROCESS, options, target, run_dir, LocalExecutor())
    phases.prepare(run)
    monkeypatch.setattr(import_choice, "import_model", recording)
    import_choice.choose_import(run)
    if im2col:
        assert imports == [] and not any("space-to-depth" in note for note in run.notes)
    else:
        assert imports == [True]
        assert run.notes[-1] == (
            "1 strided convolution(s) of few input channels as space-to-depth: not rewritten: "
            "stopped here"
        )


def test_iree_cannot_compile_one_convolution_s_upstream_im2col(tmp_path: Path) -> None:
    """Pinned for IREE 3.13: im2col for one chosen convolution through a preprocessing spec
    (upstream `convert_conv2d_to_img2col`) matches it, and the CPU codegen then refuses the
    im2col's semi-affine indexing. The day this compiles, a per-convolution im2col may replace
    the space-to-depth rewrite (docs/benchmarks.md, 2026-12-07)."""
    source = tmp_path / "conv.mlir"
    source.write_text(
        "func.func @conv(%x: tensor<1x3x35x35xf32>, %w: tensor<8x3x11x11xf32>)"
        " -> tensor<1x8x7x7xf32> {\n"
        "  %zero = arith.constant 0.0 : f32\n"
        "  %empty = tensor.empty() : tensor<1x8x7x7xf32>\n"
        "  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<1x8x7x7xf32>)"
        " -> tensor<1x8x7x7xf32>\n"
        "  %y = linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>,"
        " strides = dense<4> : tensor<2xi64>}"
        " ins(%x, %w : tensor<1x3x35x35xf32>, tensor<8x3x11x11xf32>)"
        " outs(%init : tensor<1x8x7x7xf32>) -> tensor<1x8x7x7xf32>\n"
        "  return %y : tensor<1x8x7x7xf32>\n}\n"
    )
    spec = tmp_path / "im2col.mlir"
    spec.write_text(
        "module attributes {transform.with_named_sequence} {\n"
        "  transform.named_sequence @__transform_main(%m: !transform.any_op {transform.consumed})"
        " {\n"
        '    %conv = transform.structured.match ops{["linalg.conv_2d_nchw_fchw"]} in %m'
        " : (!transform.any_op) -> !transform.any_op\n"
        "    %a, %b = transform.structured.convert_conv2d_to_img2col %conv"
        " : (!transform.any_op) -> (!transform.any_op, !transform.any_op)\n"
        "    transform.yield\n  }\n}\n"
    )
    compiled = subprocess.run(
        [IREE_COMPILE, str(source), *CPU_FLAGS, "-o", str(tmp_path / "conv.vmfb"),
         f"--iree-preprocessing-transform-spec-filename={spec}"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert compiled.returncode != 0
    assert "semi-affine indexing map" in compiled.stderr
    # Without the spec, the same convolution compiles.
    plain = subprocess.run(
        [IREE_COMPILE, str(source), *CPU_FLAGS, "-o", str(tmp_path / "plain.vmfb")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert plain.returncode == 0, plain.stderr
