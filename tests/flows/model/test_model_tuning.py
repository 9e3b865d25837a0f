"""Whole-model tuning: hot-dispatch ranking, inputs, selection logic, and real end-to-end runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from ireetune.core.errors import IreetuneError
from ireetune.frontend.dispatches import CONFIGURED_PROGRAM, dump_dispatches
from ireetune.frontend.model_inputs import (
    InputSpec,
    make_model_inputs,
    parse_input_spec,
    read_entry_signature,
)
from ireetune.model.hot import DispatchProfile, count_dispatch_invocations, select_hot_dispatches
from ireetune.model.select import find_harmful, is_faster, is_undecided, model_speedup
from ireetune.targets import parse_target
from tests.conftest import CPU_FLAGS, IREE_COMPILE, REPOSITORY

EXAMPLES = REPOSITORY / "examples"


def _profile(
    name: str, problem: str, ms: float, runs: int = 1, tunable: bool = True
) -> DispatchProfile:
    return DispatchProfile(name, Path(f"{name}.mlir"), problem, tunable, ms, runs)


def test_hot_set_stops_at_coverage_and_counts_untunable_time() -> None:
    profiles = [
        _profile("d0", "matmul_a", 5.0),
        _profile("d1", "conv_b", 3.0, tunable=False),
        _profile("d2", "matmul_c", 1.0, runs=1),
        _profile("d3", "matmul_d", 0.5),
        _profile("d4", "matmul_e", 0.5),
    ]
    hot = select_hot_dispatches(profiles, model_ms=11.0, coverage=0.8, max_dispatches=8)
    assert [p.name for p in hot.ranked] == ["d0", "d1", "d2", "d3", "d4"]
    assert [p.name for p in hot.selected] == ["d0", "d2"]
    assert (hot.explained_ms, hot.unexplained_ms, hot.covered_ms) == (10.0, 1.0, 6.0)


def test_hot_set_tunes_a_repeated_problem_once_and_obeys_the_maximum() -> None:
    profiles = [
        _profile("d0", "matmul_a", 2.0, runs=3),
        _profile("d1", "matmul_a", 2.0),
        _profile("d2", "matmul_b", 1.0),
    ]
    hot = select_hot_dispatches(profiles, model_ms=9.0, coverage=1.0, max_dispatches=8)
    assert [p.name for p in hot.selected] == ["d0", "d2"]
    assert hot.covered_ms == 9.0
    assert [
        p.name for p in select_hot_dispatches(profiles, 9.0, 1.0, max_dispatches=1).selected
    ] == ["d0"]


def test_invocations_are_counted_from_the_compiled_program(tmp_path: Path) -> None:
    dump_dispatches(EXAMPLES / "mlp.mlir", parse_target("cpu"), tmp_path, 120.0)
    counts = count_dispatch_invocations(tmp_path / CONFIGURED_PROGRAM)
    assert counts == {"mlp_dispatch_0": 1, "mlp_dispatch_1": 1}


def _weighted_model(folder: Path) -> Path:
    """A matmul by a constant weight: under data tiling the weight is packed by an initializer,
    once when the model loads, and the input in every call."""
    weights = np.arange(32 * 128, dtype="<f4") / 100.0
    blob = (np.array([4], dtype="<u4").tobytes() + weights.tobytes()).hex().upper()
    model = folder / "weighted.mlir"
    model.write_text(
        """func.func @main(%a: tensor<64x128xf32>) -> tensor<64x32xf32> {
  %w = arith.constant dense_resource<w> : tensor<128x32xf32>
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<64x32xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<64x32xf32>) -> tensor<64x32xf32>
  %r = linalg.matmul ins(%a, %w : tensor<64x128xf32>, tensor<128x32xf32>)
                     outs(%init : tensor<64x32xf32>) -> tensor<64x32xf32>
  return %r : tensor<64x32xf32>
}
{-#
  dialect_resources: { builtin: { w: "0x"""
        + blob
        + """" } }
#-}
"""
    )
    return model


def test_a_dispatch_only_an_initializer_launches_counts_no_launch_and_is_not_profiled(
    tmp_path: Path,
) -> None:
    from ireetune.executor import LocalExecutor
    from ireetune.model.prepare import ModelUnderTuning
    from ireetune.model.profile import AT_LOAD_NOTE, profile_dispatches

    target = parse_target("cpu").with_global_flags(("--iree-opt-data-tiling",))
    model = ModelUnderTuning(
        _weighted_model(tmp_path), "main", tmp_path / "inputs.npz", target, False, "local-task"
    )
    dispatches = profile_dispatches(LocalExecutor(), model, tmp_path, jobs=2, timed=True)
    # Named as the program names their executables (an encoding's name has no "_dispatch_").
    names = {d.index: d.name for d in dispatches.dumped}
    assert sorted(names.values()) == ["_encoding_0", "_encoding_1", "main_dispatch_0"]
    assert {p.name: p.invocations for p in dispatches.profiles} == {
        "_encoding_0": 0,
        "_encoding_1": 1,
        "main_dispatch_0": 1,
    }
    # The program the launches were counted in, with the model's weights, is not kept.
    assert not (tmp_path / "dispatches" / CONFIGURED_PROGRAM).exists()
    # The weight's pack is neither compiled nor timed, and counts for none of a call's time.
    assert sorted(names[index] for index in dispatches.binaries) == [
        "_encoding_1",
        "main_dispatch_0",
    ]
    profiles = {p.name: p for p in dispatches.profiles}
    weight, data, matmul = (profiles[n] for n in ("_encoding_0", "_encoding_1", "main_dispatch_0"))
    assert (weight.invocations, weight.dispatch_ms, weight.tunable) == (0, None, False)
    assert weight.problem == f"not tunable: {AT_LOAD_NOTE}"
    assert data.invocations == matmul.invocations == 1
    assert data.dispatch_ms is not None and matmul.dispatch_ms is not None
    assert matmul.tunable


TWICE = """
func.func @twice(%a: tensor<64x64xf32>, %b: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<64x64xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<64x64xf32>) -> tensor<64x64xf32>
  %c = linalg.matmul ins(%a, %b : tensor<64x64xf32>, tensor<64x64xf32>)
                     outs(%init : tensor<64x64xf32>) -> tensor<64x64xf32>
  %d = linalg.matmul ins(%c, %b : tensor<64x64xf32>, tensor<64x64xf32>)
                     outs(%init : tensor<64x64xf32>) -> tensor<64x64xf32>
  return %d : tensor<64x64xf32>
}
"""


def test_a_dispatch_launched_twice_is_counted_twice(tmp_path: Path) -> None:
    model = tmp_path / "twice.mlir"
    model.write_text(TWICE)
    (dumped,) = dump_dispatches(model, parse_target("cpu"), tmp_path / "dumps", 120.0)
    counts = count_dispatch_invocations(tmp_path / "dumps" / CONFIGURED_PROGRAM)
    assert counts == {dumped.name: 2}


def test_input_specs_and_the_entry_signature() -> None:
    assert parse_input_spec("1x3x224x224xf32") == InputSpec((1, 3, 224, 224), "f32")
    assert parse_input_spec("4xi8=2") == InputSpec((4,), "i8", "2")
    with pytest.raises(IreetuneError):
        parse_input_spec("banana")
    assert read_entry_signature((EXAMPLES / "mlp.mlir").read_text()) == (
        "mlp",
        [
            InputSpec((256, 512), "f32"),
            InputSpec((512, 1024), "f32"),
            InputSpec((1024, 256), "f32"),
        ],
    )
    torch_text = (
        "func.func @net(%arg0: !torch.vtensor<[1,3,8,8],f32>) -> !torch.vtensor<[1,10],f32> {"
    )
    assert read_entry_signature(torch_text) == ("net", [InputSpec((1, 3, 8, 8), "f32")])
    arrays = make_model_inputs([InputSpec((2, 2), "f32", "1.5"), InputSpec((3,), "i32")], seed=0)
    assert arrays[0].tolist() == [[1.5, 1.5], [1.5, 1.5]] and arrays[1].dtype == np.int32


def test_faster_means_the_paired_interval_clears_the_threshold() -> None:
    assert is_faster([10.0, 10.1, 9.9, 10.0], [9.0, 9.1, 8.9, 9.0])
    # Below the 1% threshold.
    assert not is_faster([10.0, 10.1, 9.9, 10.0], [9.95, 10.0, 9.9, 10.0])
    # The machine drifts a lot, but in every round (timed side by side) the candidate wins.
    assert is_faster([10.0, 14.0, 6.0, 10.0, 13.0], [9.0, 13.0, 5.0, 9.0, 12.0])
    # Same medians' ratio, but rounds disagree: not significant.
    assert not is_faster([10.0, 10.0, 10.0, 10.0, 10.0], [8.0, 11.0, 8.0, 11.0, 8.5])
    assert not is_faster([], [1.0])


# Rounds in which the trial wins by 5-12% and one in which the machine stalled it.
# Faster by its point estimate, noisy in its faster half too (one slow call alone is left out by
# the rule's faster-half mean, and would not keep a comparison undecided).
NOISY_WIN = ([10.0, 10.0, 10.0, 10.0, 10.0], [9.3, 10.8, 9.0, 11.0, 10.2])


def test_only_a_win_whose_interval_does_not_yet_clear_the_rule_is_undecided() -> None:
    assert is_undecided(model_speedup(*NOISY_WIN))
    assert not is_undecided(model_speedup([10.0] * 5, [9.0, 9.1, 8.9, 9.0, 9.05]))  # Clear win.
    assert not is_undecided(model_speedup([10.0] * 5, [11.0, 10.5, 12.0, 10.8, 11.1]))  # Loss.
    assert not is_undecided(None)


def test_an_undecided_comparison_gets_more_rounds_until_it_is_decided(tmp_path: Path) -> None:
    # The timing process is replaced by an executor of scripted batches: what is tested is when the loop asks
    # for more rounds and how it pools them, not the machine's noise.
    import ireetune.model.select as model_tuner
    from ireetune.executor import LocalExecutor
    from ireetune.model.timing import ModelComparison, ModelRun

    def batches(*trial_times: list[float]) -> list[tuple[list[float], list[float]]]:
        return [([10.0] * len(times), times) for times in trial_times]

    class ScriptedExecutor(LocalExecutor):
        """Answers each model comparison with the next scripted batch of times."""

        def __init__(self, script: list[tuple[list[float], list[float]]]) -> None:
            self.script = script
            self.calls: list[int] = []

        def run_models_side_by_side(self, comparison: ModelComparison) -> dict[str, ModelRun]:
            first, second = self.script[len(self.calls)]
            self.calls.append(comparison.rounds)
            models = comparison.models
            return {
                models[0][0]: ModelRun(models[0][0], (), tuple(first), ""),
                models[1][0]: ModelRun(models[1][0], (), tuple(second), ""),
            }

    pair = ModelComparison(
        [("current", tmp_path / "a.vmfb"), ("trial", tmp_path / "b.vmfb")], "main", tmp_path,
        tmp_path, "local-task", 5,
    )  # fmt: skip
    # Undecided, then clearly faster: two batches, pooled.
    executor = ScriptedExecutor(batches(NOISY_WIN[1], [9.0, 9.1, 8.9, 9.0, 9.05]))
    runs = model_tuner.time_pair_until_decided(executor, pair)
    assert executor.calls == [5, 5] and len(runs["trial"].times_ms) == 10
    assert is_faster(runs["current"].times_ms, runs["trial"].times_ms)
    # A loss is not timed again.
    executor = ScriptedExecutor(batches([11.0, 10.5, 12.0, 10.8, 11.1]))
    model_tuner.time_pair_until_decided(executor, pair)
    assert executor.calls == [5]
    # Undecided for ever: the first batch and at most MAX_EXTRA_BATCHES more.
    executor = ScriptedExecutor(batches(*[NOISY_WIN[1]] * 5))
    model_tuner.time_pair_until_decided(executor, pair)
    assert executor.calls == [5] * (1 + model_tuner.MAX_EXTRA_BATCHES)


def test_an_undecided_comparison_spends_the_time_it_is_given_on_a_few_more_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ireetune.model.select as model_tuner
    from ireetune.executor import LocalExecutor
    from ireetune.model.timing import ModelComparison, ModelRun

    clock = [0.0]

    class TenSecondBatches(LocalExecutor):
        """Answers every comparison with the same batch, ten seconds of the clock."""

        def __init__(self) -> None:
            self.calls = 0

        def run_models_side_by_side(self, comparison: ModelComparison) -> dict[str, ModelRun]:
            self.calls += 1
            clock[0] += 10.0
            models = comparison.models
            return {
                models[0][0]: ModelRun(models[0][0], (), (10.0,) * 5, ""),
                models[1][0]: ModelRun(models[1][0], (), tuple(NOISY_WIN[1]), ""),
            }

    monkeypatch.setattr(model_tuner, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    # Undecided however many rounds are pooled: what is tested is how many batches time allows.
    monkeypatch.setattr(model_tuner, "is_undecided", lambda estimate, rule: True)
    pair = ModelComparison(
        [("current", tmp_path / "a.vmfb"), ("trial", tmp_path / "b.vmfb")], "main", tmp_path,
        tmp_path, "local-task", 5,
    )  # fmt: skip

    def batches_until(until: float | None) -> int:
        clock[0] = 0.0
        executor = TenSecondBatches()
        model_tuner.time_pair_until_decided(executor, pair, until)
        return executor.calls

    # The usual batches take 30 s; two more end by 55 s, a third would end at 60 s.
    assert batches_until(55.0) == 1 + model_tuner.MAX_EXTRA_BATCHES + 2
    # The usual batches even when the time is already spent, and no more without a limit.
    assert batches_until(5.0) == 1 + model_tuner.MAX_EXTRA_BATCHES
    assert batches_until(None) == 1 + model_tuner.MAX_EXTRA_BATCHES
    # Never more than MAX_EXTRA_BATCHES_IN_TIME, however long the time.
    assert batches_until(1e9) == 1 + model_tuner.MAX_EXTRA_BATCHES_IN_TIME


def test_harmful_specs_are_dropped_one_at_a_time() -> None:
    # Measured model: "b" slows everything down; "a" and "c" help.
    cost = {"a": -1.0, "b": +3.0, "c": -0.5}

    def better_without(current: Sequence[str], trial: Sequence[str]) -> bool:
        return sum(cost[n] for n in trial) < sum(cost[n] for n in current)

    assert find_harmful(["a", "b", "c"], better_without) == ["b"]


def test_harm_dropping_keeps_the_one_spec_that_helps() -> None:
    # [a, b] and [a] are faster than the default, [b] is slower than [a, b]: only b goes.
    time_of = {("a", "b"): 9.0, ("a",): 8.0, ("b",): 11.0, (): 10.0}
    compared: list[tuple[tuple[str, ...], tuple[str, ...]]] = []

    def better_without(current: Sequence[str], trial: Sequence[str]) -> bool:
        compared.append((tuple(current), tuple(trial)))
        return time_of[tuple(trial)] < time_of[tuple(current)]

    assert find_harmful(["a", "b"], better_without) == ["b"]
    # Each trial is compared with the current subset, never with the full set.
    assert compared == [(("a", "b"), ("b",)), (("a", "b"), ("a",))]


def test_harm_dropping_compares_the_last_spec_with_the_default() -> None:
    # Both [a, b] and [b] beat the default: dropping down to nothing must be measured, not assumed.
    time_of = {("a", "b"): 9.0, ("b",): 8.5, (): 10.0}

    def better_without(current: Sequence[str], trial: Sequence[str]) -> bool:
        return time_of[tuple(trial)] < time_of[tuple(current)]

    assert find_harmful(["a", "b"], better_without) == ["a"]


def test_the_harm_search_stops_when_the_budget_has_no_room_for_a_trial() -> None:
    # "c" would be dropped, but the budget has room for two trials only: "c" is kept untried.
    cost = {"a": -1.0, "b": +3.0, "c": +2.0}
    tried: list[str] = []

    def better_without(current: Sequence[str], trial: Sequence[str]) -> bool:
        tried.append(next(n for n in current if n not in trial))
        return sum(cost[n] for n in trial) < sum(cost[n] for n in current)

    assert find_harmful(["a", "b", "c"], better_without, lambda: len(tried) < 2) == ["b"]
    assert tried == ["a", "b"]


def _tune(model: Path, output: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "ireetune.cli",
            "tune",
            str(model),
            "--output-dir",
            str(output),
            "--num-candidates",
            "3",
            "--candidates-per-dispatch",
            "1",
            "--rounds",
            "2",
            # The flag phase has its own tests (test_flag_search.py); these are about dispatches.
            "--no-flag-search",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env=dict(os.environ),
    )


def test_tune_mlp_end_to_end_writes_a_report_and_a_usable_spec(tmp_path: Path) -> None:
    # --devices reaches the model timing and every dispatch's tuning (local-sync runs the same
    # llvm-cpu binaries as local-task, on the calling thread).
    result = _tune(
        EXAMPLES / "mlp.mlir", tmp_path, "--max-dispatches", "2", "--devices", "local-sync"
    )
    assert result.returncode == 0, result.stderr
    (run_dir,) = tmp_path.iterdir()
    tuning_runs = [json.loads(p.read_text()) for p in (run_dir / "tuning").glob("*/results.json")]
    assert tuning_runs and all(r["devices"] == ["local-sync"] for r in tuning_runs)
    report = json.loads((run_dir / "report.json").read_text())
    assert report["devices"] == ["local-sync"]
    assert [d["name"] for d in report["dispatches"]][:2] in (
        ["mlp_dispatch_0", "mlp_dispatch_1"],
        ["mlp_dispatch_1", "mlp_dispatch_0"],
    )
    assert all(d["problem"].startswith("matmul_") for d in report["dispatches"])
    assert "default" in (run_dir / "report.txt").read_text()
    profile = json.loads((run_dir / "profile.json").read_text())
    assert profile["model_ms"] > 0 and len(profile["dispatches"]) == 2
    # Both dispatches' first candidates are tried together, first, and each alone.
    trials = json.loads((run_dir / "selection" / "trials.json").read_text())
    assert [t["variant"] for t in trials] == ["best", "d0c0", "d1c0"], trials
    assert {t["specs"][0] for t in trials[1:]} == set(trials[0]["specs"])
    timed = [t for t in trials if t["status"] == "compiled"]
    assert all(t["trial_ms"] > 0 and t["outputs_match"] for t in timed), timed
    # Each binary's hash stays, as the variant binaries' removal says.
    assert all(len(t["binary_hash"]) == 64 for t in timed), timed
    assert sum(1 for t in timed if t["accepted"]) <= 1, timed
    # All of them in one first session beside the default model.
    sessions = json.loads((run_dir / "selection" / "sessions.json").read_text())
    assert set(sessions["first"]) == {"default", *(t["variant"] for t in timed)}
    # Reported, the run removes the variants' binaries (whole models) and keeps their specs.
    assert not list((run_dir / "selection").glob("*.vmfb"))
    assert {f"{t['variant']}_spec.mlir" for t in timed} <= {
        p.name for p in (run_dir / "selection").iterdir()
    }
    assert "note: removed the selection's" in (run_dir / "report.txt").read_text()
    assert any(n.startswith("removed the selection's") for n in report["notes"])
    if report["tuned_spec"]:
        compiled = subprocess.run(
            [
                IREE_COMPILE,
                str(EXAMPLES / "mlp.mlir"),
                *CPU_FLAGS,
                f"--iree-codegen-tuning-spec-path={report['tuned_spec']}",
                "--mlir-disable-threading",
                "-o",
                str(tmp_path / "tuned.vmfb"),
            ],
            capture_output=True,
            text=True,
        )
        assert compiled.returncode == 0, compiled.stderr
        assert report["speedup"] > 1.0
    else:
        assert report["speedup"] == 1.0


def test_tune_squeezenet_from_the_onnx_package(tmp_path: Path) -> None:
    onnx = pytest.importorskip("onnx")
    model = Path(onnx.__file__).parent / "backend/test/data/light/light_squeezenet.onnx"
    result = _tune(model, tmp_path, "--max-dispatches", "1", "--time-budget", "240")
    assert result.returncode == 0, result.stderr
    (run_dir,) = tmp_path.iterdir()
    profile = json.loads((run_dir / "profile.json").read_text())
    assert len(profile["dispatches"]) >= 20
    assert sum(d["invocations"] for d in profile["dispatches"]) >= len(profile["dispatches"])
    assert (run_dir / "import" / "light_squeezenet.mlir").exists()
    assert "squeezenet" in (run_dir / "report.txt").read_text()
