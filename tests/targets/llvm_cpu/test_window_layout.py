"""NCHW depthwise convolutions and pools turned channels-last by a transform spec made for the model
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
from ireetune.core.errors import IreetuneError
from ireetune.core.flag_space import FlagSet, TunedOption, parse_configuration, propose_flag_sets
from ireetune.executor.flag_files import read_flag_files
from ireetune.executor.ray_executor import _ShippedCompile, compile_shipped
from ireetune.flags.strategy import propose_single_changes
from ireetune.flows.handoff.folder_flags import check_folder_flags
from ireetune.model.timing import ModelComparison, run_models_side_by_side_here
from ireetune.targets import parse_target
from ireetune.targets.llvm_cpu.flags import CHANNELS_LAST, CPU_FLAG_SPACE
from ireetune.targets.llvm_cpu.window_layout import (
    SPEC_FILE_NAME,
    TRANSFORM_SPEC_FLAG,
    TRANSPOSED_SPEC_FILE_NAME,
    find_windows,
    is_generated_spec,
    render_spec,
    spec_flag,
    write_window_specs,
)
from tests.conftest import CPU_FLAGS, IREE_COMPILE, MATMUL_MODEL, TEST_TARGET

# A pointwise convolution feeding two depthwise ones (16 and 24 channels, one strided), then a
# max pool: MobileNet-v2's inverted-residual block and SqueezeNet's pool, NCHW as the ONNX importer
# writes them.
WINDOW_MODEL = """
func.func @main(%x: tensor<1x8x20x20xf32>, %w: tensor<16x8x1x1xf32>, %d: tensor<16x3x3xf32>,
                %w2: tensor<24x16x1x1xf32>, %d2: tensor<24x3x3xf32>) -> tensor<1x24x6x6xf32> {
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
  %low = arith.constant -3.40282347E+38 : f32
  %window = tensor.empty() : tensor<3x3xf32>
  %e4 = tensor.empty() : tensor<1x24x6x6xf32>
  %f4 = linalg.fill ins(%low : f32) outs(%e4 : tensor<1x24x6x6xf32>) -> tensor<1x24x6x6xf32>
  %m = linalg.pooling_nchw_max {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
      ins(%r, %window : tensor<1x24x8x8xf32>, tensor<3x3xf32>) outs(%f4 : tensor<1x24x6x6xf32>) -> tensor<1x24x6x6xf32>
  return %m : tensor<1x24x6x6xf32>
}
"""
INPUT_SHAPES = ((1, 8, 20, 20), (16, 8, 1, 1), (16, 3, 3), (24, 16, 1, 1), (24, 3, 3))
PREPROCESSING = f"--iree-preprocessing-pass-pipeline={CHANNELS_LAST}"
DECOMPOSED = "ConvTileAndDecomposeExpert"
WINDOWS = (
    ("depthwise_conv_2d_nchw_chw", 16, 3, 3),
    ("depthwise_conv_2d_nchw_chw", 24, 3, 3),
    ("pooling_nchw_max", 24, 3, 3),
)


@pytest.fixture(scope="module")
def window_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("window_model") / "windows.mlir"
    path.write_text(WINDOW_MODEL)
    return path


@pytest.fixture(scope="module")
def window_specs(window_model: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ...]:
    """The two forms' specs: transposed, then packed."""
    folder = tmp_path_factory.mktemp("window_spec")
    return write_window_specs(window_model, tuple(CPU_FLAGS), folder, 60.0)


@pytest.fixture(scope="module")
def window_spec(window_specs: tuple[Path, ...]) -> Path:
    """The packed form's spec."""
    return window_specs[1]


def _compile(model: Path, output: Path, *flags: str) -> None:
    subprocess.run([IREE_COMPILE, str(model), *CPU_FLAGS, *flags, "-o", str(output)], check=True)


def _pipelines(model: Path, folder: Path, *flags: str) -> list[str]:
    """The CPU pipelines the compiler chose for the model's dispatches."""
    configured = folder / "configured.mlir"
    _compile(model, configured, *flags, "--compile-to=executable-configurations")
    return re.findall(r"pipeline = #iree_cpu\.pipeline<(\w+)>", configured.read_text())


def _window_ops(model: Path, folder: Path, *flags: str) -> list[str]:
    """The NCHW window ops left in the model once preprocessing ran."""
    preprocessed = folder / "preprocessed.mlir"
    _compile(model, preprocessed, *flags, "--compile-to=preprocessing")
    return re.findall(
        r"linalg\.(?:depthwise_conv_2d_nchw_chw|pooling_nchw_\w+)\b", preprocessed.read_text()
    )


def test_the_window_ops_and_their_channel_counts_are_found(
    window_model: Path, window_specs: tuple[Path, ...]
) -> None:
    transposed, packed = window_specs
    converted = packed.parent / "converted.mlir"
    _compile(window_model, converted, "--compile-to=input")
    assert find_windows(converted.read_text()) == WINDOWS
    assert packed.name == SPEC_FILE_NAME and is_generated_spec(packed)
    assert transposed.name == TRANSPOSED_SPEC_FILE_NAME and is_generated_spec(transposed)
    assert packed.read_text() == render_spec(WINDOWS)
    assert transposed.read_text() == render_spec(WINDOWS, transposed=True)
    # Only the specs are left behind in the folder.
    assert sorted(p.name for p in packed.parent.iterdir()) == sorted(
        [SPEC_FILE_NAME, TRANSPOSED_SPEC_FILE_NAME, "converted.mlir"]
    )


def test_a_model_without_window_ops_gets_no_spec(tmp_path: Path) -> None:
    model = tmp_path / "matmul.mlir"
    model.write_text(MATMUL_MODEL)
    assert write_window_specs(model, tuple(CPU_FLAGS), tmp_path / "flags", 60.0) == ()
    assert not (tmp_path / "flags" / SPEC_FILE_NAME).exists()
    target = parse_target(TEST_TARGET)
    assert target.model_flag_space(model, tmp_path / "flags", 60.0) == CPU_FLAG_SPACE


@pytest.mark.parametrize("form", ["transposed", "packed"])
def test_the_spec_makes_the_windows_channels_last_with_the_same_outputs(
    window_model: Path, window_specs: tuple[Path, ...], form: str, tmp_path: Path
) -> None:
    with_spec = (PREPROCESSING, spec_flag(window_specs[form == "packed"]))
    # The channels-last pipeline leaves the NCHW windows as they are; the spec packs each one's
    # channel loop (the generic that results is an NHWC window to IREE).
    windows = ["linalg.depthwise_conv_2d_nchw_chw"] * 2 + ["linalg.pooling_nchw_max"]
    assert _window_ops(window_model, tmp_path, PREPROCESSING) == windows
    assert _window_ops(window_model, tmp_path, *with_spec) == []
    # NCHW, the depthwise convolutions go through the generic pipeline; channels-last, IREE
    # decomposes every window, vectors along the channels.
    assert _pipelines(window_model, tmp_path, PREPROCESSING).count(DECOMPOSED) <= 1
    assert _pipelines(window_model, tmp_path, *with_spec).count(DECOMPOSED) == 3
    binaries = {"channels_last": tmp_path / "cl.vmfb", "windows": tmp_path / "windows.vmfb"}
    _compile(window_model, binaries["channels_last"], PREPROCESSING)
    _compile(window_model, binaries["windows"], *with_spec)
    assert binaries["channels_last"].read_bytes() != binaries["windows"].read_bytes()
    rng = np.random.default_rng(0)
    inputs = tmp_path / "inputs.npz"
    arrays = [rng.standard_normal(shape).astype(np.float32) for shape in INPUT_SHAPES]
    np.savez(inputs, **{f"arg{i}": array for i, array in enumerate(arrays)})
    runs = run_models_side_by_side_here(
        ModelComparison(list(binaries.items()), "main", inputs, tmp_path, "local-task", 1)
    )
    assert all(run.ok for run in runs.values()), {k: r.reason for k, r in runs.items()}
    (reference,) = runs["channels_last"].outputs
    (output,) = runs["windows"].outputs
    assert float(np.abs(reference).max()) > 0.1
    np.testing.assert_allclose(output, reference, rtol=1e-4, atol=1e-4)


def test_the_model_flag_space_seeds_and_searches_the_spec(
    window_model: Path, tmp_path: Path
) -> None:
    target = parse_target(TEST_TARGET)
    space = target.model_flag_space(window_model, tmp_path / "flags", 60.0)
    specs = [tmp_path / "flags" / name for name in (TRANSPOSED_SPEC_FILE_NAME, SPEC_FILE_NAME)]
    assert all(is_generated_spec(spec) for spec in specs)
    seeds = propose_flag_sets(space, 48)
    for flag in map(spec_flag, specs):
        # Each form is a seed with the channels-last pipeline...
        assert any(flag in s.flags and PREPROCESSING in s.flags for s in seeds)
        # ...and on the convolution seed.
        assert any(
            flag in s.flags and "--iree-global-opt-use-im2col-for-convs" in s.flags for s in seeds
        )
    (tuned,) = [o for o in space.tuned if o.name == TRANSFORM_SPEC_FLAG]
    assert tuned.values == tuple(str(spec.resolve()) for spec in specs) and tuned.depends_on
    # Everything else is the target's space as it was.
    assert space.tuned[0] is tuned and space.tuned[1:] == CPU_FLAG_SPACE.tuned
    # Declared first: the first change a step proposes after its ablations (a step capped by
    # the number of sets still tries it).
    incumbent = parse_configuration(FlagSet(("--iree-opt-data-tiling",)))
    changes = [change for change, _ in propose_single_changes(incumbent, space.tuned)]
    assert next(c for c in changes if c[0] not in incumbent) == tuned_change(tuned)
    assert space.options[:-1] == CPU_FLAG_SPACE.options


def test_a_run_folder_carries_the_spec_only_as_ireetune_wrote_it(tmp_path: Path) -> None:
    spec = tmp_path / SPEC_FILE_NAME
    spec.write_text(render_spec(WINDOWS))
    check_folder_flags((spec_flag(spec),), "folder")
    # Another transform spec under the same name, or the same text under another, is refused.
    spec.write_text(render_spec(WINDOWS).replace("[0, 0, 0, 16, 0, 0]", "[0, 0, 16, 0, 0, 0]"))
    with pytest.raises(IreetuneError, match="not a flag a run folder may carry"):
        check_folder_flags((spec_flag(spec),), "folder")
    other = tmp_path / "other.mlir"
    other.write_text(render_spec(WINDOWS))
    with pytest.raises(IreetuneError, match="not a flag a run folder may carry"):
        check_folder_flags((spec_flag(other),), "folder")
    with pytest.raises(IreetuneError, match="not a flag a run folder may carry"):
        check_folder_flags((spec_flag(tmp_path / "missing" / SPEC_FILE_NAME),), "folder")
    # The transposed form under its own name; each form's text under the other's name is refused.
    transposed = tmp_path / TRANSPOSED_SPEC_FILE_NAME
    transposed.write_text(render_spec(WINDOWS, transposed=True))
    check_folder_flags((spec_flag(transposed),), "folder")
    spec.write_text(render_spec(WINDOWS, transposed=True))
    transposed.write_text(render_spec(WINDOWS))
    for path in (spec, transposed):
        with pytest.raises(IreetuneError, match="not a flag a run folder may carry"):
            check_folder_flags((spec_flag(path),), "folder")


def test_a_spec_needs_known_ops_and_positive_channel_counts() -> None:
    with pytest.raises(ValueError, match="positive"):
        render_spec(())
    with pytest.raises(ValueError, match="positive"):
        render_spec((("pooling_nchw_max", 0, 3, 3),))
    with pytest.raises(ValueError, match="positive"):
        render_spec((("pooling_nchw_max", 16, 0, 3),))
    with pytest.raises(ValueError, match="known window ops"):
        render_spec((("conv_2d_nchw_fchw", 16, 3, 3),))


def test_a_compile_on_another_node_gets_the_spec_its_flags_name(
    window_model: Path, window_spec: Path, tmp_path: Path
) -> None:
    """A Ray node may not have the run folder: the spec travels with the compile."""
    spec = tmp_path / "driver" / SPEC_FILE_NAME
    spec.parent.mkdir()
    spec.write_bytes(window_spec.read_bytes())
    request = CompileRequest(
        window_model, tmp_path / "here.vmfb", target_flags=tuple(CPU_FLAGS),
        phase_flags=(PREPROCESSING, spec_flag(spec)), timeout_s=120.0,
    )  # fmt: skip
    shipped = _ShippedCompile(request, None, "", read_flag_files(request))
    source = window_model.read_bytes()
    # On this host the driver's path is there: the binary a node makes from it...
    unshipped = replace(shipped, flag_files=())
    here = compile_shipped(unshipped, source)
    assert here.result.ok and here.binary
    spec.unlink()  # ...and the node's view, where it is not
    remote = compile_shipped(shipped, source)
    assert remote.result.ok and remote.binary == here.binary
    lost = compile_shipped(unshipped, source).result
    assert not lost.ok and str(spec) in lost.error_line + lost.stderr


def tuned_change(option: TunedOption) -> tuple[str, str]:
    return option.name, option.values[0]


def test_a_global_pool_is_left_out() -> None:
    """A pool whose window is the whole image is a reduction (packed, SqueezeNet's made the
    compile fail under data tiling); a 3x3 one of the same image is a window."""
    attributes = "{dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}"
    converted = (
        f"%g = linalg.pooling_nchw_sum {attributes} ins(%a, %k : tensor<1x1000x13x13xf32>, "
        "tensor<13x13xf32>) outs(%o : tensor<1x1000x1x1xf32>) -> tensor<1x1000x1x1xf32>\n"
        f"%w = linalg.pooling_nchw_sum {attributes} ins(%b, %j : tensor<1x64x13x13xf32>, "
        "tensor<3x3xf32>) outs(%p : tensor<1x64x11x11xf32>) -> tensor<1x64x11x11xf32>\n"
    )
    assert find_windows(converted) == (("pooling_nchw_sum", 64, 3, 3),)


def test_the_spec_reaches_only_the_windows_it_lists(window_model: Path, tmp_path: Path) -> None:
    """A matcher checks the op, its channels and its window: the 24-channel depthwise
    convolution (not listed) and the 3x3 pool (listed as 2x2) stay NCHW."""
    spec = tmp_path / SPEC_FILE_NAME
    spec.write_text(
        render_spec((("depthwise_conv_2d_nchw_chw", 16, 3, 3), ("pooling_nchw_max", 24, 2, 2)))
    )
    left = _window_ops(window_model, tmp_path, PREPROCESSING, spec_flag(spec))
    assert left == ["linalg.depthwise_conv_2d_nchw_chw", "linalg.pooling_nchw_max"]


def test_the_transposed_form_fuses_the_windows_into_their_channels_last_neighbours(
    window_model: Path, window_specs: tuple[Path, ...], tmp_path: Path
) -> None:
    """Packed, each window's output is unpacked to NCHW in a dispatch of its own; transposed,
    the layout changes cancel against the channels-last convolutions' and those dispatches
    go (MobileNet-v2: 92 dispatches to 55)."""
    flags = (PREPROCESSING, "--iree-opt-aggressively-propagate-transposes")
    transposed, packed = (
        _dispatches(window_model, tmp_path, *flags, spec_flag(spec)) for spec in window_specs
    )
    assert sum("unpack" in name for name in packed) == 2
    assert not any("unpack" in name for name in transposed)
    assert len(transposed) < len(packed)
    # The windows are still there, three of them, each channels-last.
    assert sum(name.startswith("conv_") for name in transposed) == 3
    assert (
        _pipelines(window_model, tmp_path, *flags, spec_flag(window_specs[0])).count(DECOMPOSED)
        == 3
    )


def _dispatches(model: Path, folder: Path, *flags: str) -> list[str]:
    """The model's dispatches once they are formed, by their names' ends (`conv_18x18x16x3x3_f32`)."""
    flow = folder / "flow.mlir"
    _compile(model, flow, *flags, "--compile-to=flow")
    return re.findall(r"flow\.dispatch @[\w$]+::@[\w$]+?_dispatch_\d+_(\w+)", flow.read_text())
