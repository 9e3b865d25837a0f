"""A strided convolution of few input channels as a space-to-depth and a stride-1 convolution,
rewritten before import (part of the rewritten import, `--split-grouped-convs`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from ireetune.flows.model import import_choice
from ireetune.frontend.model_import import count_rewrites, import_model
from ireetune.frontend.onnx_space_to_depth import space_to_depth_convolutions


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
    # Under the im2col flag the choice skips the rewrite (the convolution is a matrix product).
    assert import_choice.IM2COL_FLAG == "--iree-global-opt-use-im2col-for-convs"
