"""NCHW depthwise convolutions turned channels-last by a transform spec made for the model
(llvm-cpu): the channel counts found, the spec's effect on the compiled model (its config and its
outputs), the model's flag space, and what a run folder may carry."""

from __future__ import annotations

import re
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ireetune.compile.driver import CompileRequest
from ireetune.core.flag_space import propose_flag_sets
from ireetune.errors import IreetuneError
from ireetune.executor.flag_files import read_flag_files
from ireetune.executor.ray_executor import _ShippedCompile, compile_shipped
from ireetune.handoff.folder_flags import check_folder_flags
from ireetune.model.timing import ModelComparison, run_models_side_by_side_here
from ireetune.targets import parse_target
from ireetune.targets.llvm_cpu.depthwise_layout import (
    SPEC_FILE_NAME,
    TRANSFORM_SPEC_FLAG,
    find_depthwise_channels,
    is_generated_spec,
    render_spec,
    spec_flag,
    write_depthwise_spec,
)
from ireetune.targets.llvm_cpu.flags import CHANNELS_LAST, CPU_FLAG_SPACE
from tests.conftest import CPU_FLAGS, IREE_COMPILE, MATMUL_MODEL, TEST_TARGET

# A pointwise convolution feeding two depthwise ones (16 and 24 channels, one strided): the
# inverted-residual block of MobileNet-v2, NCHW as the ONNX importer writes it.
DEPTHWISE_MODEL = """
func.func @main(%x: tensor<1x8x20x20xf32>, %w: tensor<16x8x1x1xf32>, %d: tensor<16x3x3xf32>,
                %w2: tensor<24x16x1x1xf32>, %d2: tensor<24x3x3xf32>) -> tensor<1x24x8x8xf32> {
  %zero = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<1x16x20x20xf32>
  %f0 = linalg.fill ins(%zero : f32) outs(%e0 : tensor<1x16x20x20xf32>) -> tensor<1x16x20x20xf32>
  %p = linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
      ins(%x, %w : tensor<1x8x20x20xf32>, tensor<16x8x1x1xf32>) outs(%f0 : tensor<1x16x20x20xf32>) -> tensor<1x16x20x20xf32>
  %e1 = tensor.empty() : tensor<1x16x18x18xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<1x16x18x18xf32>) -> tensor<1x16x18x18xf32>
  %dw = linalg.depthwise_conv_2d_nchw_chw {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
      ins(%p, %d : tensor<1x16x20x20xf32>, tensor<16x3x3xf32>) outs(%f1 : tensor<1x16x18x18xf32>) -> tensor<1x16x18x18xf32>
  %e2 = tensor.empty() : tensor<1x24x18x18xf32>
  %f2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<1x24x18x18xf32>) -> tensor<1x24x18x18xf32>
  %q = linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
      ins(%dw, %w2 : tensor<1x16x18x18xf32>, tensor<24x16x1x1xf32>) outs(%f2 : tensor<1x24x18x18xf32>) -> tensor<1x24x18x18xf32>
  %e3 = tensor.empty() : tensor<1x24x8x8xf32>
  %f3 = linalg.fill ins(%zero : f32) outs(%e3 : tensor<1x24x8x8xf32>) -> tensor<1x24x8x8xf32>
  %r = linalg.depthwise_conv_2d_nchw_chw {dilations = dense<1> : tensor<2xi64>, strides = dense<2> : tensor<2xi64>}
      ins(%q, %d2 : tensor<1x24x18x18xf32>, tensor<24x3x3xf32>) outs(%f3 : tensor<1x24x8x8xf32>) -> tensor<1x24x8x8xf32>
  return %r : tensor<1x24x8x8xf32>
}
"""
INPUT_SHAPES = ((1, 8, 20, 20), (16, 8, 1, 1), (16, 3, 3), (24, 16, 1, 1), (24, 3, 3))
PREPROCESSING = f"--iree-preprocessing-pass-pipeline={CHANNELS_LAST}"


@pytest.fixture(scope="module")
def depthwise_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("depthwise_model") / "depthwise.mlir"
    path.write_text(DEPTHWISE_MODEL)
    return path


@pytest.fixture(scope="module")
def depthwise_spec(depthwise_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("depthwise_spec")
    spec = write_depthwise_spec(depthwise_model, tuple(CPU_FLAGS), folder, 60.0)
    assert spec is not None
    return spec


def _compile(model: Path, output: Path, *flags: str) -> None:
    subprocess.run([IREE_COMPILE, str(model), *CPU_FLAGS, *flags, "-o", str(output)], check=True)


def _pipelines(model: Path, folder: Path, *flags: str) -> list[str]:
    """The CPU pipelines the compiler chose for the model's dispatches."""
    configured = folder / "configured.mlir"
    _compile(model, configured, *flags, "--compile-to=executable-configurations")
    return re.findall(r"pipeline = #iree_cpu\.pipeline<(\w+)>", configured.read_text())


def test_the_channel_counts_of_the_depthwise_convolutions_are_found(
    depthwise_model: Path, depthwise_spec: Path
) -> None:
    converted = depthwise_spec.parent / "converted.mlir"
    _compile(depthwise_model, converted, "--compile-to=input")
    assert find_depthwise_channels(converted.read_text()) == (16, 24)
    assert depthwise_spec.name == SPEC_FILE_NAME and is_generated_spec(depthwise_spec)
    # Only the spec is left behind in the folder.
    assert sorted(p.name for p in depthwise_spec.parent.iterdir()) == sorted(
        [SPEC_FILE_NAME, "converted.mlir"]
    )


def test_a_model_without_depthwise_convolutions_gets_no_spec(tmp_path: Path) -> None:
    model = tmp_path / "matmul.mlir"
    model.write_text(MATMUL_MODEL)
    assert write_depthwise_spec(model, tuple(CPU_FLAGS), tmp_path / "flags", 60.0) is None
    assert not (tmp_path / "flags" / SPEC_FILE_NAME).exists()
    target = parse_target(TEST_TARGET)
    assert target.model_flag_space(model, tmp_path / "flags", 60.0) == CPU_FLAG_SPACE


def test_the_spec_makes_the_depthwise_convolutions_channels_last_with_the_same_outputs(
    depthwise_model: Path, depthwise_spec: Path, tmp_path: Path
) -> None:
    with_spec = (PREPROCESSING, spec_flag(depthwise_spec))
    # NCHW, the depthwise convolutions go through the generic pipeline; channels-last, IREE
    # recognises them and decomposes them, vectors along the channels.
    assert "ConvTileAndDecomposeExpert" not in _pipelines(depthwise_model, tmp_path, PREPROCESSING)
    assert (
        _pipelines(depthwise_model, tmp_path, *with_spec).count("ConvTileAndDecomposeExpert") == 2
    )
    binaries = {"channels_last": tmp_path / "cl.vmfb", "depthwise": tmp_path / "dw.vmfb"}
    _compile(depthwise_model, binaries["channels_last"], PREPROCESSING)
    _compile(depthwise_model, binaries["depthwise"], *with_spec)
    assert binaries["channels_last"].read_bytes() != binaries["depthwise"].read_bytes()
    rng = np.random.default_rng(0)
    inputs = tmp_path / "inputs.npz"
    arrays = [rng.standard_normal(shape).astype(np.float32) for shape in INPUT_SHAPES]
    np.savez(inputs, **{f"arg{i}": array for i, array in enumerate(arrays)})
    runs = run_models_side_by_side_here(
        ModelComparison(list(binaries.items()), "main", inputs, tmp_path, "local-task", 1)
    )
    assert all(run.ok for run in runs.values()), {k: r.reason for k, r in runs.items()}
    (reference,) = runs["channels_last"].outputs
    (output,) = runs["depthwise"].outputs
    assert float(np.abs(reference).max()) > 0.1
    np.testing.assert_allclose(output, reference, rtol=1e-4, atol=1e-4)


def test_the_model_flag_space_seeds_and_searches_the_spec(
    depthwise_model: Path, tmp_path: Path
) -> None:
    target = parse_target(TEST_TARGET)
    space = target.model_flag_space(depthwise_model, tmp_path / "flags", 60.0)
    spec = tmp_path / "flags" / SPEC_FILE_NAME
    assert is_generated_spec(spec)
    flag = spec_flag(spec)
    seeds = propose_flag_sets(space, 48)
    assert any(flag in s.flags and PREPROCESSING in s.flags for s in seeds)
    (tuned,) = [o for o in space.tuned if o.name == TRANSFORM_SPEC_FLAG]
    assert tuned.values == (str(spec.resolve()),) and tuned.depends_on
    # Everything else is the target's space as it was.
    assert space.tuned[:-1] == CPU_FLAG_SPACE.tuned
    assert space.options[:-1] == CPU_FLAG_SPACE.options


def test_a_run_folder_carries_the_spec_only_as_ireetune_wrote_it(tmp_path: Path) -> None:
    spec = tmp_path / SPEC_FILE_NAME
    spec.write_text(render_spec((16, 24)))
    check_folder_flags((spec_flag(spec),), "folder")
    # Another transform spec under the same name, or the same text under another, is refused.
    spec.write_text(render_spec((16, 24)).replace("[0, 0, 0, 16, 0, 0]", "[0, 0, 16, 0, 0, 0]"))
    with pytest.raises(IreetuneError, match="not a flag a run folder may carry"):
        check_folder_flags((spec_flag(spec),), "folder")
    other = tmp_path / "other.mlir"
    other.write_text(render_spec((16, 24)))
    with pytest.raises(IreetuneError, match="not a flag a run folder may carry"):
        check_folder_flags((spec_flag(other),), "folder")
    with pytest.raises(IreetuneError, match="not a flag a run folder may carry"):
        check_folder_flags((spec_flag(tmp_path / "missing" / SPEC_FILE_NAME),), "folder")


def test_a_spec_needs_a_positive_channel_count() -> None:
    with pytest.raises(ValueError, match="positive"):
        render_spec(())
    with pytest.raises(ValueError, match="positive"):
        render_spec((0,))


def test_a_compile_on_another_node_gets_the_spec_its_flags_name(
    depthwise_model: Path, depthwise_spec: Path, tmp_path: Path
) -> None:
    """A Ray node may not have the run folder: the spec travels with the compile."""
    spec = tmp_path / "driver" / SPEC_FILE_NAME
    spec.parent.mkdir()
    spec.write_bytes(depthwise_spec.read_bytes())
    request = CompileRequest(
        depthwise_model, tmp_path / "here.vmfb", target_flags=tuple(CPU_FLAGS),
        phase_flags=(PREPROCESSING, spec_flag(spec)), timeout_s=120.0,
    )  # fmt: skip
    shipped = _ShippedCompile(request, None, "", read_flag_files(request))
    source = depthwise_model.read_bytes()
    # On this host the driver's path is there: the binary a node makes from it...
    unshipped = replace(shipped, flag_files=())
    here = compile_shipped(unshipped, source)
    assert here.result.ok and here.binary
    spec.unlink()  # ...and the node's view, where it is not
    remote = compile_shipped(shipped, source)
    assert remote.result.ok and remote.binary == here.binary
    lost = compile_shipped(unshipped, source).result
    assert not lost.ok and str(spec) in lost.error_line + lost.stderr
