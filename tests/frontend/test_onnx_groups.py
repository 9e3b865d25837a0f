"""An ONNX model's grouped convolutions split per group before import (`--split-grouped-convs`),
and an in-process model run's choice between that import and the model as given."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from ireetune.core.errors import IreetuneError
from ireetune.executor import LocalExecutor
from ireetune.flows.model import phases
from ireetune.flows.model.options import ModelTuneOptions
from ireetune.flows.model.run import Mode, ModelTuningRun
from ireetune.frontend.model_import import count_splittable_groups, import_model
from ireetune.frontend.onnx_groups import split_grouped_convolutions
from ireetune.model.timing import ModelRun
from ireetune.targets import parse_target
from tests.conftest import CPU_FLAGS, IREE_COMPILE, TEST_TARGET


def _grouped_model(path: Path) -> onnx.ModelProto:
    """A grouped 3x3 convolution (2 groups of 4 input channels, bias), a ReLU (one input), then a
    depthwise convolution (8 groups of one channel), with seeded weights."""
    rng = np.random.default_rng(7)

    def weights(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], group=2, pads=[1, 1, 1, 1], name="g"),
        helper.make_node("Relu", ["c"], ["y"]),
        helper.make_node("Conv", ["y", "dw"], ["z"], group=8, kernel_shape=[3, 3], name="d"),
    ]
    graph = helper.make_graph(
        nodes, "grouped",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 8, 4, 4])],
        [weights("w", 8, 4, 3, 3), weights("b", 8), weights("dw", 8, 1, 3, 3)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))
    return model


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = onnxruntime.InferenceSession(model.SerializeToString())
    return np.asarray(session.run(None, {"x": x})[0])


def test_a_grouped_convolution_becomes_one_per_group_with_the_same_outputs(
    tmp_path: Path,
) -> None:
    model = _grouped_model(tmp_path / "grouped.onnx")
    x = np.random.default_rng(3).standard_normal((1, 8, 6, 6)).astype(np.float32)
    before = _run(model, x)
    assert split_grouped_convolutions(model) == 1
    onnx.checker.check_model(model)
    kinds = [(node.op_type, next((a.i for a in node.attribute if a.name == "group"), 1))
             for node in model.graph.node]  # fmt: skip
    # The depthwise convolution (one input channel a group) stays as it is.
    assert kinds == [
        ("Split", 1), ("Conv", 1), ("Conv", 1), ("Concat", 1), ("Relu", 1), ("Conv", 8),
    ]  # fmt: skip
    # The whole weights of the split convolution are gone; its parts hold them.
    assert {t.name for t in model.graph.initializer} >= {"dw"}
    assert not {"w", "b"} & {t.name for t in model.graph.initializer}
    np.testing.assert_allclose(_run(model, x), before, rtol=1e-5, atol=1e-5)


def test_the_import_splits_the_groups_only_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "grouped.onnx"
    _grouped_model(path)
    notes: list[str] = []
    plain = import_model(path, tmp_path / "plain").read_text()
    split = import_model(path, tmp_path / "split", split_groups=True, notes=notes).read_text()
    assert plain.count('"onnx.Conv"') == 2 and plain.count('"onnx.Split"') == 0
    assert split.count('"onnx.Conv"') == 3 and split.count('"onnx.Split"') == 1
    assert notes == [
        "1 grouped convolution(s) split per group at import (--split-grouped-convs): the tuned "
        "flags and spec are for the run folder's import of the model"
    ]
    # An MLIR model is taken as it is, and the run says so.
    mlir = tmp_path / "plain" / "grouped.mlir"
    assert import_model(mlir, tmp_path / "again", split_groups=True, notes=notes) == mlir
    assert notes[-1] == "--split-grouped-convs applies to ONNX models only: the MLIR is as given"


def test_a_graph_the_split_cannot_read_is_refused_in_one_line(tmp_path: Path) -> None:
    """Weights whose output channels the groups do not divide (an invalid model) stop the
    import with one line, not a traceback."""
    model = _grouped_model(tmp_path / "grouped.onnx")
    weights = next(t for t in model.graph.initializer if t.name == "w")
    weights.CopyFrom(numpy_helper.from_array(np.ones((7, 4, 3, 3), np.float32), "w"))
    onnx.save(model, str(tmp_path / "odd.onnx"))
    with pytest.raises(IreetuneError, match="cannot split the grouped convolutions of odd.onnx"):
        import_model(tmp_path / "odd.onnx", tmp_path / "import", split_groups=True)


# Every path IREE 3.13 offers a convolution on the CPU: im2col, the channels-last rewrite and
# both data-tiling paths (DispatchCreation's late one, GlobalOptimization's early one).
GROUPED_PATHS = {
    "default": (),
    "im2col": ("--iree-global-opt-use-im2col-for-convs",),
    "channels-last": (
        "--iree-preprocessing-pass-pipeline="
        "builtin.module(util.func(iree-preprocessing-convert-conv-to-channels-last))",
    ),
    "late data tiling": ("--iree-opt-data-tiling", "--iree-global-opt-use-im2col-for-convs"),
    "early data tiling": (
        "--iree-global-opt-data-tiling", "--iree-global-opt-use-im2col-for-convs",
    ),
}  # fmt: skip


@pytest.mark.parametrize("path", list(GROUPED_PATHS))
def test_iree_keeps_a_grouped_convolution_whole_on_every_cpu_path(
    path: str, tmp_path: Path
) -> None:
    """Pinned for IREE 3.13: no compiler path turns a grouped convolution into ordinary ones (its
    dispatch keeps the group loop, `conv_2x...`); split per group, it is two ordinary ones. The
    day this fails, the compiler reaches them itself and the option may go."""
    model = tmp_path / "grouped.onnx"
    _grouped_model(model)
    names = {}
    for split in (False, True):
        mlir = import_model(model, tmp_path / f"import{split}", split_groups=split)
        flow = tmp_path / f"flow{split}.mlir"
        subprocess.run(
            [IREE_COMPILE, str(mlir), *CPU_FLAGS, *GROUPED_PATHS[path], "--compile-to=flow",
             "-o", str(flow)],
            check=True, capture_output=True,
        )  # fmt: skip
        names[split] = re.findall(
            r"flow\.executable\.export public @\S*?(conv_[0-9x]+)", flow.read_text()
        )
    assert any(name.startswith("conv_2x4x") for name in names[False]), names
    assert names[True] and not any(name.startswith("conv_2x") for name in names[True]), names


def _timed(times_ms: list[float], output: float = 1.0, reason: str = "") -> ModelRun:
    outputs = (np.full((2, 3), output, np.float32),) if not reason else ()
    return ModelRun("m", outputs, tuple(times_ms) if not reason else (), reason)


def test_the_split_import_is_chosen_only_faster_with_the_same_outputs() -> None:
    """Rounds of three calls side by side: the split import is kept only when the model rule's
    threshold lies below its whole interval and its outputs are the model's."""
    rng = np.random.default_rng(5)
    whole = _timed(list(10.0 + rng.uniform(0, 0.2, 18)))
    faster = _timed(list(4.0 + rng.uniform(0, 0.2, 18)))
    keep, note = phases.judge_split_import(whole, faster, 3)
    assert keep and note.startswith("3 grouped convolution(s) split per group at import: 2.")
    assert "--no-split-grouped-convs" in note
    # Within the noise, slower, different outputs, or not run: the model as given.
    same = _timed(list(10.0 + rng.uniform(0, 0.2, 18)))
    assert not phases.judge_split_import(whole, same, 3)[0]
    slower = phases.judge_split_import(faster, whole, 3)
    assert not slower[0] and "not faster than the model as given (0." in slower[1]
    differs = phases.judge_split_import(whole, _timed(faster.times_ms, output=2.0), 3)
    assert not differs[0] and "outputs differ" in differs[1]
    failed = phases.judge_split_import(whole, _timed([], reason="crashed"), 3)
    assert failed == (
        False, "3 grouped convolution(s) split per group: the split import did not run "
        "(crashed); tuned as given",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("given", "judged_faster"), [(None, True), (None, False), (False, True), (True, False)]
)
def test_an_in_process_run_times_the_split_import_unless_told_and_tunes_the_one_kept(
    given: bool | None, judged_faster: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the option, the prepare phase imports and compiles the model split too, times
    both, and the run tunes the one judged faster: its MLIR, default binary, time and outputs.
    With `--split-grouped-convs` or its `--no-` twin, one import, as told."""
    model = tmp_path / "grouped.onnx"
    _grouped_model(model)
    assert count_splittable_groups(model) == 1
    judged: list[tuple[ModelRun, ModelRun, int]] = []

    def judge(whole: ModelRun, split: ModelRun, count: int) -> tuple[bool, str]:
        judged.append((whole, split, count))
        return judged_faster, "judged"

    monkeypatch.setattr(phases, "judge_split_import", judge)
    options = ModelTuneOptions(
        model_path=model, output_dir=tmp_path, target=TEST_TARGET, split_grouped_convs=given,
        rounds=1,
    )  # fmt: skip
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    run = ModelTuningRun(
        Mode.IN_PROCESS, options, parse_target(TEST_TARGET), run_dir, LocalExecutor()
    )
    phases.prepare(run)
    assert run.model_file is not None
    tuned = (run_dir / run.model_file.mlir).read_text()
    split = given is True or (given is None and judged_faster)
    assert tuned.count('"onnx.Split"') == int(split) and tuned.count('"onnx.Conv"') == 2 + split
    assert run.under_tuning.mlir_path == run_dir / run.model_file.mlir
    if given is not None:
        assert not judged and not (run_dir / "import_split").exists()
        return
    ((whole, parts, count),) = judged
    assert count == 1 and whole.ok and parts.ok and run.notes[-1] == "judged"
    # Six rounds at least of three calls each, side by side.
    assert len(whole.times_ms) == len(parts.times_ms) == 18
    kept = parts if judged_faster else whole
    assert run.under_tuning.default_outputs == kept.outputs
    assert run.default_ms == min(
        float(np.median(kept.times_ms[i : i + 3])) for i in range(0, 18, 3)
    )
    # The default's binary and saved outputs, which a continued run reads, are the kept
    # import's; the other import leaves nothing behind.
    saved = np.load(run_dir / "default_outputs.npz")
    np.testing.assert_array_equal(saved[saved.files[0]], kept.outputs[0])
    assert not (run_dir / "groups_split_outputs.npz").exists()
    if judged_faster:
        binary = (run_dir / "import_split" / "default.vmfb").read_bytes()
        assert (run_dir / "default.vmfb").read_bytes() == binary
    else:
        assert not (run_dir / "import_split").exists()
