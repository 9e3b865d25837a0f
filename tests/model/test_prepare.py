"""The model under tuning: a default that does not compile is refused, naming where it failed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ireetune.core.errors import IreetuneError
from ireetune.model.prepare import ModelUnderTuning, describe_failing_op
from ireetune.targets import parse_target

# What iree-compile 3.13 printed for an ONNX ConvTranspose (32 -> 16 channels, 32 -> 64 pixels)
# its CPU backend can not configure (2026-12-06), shortened.
CONV_TRANSPOSE_FAILURE = """\
m04.mlir:15:11: error: slice along dimension 3 runs out-of-bounds: 64 >= 16
    %11 = torch.operator "onnx.ConvTranspose"(%10, %4, %5) {torch.onnx.kernel_shape = [4 : si64]}
          ^
m04.mlir:15:11: note: see current operation: %11 = "memref.subview"(%9)
"""


def test_the_failing_onnx_operator_and_its_line_are_named() -> None:
    assert describe_failing_op(CONV_TRANSPOSE_FAILURE) == (
        " (in its onnx.ConvTranspose, line 15 of the model's MLIR)"
    )
    assert describe_failing_op("error: no location\n") == ""
    assert describe_failing_op("") == ""


# A matmul whose operands disagree on the reduction's size: the verifier refuses it.
BROKEN_MATMUL = """
func.func @main(%lhs: tensor<4x8xf32>, %rhs: tensor<6x5xf32>) -> tensor<4x5xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<4x5xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<4x5xf32>) -> tensor<4x5xf32>
  %r = linalg.matmul ins(%lhs, %rhs : tensor<4x8xf32>, tensor<6x5xf32>)
                     outs(%init : tensor<4x5xf32>) -> tensor<4x5xf32>
  return %r : tensor<4x5xf32>
}
"""


def test_a_default_that_does_not_compile_is_refused_with_its_operation(tmp_path: Path) -> None:
    source = tmp_path / "broken.mlir"
    source.write_text(BROKEN_MATMUL)
    model = ModelUnderTuning(
        source, "main", tmp_path / "inputs.npz", parse_target("cpu"), False, "local-task"
    )
    with pytest.raises(IreetuneError) as excinfo:
        model.compile_default(tmp_path / "default.vmfb")
    message = str(excinfo.value)
    assert message.startswith("the model does not compile for cpu: error:")
    assert message.endswith(" (in its linalg.matmul, line 6 of the model's MLIR)")
    assert "\n" not in message
    assert not (tmp_path / "default.vmfb").exists()


# A transposed convolution (32 -> 16 channels, stride 2, as a decoder upsamples) whose ReLU feeds
# a padded 3x3 one: IREE 3.13's CPU codegen fails on it at default flags, on every data-tiling
# path, and compiles it with im2col (2026-12-06).
CONV_TRANSPOSE_CHAIN = """
module {
  func.func @main(%x: !torch.vtensor<[1,32,32,32],f32>) -> !torch.vtensor<[1,3,64,64],f32> attributes {torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.producer_name = "test", torch.onnx_meta.producer_version = ""} {
    %w0 = torch.operator "onnx.Constant"() {torch.onnx.value = dense<0.125> : tensor<32x16x4x4xf32>} : () -> !torch.vtensor<[32,16,4,4],f32>
    %b0 = torch.operator "onnx.Constant"() {torch.onnx.value = dense<0.5> : tensor<16xf32>} : () -> !torch.vtensor<[16],f32>
    %w1 = torch.operator "onnx.Constant"() {torch.onnx.value = dense<0.25> : tensor<16x3x3x3xf32>} : () -> !torch.vtensor<[16,3,3,3],f32>
    %r0 = torch.operator "onnx.Relu"(%x) : (!torch.vtensor<[1,32,32,32],f32>) -> !torch.vtensor<[1,32,32,32],f32>
    %up = torch.operator "onnx.ConvTranspose"(%r0, %w0, %b0) {torch.onnx.kernel_shape = [4 : si64, 4 : si64], torch.onnx.pads = [1 : si64, 1 : si64, 1 : si64, 1 : si64], torch.onnx.strides = [2 : si64, 2 : si64]} : (!torch.vtensor<[1,32,32,32],f32>, !torch.vtensor<[32,16,4,4],f32>, !torch.vtensor<[16],f32>) -> !torch.vtensor<[1,16,64,64],f32>
    %r1 = torch.operator "onnx.Relu"(%up) : (!torch.vtensor<[1,16,64,64],f32>) -> !torch.vtensor<[1,16,64,64],f32>
    %out = torch.operator "onnx.ConvTranspose"(%r1, %w1) {torch.onnx.kernel_shape = [3 : si64, 3 : si64], torch.onnx.pads = [1 : si64, 1 : si64, 1 : si64, 1 : si64], torch.onnx.strides = [1 : si64, 1 : si64]} : (!torch.vtensor<[1,16,64,64],f32>, !torch.vtensor<[16,3,3,3],f32>) -> !torch.vtensor<[1,3,64,64],f32>
    return %out : !torch.vtensor<[1,3,64,64],f32>
  }
}
"""  # noqa: E501  (MLIR text is data)


def test_a_default_that_does_not_compile_names_the_flag_that_compiles_it(tmp_path: Path) -> None:
    """Pinned: IREE 3.13 fails on this chain at default flags and compiles it with im2col. If
    this fails because the default compiles, IREE fixed it: drop RESCUE_FLAGS' reason."""
    source = tmp_path / "decoder.mlir"
    source.write_text(CONV_TRANSPOSE_CHAIN)
    model = ModelUnderTuning(
        source, "main", tmp_path / "inputs.npz", parse_target("cpu:x86-64"), False, "local-task"
    )
    with pytest.raises(IreetuneError) as excinfo:
        model.compile_default(tmp_path / "default.vmfb")
    message = str(excinfo.value)
    assert "slice along dimension 3 runs out-of-bounds" in message
    assert "(in its onnx.ConvTranspose, line 8 of the model's MLIR)" in message
    assert message.endswith(
        "; it compiles with --iree-global-opt-use-im2col-for-convs: tune it with "
        "--flags=--iree-global-opt-use-im2col-for-convs"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["decoder.mlir"]
    # With the flag already given, nothing is suggested.
    flagged = replace(
        model, target=model.target.with_global_flags(["--iree-global-opt-use-im2col-for-convs"])
    )
    flagged.compile_default(tmp_path / "default.vmfb")
    assert (tmp_path / "default.vmfb").is_file()
