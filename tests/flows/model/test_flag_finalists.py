"""The flag phase's finalists judged with the tuned dispatches: a real model compiled with a real
spec under each finalist's flags, timed in one session (the times scaled per model, so that the
verdict does not depend on this machine's load)."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ireetune.core.flag_space import FlagSet
from ireetune.decision.stats import Basis, SpeedupEstimate, Statistic
from ireetune.executor import LocalExecutor
from ireetune.flags.model_search import _speedup
from ireetune.flags.trials import FlagSearchResult, FlagTrial, TrialStatus
from ireetune.flows.model import local
from ireetune.flows.model.flag_finalists import FOLDER, find_runners_up, judge_flag_finalists
from ireetune.flows.model.local import decide, prepare
from ireetune.flows.model.options import ModelTuneOptions
from ireetune.flows.model.run import Mode, ModelCosts, ModelTuningRun
from ireetune.flows.model.state import read_run_file
from ireetune.flows.model.state_restore import restore_run
from ireetune.flows.sequence import RunProgress
from ireetune.model.final_check import FinalCheck
from ireetune.model.hot import DispatchProfile, select_hot_dispatches
from ireetune.model.profile import write_profile
from ireetune.model.select import MODEL_RULE, model_speedup
from ireetune.model.timing import SESSION_TIMES, ModelComparison, ModelRun
from ireetune.targets import parse_target
from tests.conftest import MATMUL_MODEL
from tests.spec_support import VALID_SPEC

# The flag phase's winner, and two runners-up whose confirmed intervals overlap its own: data
# tiling turns the matmul into an mmt4d, which the spec's matmul matcher does not reach.
WINNER = FlagSet(("--iree-llvmcpu-enable-ukernels=none",))
TILED = FlagSet(("--iree-opt-data-tiling",))
O3 = FlagSet(("--iree-opt-level=O3",))
# Beaten by the rule, but its interval lies below the winner's: not a finalist.
FAR = FlagSet(("--iree-dispatch-creation-enable-aggressive-fusion",))


class ScaledTimes(LocalExecutor):
    """Runs the models for real, then multiplies each model's times by its label's factor (and
    adds one to the outputs of the labels in `wrong`)."""

    def __init__(self, factors: dict[str, float], wrong: tuple[str, ...] = ()) -> None:
        self.factors, self.wrong = factors, wrong

    def run_models_side_by_side(self, comparison: ModelComparison) -> dict[str, ModelRun]:
        runs = super().run_models_side_by_side(comparison)
        return {
            label: replace(
                run, times_ms=tuple(t * self.factors.get(label, 1.0) for t in run.times_ms),
                outputs=tuple(o + 1 for o in run.outputs) if label in self.wrong else run.outputs,
            )
            for label, run in runs.items()
        }  # fmt: skip


def _estimate(speedup: float, low: float, high: float) -> SpeedupEstimate:
    return SpeedupEstimate(speedup, low, high, 10, Basis.MODEL, 1.0, 1.0 / speedup)


def test_the_finalists_are_the_runners_up_whose_confirmed_interval_overlaps_the_winner_s() -> None:
    winner = FlagTrial(1, WINNER, TrialStatus.TIMED, confirmed=_estimate(1.5, 1.4, 1.6),
                       verdict="winner", outputs_match=True)  # fmt: skip
    beaten = {"verdict": "beaten", "outputs_match": True}
    below = FlagTrial(2, FAR, TrialStatus.TIMED, confirmed=_estimate(1.2, 1.1, 1.3), **beaten)
    above = FlagTrial(3, O3, TrialStatus.TIMED, confirmed=_estimate(1.8, 1.7, 1.9), **beaten)
    close = FlagTrial(4, TILED, TrialStatus.TIMED, confirmed=_estimate(1.35, 1.2, 1.45), **beaten)
    # Close, but rejected by the flag rule on its own: not a finalist.
    rejected = replace(close, trial_id=5, verdict="rejected")
    trials = (FlagTrial(0, FlagSet(), TrialStatus.DEFAULT), winner, below, above, close, rejected)
    search = FlagSearchResult(WINNER, winner.confirmed, trials, MODEL_RULE, Path("trials.json"))
    assert find_runners_up(search) == [close]
    # No winner (the defaults kept): nothing to judge.
    assert find_runners_up(replace(search, trials=(trials[0], close))) == []


def _tuned_run(
    tmp_path: Path, executor: LocalExecutor, budget_s: float | None = None
) -> ModelTuningRun:
    """A run past its variants phase: the flag phase kept WINNER over TILED, O3 and FAR, and the
    selection kept the matmul's spec."""
    model = tmp_path / "matmul.mlir"
    model.write_text(MATMUL_MODEL)
    options = ModelTuneOptions(
        model_path=model, output_dir=tmp_path, rounds=1, jobs=2, time_budget_s=budget_s,
        use_database=False,
    )  # fmt: skip
    run = ModelTuningRun(Mode.IN_PROCESS, options, parse_target("cpu"), tmp_path, executor)
    assert prepare(run) is None
    beaten = {"verdict": "beaten", "outputs_match": True}
    trials = (
        FlagTrial(0, FlagSet(), TrialStatus.DEFAULT),
        FlagTrial(1, WINNER, TrialStatus.TIMED, confirmed=_estimate(1.5, 1.4, 1.6),
                  verdict="winner", outputs_match=True),
        FlagTrial(2, TILED, TrialStatus.TIMED, confirmed=_estimate(1.45, 1.3, 1.55), **beaten),
        FlagTrial(3, O3, TrialStatus.TIMED, confirmed=_estimate(1.42, 1.35, 1.5), **beaten),
        FlagTrial(4, FAR, TrialStatus.TIMED, confirmed=_estimate(1.2, 1.1, 1.3), **beaten),
    )  # fmt: skip
    run.target = run.under_tuning.target = run.target.with_global_flags(WINNER.flags)
    run.default_vmfb = tmp_path / "flags" / "1.vmfb"
    run.default_vmfb.parent.mkdir()
    run.under_tuning.compile_default(run.default_vmfb)
    run.flag_search = FlagSearchResult(
        WINNER, trials[1].confirmed, trials, MODEL_RULE, tmp_path / "flags" / "trials.json",
        winner_binary=run.default_vmfb,
    )  # fmt: skip
    spec = tmp_path / "tuning" / "d0_run" / "specs" / "c1.mlir"
    spec.parent.mkdir(parents=True)
    spec.write_text(VALID_SPEC)
    run.candidates, run.accepted = {"d0": [spec]}, {"d0": spec}
    profile = DispatchProfile("d0", model, "matmul_64x128x96", True, 1.0, 1)
    run.hot = select_hot_dispatches([profile], 1.0, coverage=1.0, max_dispatches=1)
    write_profile(tmp_path, run.hot)
    run.run_progress = RunProgress(("prepare", "flags", "profile", "dispatches", "variants"))
    return run


def _rows(run: ModelTuningRun) -> list[tuple[int, str, int | None, int | None]]:
    assert run.finalists is not None
    return [(f.trial, f.verdict, f.landed, f.matchers) for f in run.finalists.finalists]


def test_a_runner_up_faster_with_the_spec_replaces_the_kept_flags(tmp_path: Path) -> None:
    run = _tuned_run(tmp_path, ScaledTimes({"t2": 0.1, "t3": 3.0}))
    judge_flag_finalists(run)
    # The winner and both close runners-up compiled with the spec (FAR is not a finalist); the
    # spec's matcher lands under the winner's flags and O3's, and on nothing once data tiling
    # makes the matmul an mmt4d.
    assert _rows(run) == [(1, "reference", 1, 1), (3, "rejected", 1, 1), (2, "kept", 0, 1)]
    assert run.finalists is not None and (run.finalists.flag_winner, run.finalists.kept) == (1, 2)
    # Every later step uses the runner-up's flags: the final check's default is its binary
    # without the spec, the flag search names it, and tuned_flags.txt (decide) takes the target's.
    tiled = parse_target("cpu").with_global_flags(TILED.flags).global_flags
    assert run.target.global_flags == run.under_tuning.target.global_flags == tiled
    assert run.default_vmfb == tmp_path / "flags" / "2.vmfb" and run.default_vmfb.is_file()
    assert run.flag_search is not None and run.flag_search.winner == TILED
    assert [t.verdict for t in run.flag_search.trials] == [
        "",
        "beaten",
        "winner",
        "beaten",
        "beaten",
    ]
    assert run.notes[-1] == run.finalists.line
    assert run.notes[-1].startswith(
        "flags judged with their tuned dispatches (the kept dispatch candidates linked; "
    )
    assert "kept [--iree-opt-data-tiling]" in run.notes[-1]
    # The decide phase checks the spec under the runner-up's flags and keeps them.
    run.options = replace(run.options, search_flags=False)
    assert decide(run) is None and run.result is not None
    assert run.result.flags == tiled
    assert (tmp_path / "tuned_flags.txt").read_text().splitlines() == list(tiled)
    assert run.finalists.line in run.result.notes
    # Saved: a continued run has the runner-up's flags and does not judge again.
    stored = read_run_file(tmp_path)
    assert stored.finalists == run.finalists
    continued = restore_run(tmp_path, stored, LocalExecutor(), None)
    assert continued.target.global_flags == tiled
    assert continued.default_vmfb == run.default_vmfb
    (tmp_path / FOLDER / "t2.vmfb").unlink()
    judge_flag_finalists(continued)
    assert not (tmp_path / FOLDER / "t2.vmfb").exists()


def test_the_winner_comes_back_when_the_final_check_drops_the_runner_up_s_spec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner-up won with the spec; without it, it is a set the flag phase ranked below the
    winner: when the final check drops the spec under its flags, the winner's flags come back
    and the specs are checked again with them."""
    run = _tuned_run(tmp_path, ScaledTimes({"t2": 0.1, "t3": 3.0}))
    checked: list[tuple[Path | None, tuple[str, ...]]] = []

    def final_check(*arguments: Any) -> FinalCheck:
        checked.append((arguments[4], run.target.global_flags))
        if len(checked) == 1:
            return FinalCheck(None, 1.0, 1.0, None, ("d0",))
        return real_check(*arguments)

    real_check = local.check_final_set
    monkeypatch.setattr(local, "check_final_set", final_check)
    run.options = replace(run.options, search_flags=False)
    assert decide(run) is None and run.result is not None
    winner_flags = parse_target("cpu").with_global_flags(WINNER.flags).global_flags
    tiled = parse_target("cpu").with_global_flags(TILED.flags).global_flags
    assert checked == [
        (tmp_path / "flags" / "2.vmfb", tiled),
        (tmp_path / "flags" / "1.vmfb", winner_flags),
    ]
    assert run.result.flags == winner_flags
    assert (tmp_path / "tuned_flags.txt").read_text().splitlines() == list(winner_flags)
    assert run.flag_search is not None and run.flag_search.winner == WINNER
    assert run.finalists is not None and run.finalists.kept == 1
    assert any(n.startswith("the final check did not keep every spec") for n in run.notes)


def test_the_finalists_time_plain_compiles_and_count_matchers_in_a_configuration_dump(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each finalist is compiled plainly, as the user's iree-compile builds it (a SqueezeNet
    compiled with its configurations dumped ran 2-5% slower, 2026-12-04), and its matchers are
    counted in the dump of a compile that stops once the executables are configured; the final
    check copies the kept flags' plain binary instead of compiling it again."""
    from ireetune.compile import driver

    compiles: list[tuple[str, ...]] = []
    real_run_tool = driver.run_tool

    def counting(arguments: list[str], **options: Any) -> Any:
        compiles.append(tuple(arguments))
        return real_run_tool(arguments, **options)

    monkeypatch.setattr(driver, "run_tool", counting)
    run = _tuned_run(tmp_path, ScaledTimes({"t2": 5.0, "t3": 5.0}))
    run.options = replace(run.options, search_flags=False)
    assert decide(run) is None and run.result is not None and run.final is not None
    assert run.finalists is not None and run.finalists.kept == 1
    assert _rows(run) == [(1, "reference", 1, 1), (3, "rejected", 1, 1), (2, "rejected", 0, 1)]

    def with_spec(arguments: tuple[str, ...]) -> bool:
        return any("tuning-spec-path=" in word for word in arguments)

    def dumped(arguments: tuple[str, ...]) -> bool:
        return any(word.startswith(driver.DUMP_CONFIGURATIONS_FLAG) for word in arguments)

    def configured(arguments: tuple[str, ...]) -> bool:
        return driver.CONFIGURED_PHASE in arguments

    # Every finalist twice: a plain binary, and a dumped compile that stops at the configurations.
    finalists = [a for a in compiles if with_spec(a)]
    assert sorted((dumped(a), configured(a)) for a in finalists) == 3 * [(False, False)] + 3 * [
        (True, True)
    ]
    plain = next(a for a in finalists if WINNER.flags[0] in a and not dumped(a))
    assert str(tmp_path / FOLDER / "t1.vmfb") in plain
    # Their configured programs, the model and its weights, are not kept beside the dumps.
    assert sorted(p.name for p in (tmp_path / FOLDER).glob("t*_configured.mlir")) == []
    assert sorted(p.name for p in (tmp_path / FOLDER).glob("t*_configurations")) == [
        "t1_configurations", "t2_configurations", "t3_configurations"
    ]  # fmt: skip
    # The final check compiled nothing: it timed a copy of the winner's plain binary.
    set0 = tmp_path / "final" / "set0.vmfb"
    assert set0.read_bytes() == (tmp_path / FOLDER / "t1.vmfb").read_bytes()


def test_the_final_and_combined_checks_keep_their_raw_times(tmp_path: Path) -> None:
    """The final check's last comparison (the figures the result reports) and the flags'
    combined check keep their sessions' raw times in their folders: both intervals are computed
    again from the run folder alone."""
    run = _tuned_run(tmp_path, ScaledTimes({"t2": 5.0, "t3": 5.0, "tuned": 0.5}))
    run.options = replace(run.options, search_flags=False)
    assert decide(run) is None and run.result is not None
    assert run.result.estimate is not None and run.result.combined is not None
    final = json.loads((tmp_path / "final" / SESSION_TIMES).read_text())
    times = final["times_ms"]
    assert len(times["default"]) == final["rounds"] * final["calls_per_round"]
    assert model_speedup(times["default"], times["tuned"]) == run.result.estimate
    combined = json.loads((tmp_path / "final" / "combined" / SESSION_TIMES).read_text())
    times = combined["times_ms"]
    assert len(times["tuned"]) == combined["rounds"] * combined["calls_per_round"]
    assert (
        _speedup(times["default"], times["tuned"], combined["calls_per_round"], Statistic.MEDIAN)
        == run.result.combined
    )


def test_the_winner_stays_when_no_runner_up_beats_it_with_the_spec(tmp_path: Path) -> None:
    run = _tuned_run(tmp_path, ScaledTimes({"t2": 5.0, "t3": 5.0}))
    # With no dispatch tuned there is nothing to judge the finalists with: no step, no line.
    candidates, accepted, notes = run.candidates, run.accepted, list(run.notes)
    run.candidates, run.accepted = {}, {}
    judge_flag_finalists(run)
    assert run.finalists is None and run.notes == notes
    run.candidates, run.accepted = candidates, accepted
    judge_flag_finalists(run)
    assert _rows(run) == [(1, "reference", 1, 1), (3, "rejected", 1, 1), (2, "rejected", 0, 1)]
    assert run.finalists is not None and run.finalists.kept == 1
    assert (
        run.target.global_flags == parse_target("cpu").with_global_flags(WINNER.flags).global_flags
    )
    assert run.default_vmfb == tmp_path / "flags" / "1.vmfb"
    assert run.flag_search is not None and run.flag_search.winner == WINNER


def test_a_finalist_that_does_not_compile_or_differs_is_dropped_and_the_winner_stays(
    tmp_path: Path,
) -> None:
    run = _tuned_run(tmp_path, ScaledTimes({"t3": 0.5}, wrong=("t3",)))
    assert run.flag_search is not None
    broken = replace(run.flag_search.trials[2], flag_set=FlagSet(("--iree-no-such-option",)))
    trials = (*run.flag_search.trials[:2], broken, *run.flag_search.trials[3:])
    run.flag_search = replace(run.flag_search, trials=trials)
    judge_flag_finalists(run)
    assert _rows(run) == [(1, "reference", 1, 1), (3, "dropped", 1, 1), (2, "dropped", None, None)]
    assert run.finalists is not None and run.finalists.kept == 1
    assert run.finalists.finalists[1].reason.startswith("outputs differ")
    assert run.finalists.finalists[2].reason == "did not compile with the spec"
    assert run.default_vmfb == tmp_path / "flags" / "1.vmfb"
    assert "dropped, 1 of 1 matchers landed (outputs differ" in run.notes[-1]


def test_a_finalist_that_does_not_fit_the_budget_is_skipped_with_a_note(tmp_path: Path) -> None:
    """With a 100 s compile of the model planned, what is left fits the winner's and one
    runner-up's compiles, their session and a default's compile, but not a second runner-up;
    with less, none is judged and the flags stay."""
    # Ten times faster: the model's calls take ~70 us, and under a loaded CI a 2x factor's
    # interval reached below 1.01 (rejected, CI on f858e8e).
    run = _tuned_run(tmp_path, ScaledTimes({"t3": 0.1}), budget_s=10_000.0)
    run.costs = ModelCosts(compile_s=100.0, load_s=1.0)
    run.options = replace(run.options, jobs=1)
    tail_s = run.scheduler.tail_seconds(load_s=1.0)
    # One runner-up: 2 compiles with their configuration dumps (250 s), the default's (100 s)
    # and a session; two: 125 s more.
    run.started = time.monotonic() - 10_000.0 + tail_s + 400.0
    judge_flag_finalists(run)
    assert _rows(run) == [(1, "reference", 1, 1), (2, "skipped", None, None), (3, "kept", 1, 1)]
    assert run.finalists is not None and run.finalists.finalists[1].reason.startswith(
        "the time budget leaves"
    )
    assert run.finalists.kept == 3

    (tmp_path / "short").mkdir()
    run = _tuned_run(tmp_path / "short", ScaledTimes({"t2": 0.1, "t3": 3.0}), budget_s=10_000.0)
    run.costs = ModelCosts(compile_s=100.0, load_s=1.0)
    run.started = time.monotonic() - 10_000.0 + tail_s + 100.0
    judge_flag_finalists(run)
    assert _rows(run) == [
        (1, "reference", None, None),
        (3, "skipped", None, None),
        (2, "skipped", None, None),
    ]
    assert not (tmp_path / "short" / FOLDER).exists()
    assert (
        run.target.global_flags == parse_target("cpu").with_global_flags(WINNER.flags).global_flags
    )
    assert "skipped" in run.notes[-1]


def test_with_no_spec_kept_the_best_candidates_are_judged_against_the_winner_alone(
    tmp_path: Path,
) -> None:
    run = _tuned_run(tmp_path, ScaledTimes({"t2": 0.1, "t3": 3.0}))
    run.accepted = {}
    judge_flag_finalists(run)
    # The winner alone is the reference: not compiled with the spec.
    assert _rows(run) == [(1, "reference", None, None), (3, "rejected", 1, 1), (2, "kept", 0, 1)]
    assert run.accepted == {"d0": run.candidates["d0"][0]}
    assert "none was kept, the winner alone is the reference" in run.notes[-1]
