"""An ONNX model's grouped convolutions split per group before import (`--split-grouped-convs`),
and an in-process model run's choice between that import and the model as given."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from ireetune.core.errors import IreetuneError
from ireetune.decision.stats import Basis, SpeedupEstimate
from ireetune.executor import LocalExecutor
from ireetune.flows.model import flag_phase, import_choice, local, phases
from ireetune.flows.model.options import ModelTuneOptions
from ireetune.flows.model.run import Mode, ModelTuningRun
from ireetune.flows.model.state import read_run_file
from ireetune.flows.model.state_restore import restore_run, save_run
from ireetune.frontend.model_import import count_rewrites, import_model
from ireetune.frontend.onnx_groups import split_grouped_convolutions
from ireetune.model.final_check import FinalCheck
from ireetune.model.timing import ModelRun
from ireetune.targets import parse_target
from tests.conftest import CPU_FLAGS, IREE_COMPILE, TEST_TARGET


def count_splittable_groups(model_path: Path) -> int:
    """Return how many grouped convolutions the rewritten import of an ONNX model splits."""
    return count_rewrites(model_path)[0]


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
        "1 grouped convolution(s) split per group at import (--split-grouped-convs): what the "
        "run tunes, and the report's apply: line compiles, is the run folder's import"
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
    kept, note = import_choice.judge_split_import(whole, faster, 3, tuned_flags=True)
    assert kept is not None and 2.0 < kept.low <= kept.speedup <= kept.high
    assert note.startswith(f"3 grouped convolution(s) split per group at import: {kept.describe()}")
    assert "under the tuned flags" in note and "--no-split-grouped-convs" in note
    # Within the noise, slower, different outputs, or not run: the model as given.
    same = _timed(list(10.0 + rng.uniform(0, 0.2, 18)))
    assert import_choice.judge_split_import(whole, same, 3, tuned_flags=True)[0] is None
    slower = import_choice.judge_split_import(faster, whole, 3, tuned_flags=False)
    assert slower[0] is None and "not faster than the model as given (0." in slower[1]
    assert "at default flags" in slower[1]
    differs = import_choice.judge_split_import(whole, _timed(faster.times_ms, 2.0), 3, False)
    assert differs[0] is None and "outputs differ" in differs[1]
    failed = import_choice.judge_split_import(whole, _timed([], reason="crashed"), 3, False)
    assert failed == (
        None, "3 grouped convolution(s) split per group: the split import did not run at "
        "default flags (crashed); tuned as given",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("given", "flag_winner", "judged_faster"),
    [(None, False, True), (None, True, True), (None, True, False), (False, False, True),
     (True, False, False)],
)  # fmt: skip
def test_an_in_process_run_times_the_split_import_under_the_flags_kept_unless_told(
    given: bool | None,
    flag_winner: bool,
    judged_faster: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the option, the end of the flag phase imports the model split too, compiles it
    under the flags kept, times both, and the later phases tune the one judged faster: its MLIR
    and binary (a file of its own: the flag winner's stays as built). With
    `--split-grouped-convs` or its `--no-` twin, one import, as told."""
    model = tmp_path / "grouped.onnx"
    _grouped_model(model)
    assert count_splittable_groups(model) == 1
    judged: list[tuple[ModelRun, ModelRun, int, bool]] = []

    faster = SpeedupEstimate(2.0, 1.9, 2.1, 6, Basis.MODEL, 2.0, 1.0)

    def judge(
        whole: ModelRun, split: ModelRun, count: int, flags: bool, strided: int = 0
    ) -> tuple[SpeedupEstimate | None, str]:
        judged.append((whole, split, count, flags))
        return faster if judged_faster else None, "judged"

    def winner(run: ModelTuningRun) -> None:
        """A flag phase whose winner is the default's binary under another name."""
        if flag_winner:
            assert run.original_vmfb is not None
            (run.run_dir / "flags").mkdir()
            run.default_vmfb = run.run_dir / "flags" / "1.vmfb"
            shutil.copyfile(run.original_vmfb, run.default_vmfb)

    monkeypatch.setattr(import_choice, "judge_split_import", judge)
    monkeypatch.setattr(flag_phase, "search_flags", winner)
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
    as_given, default_ms = run.under_tuning, run.default_ms
    flag_phase.flag_phase(run)
    assert run.model is not None and run.default_vmfb is not None
    tuned = run.model.mlir_path.read_text()
    split = given is True or (given is None and judged_faster)
    assert tuned.count('"onnx.Split"') == int(split) and tuned.count('"onnx.Conv"') == 2 + split
    if given is not None:
        assert not judged and not (run_dir / "import_split").exists()
        return
    ((whole, parts, count, flags),) = judged
    assert count == 1 and flags is flag_winner and whole.ok and parts.ok
    assert run.notes[-1] == "judged"
    # Six rounds at least of three calls each, side by side.
    assert len(whole.times_ms) == len(parts.times_ms) == 18
    fastest_split = min(float(np.median(parts.times_ms[i : i + 3])) for i in range(0, 18, 3))
    assert run.default_ms == (fastest_split if judged_faster else default_ms)
    # The default's outputs (what candidates are checked against) stay the model's.
    assert run.under_tuning.default_outputs == as_given.default_outputs
    assert run.original_vmfb == run_dir / "default.vmfb"
    # The choice is saved with the flag phase and read back by a continued run.
    save_run(run)
    stored = read_run_file(run_dir)
    restored = restore_run(run_dir, stored, LocalExecutor(), None)
    assert restored.import_estimate == run.import_estimate == (faster if judged_faster else None)
    assert restored.under_tuning.mlir_path == run.under_tuning.mlir_path
    # The end of the run times the untouched default against the tuned model whenever the
    # run's default is not it (a flag winner, a switch), and records that binary as the tuned
    # model's.
    run.final = FinalCheck(None, run.default_ms, run.default_ms, None)
    combined, _, tuned_vmfb = local._finish_flags(run)
    built = judged_faster or flag_winner
    assert (combined is not None) is built
    assert tuned_vmfb == (run.default_vmfb if built else None)
    if not judged_faster:
        assert run.model is as_given and not (run_dir / "import_split").exists()
        return
    assert combined is not None and combined.baseline_ms > 0
    binary = (run_dir / "import_split" / "model.vmfb").read_bytes()
    assert run.default_vmfb == run_dir / "import_split" / "model.vmfb"
    assert run.original_vmfb.read_bytes() != binary
    if flag_winner:
        # The flag winner's binary is the one the flag phase built (and trials.json hashes).
        assert (run_dir / "flags" / "1.vmfb").read_bytes() == run.original_vmfb.read_bytes()
