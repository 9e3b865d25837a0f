"""The model under tuning: a default that does not compile is refused, naming where it failed."""

from __future__ import annotations

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
