"""The in-process variants phase: which spec variants the whole model is tried with."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ireetune.executor import LocalExecutor
from ireetune.flows.model.local_select import _compile_order, _fastest_per_dispatch
from ireetune.flows.model.options import ModelTuneOptions
from ireetune.flows.model.run import Mode, ModelTuningRun
from ireetune.model.hot import DispatchProfile, HotSet
from ireetune.model.in_model_times import InModelTimes
from ireetune.model.prepare import ModelUnderTuning
from ireetune.model.timing import ModelComparison, ModelRun
from ireetune.model.variants import dispatch_count, plan_variants
from ireetune.targets import parse_target

OUTPUTS = (np.arange(4, dtype=np.float32),)
WRONG = (np.arange(4, dtype=np.float32) + 1,)


def _run(label: str, ms: float, outputs: tuple[np.ndarray, ...] = OUTPUTS) -> ModelRun:
    # Six rounds of one call, a little spread so that the interval has a width.
    return ModelRun(label, outputs, tuple(ms * (1 + 0.01 * (i % 3)) for i in range(6)), "")


PLANS = plan_variants(
    [("a", [Path("a0"), Path("a1")]), ("b", [Path("b0"), Path("b1")]), ("c", [Path("c0")])]
)


def test_each_dispatch_s_fastest_candidate_with_the_default_s_outputs_is_combined() -> None:
    first = {
        "default": _run("default", 10.0),
        "d0c0": _run("d0c0", 8.0),
        "d0c1": _run("d0c1", 9.0),
        "d1c0": _run("d1c0", 11.0),
        "d1c1": _run("d1c1", 9.5),
        # The fastest of all, but its outputs differ from the default's.
        "d2c0": _run("d2c0", 5.0, WRONG),
        "best": _run("best", 7.0),
    }
    combined = _fastest_per_dispatch(first, 1, PLANS)
    assert combined is not None and combined.label == "combined"
    assert combined.specs == (Path("a0"), Path("b1"))


def test_no_combination_of_fewer_than_two_dispatches_or_of_the_joint_variant_s_specs() -> None:
    first = {
        "default": _run("default", 10.0),
        "d0c0": _run("d0c0", 8.0),
        "d1c0": _run("d1c0", 10.5),
        "d1c1": _run("d1c1", 12.0),
    }
    assert _fastest_per_dispatch(first, 1, PLANS) is None
    # a0, b0 and c0 fastest: the joint variant `best` already is that combination.
    first.update(d1c0=_run("d1c0", 9.0), d2c0=_run("d2c0", 9.0))
    assert _fastest_per_dispatch(first, 1, PLANS) is None
    # A variant that did not run (or was not built) is no one's fastest.
    first.update(d1c0=_run("d1c0", 12.0), d2c0=_run("d2c0", 11.0))
    first["d1c1"] = ModelRun("d1c1", (), (), "crashed")
    assert _fastest_per_dispatch(first, 1, PLANS) is None


def test_the_joint_variant_and_every_dispatch_s_first_candidate_compile_first() -> None:
    assert [plan.label for plan in _compile_order(PLANS)] == [
        "best", "d0c0", "d1c0", "d2c0", "rank1", "d0c1", "d1c1",
    ]  # fmt: skip


def test_with_profiles_every_rank_s_joint_variant_compiles_before_any_candidate_alone() -> None:
    # A joint variant's profile reads each of its dispatches' candidates: one compile per rank
    # puts every candidate in the model.
    assert [plan.label for plan in _compile_order(PLANS, joints_first=True)] == [
        "best", "rank1", "d0c0", "d1c0", "d2c0", "d0c1", "d1c1",
    ]  # fmt: skip


def test_a_combination_is_possible_only_with_variants_of_two_dispatches() -> None:
    assert dispatch_count(PLANS) == 3
    one_dispatch = plan_variants([("a", [Path("a0"), Path("a1")])])
    assert [plan.label for plan in one_dispatch] == ["d0c0", "d0c1"]
    assert dispatch_count(one_dispatch) == 1
    # The joint variants alone name no dispatch of their own.
    joint = [plan for plan in PLANS if plan.dispatch is None]
    assert dispatch_count(joint) == 0 and [plan.label for plan in joint] == ["best", "rank1"]


class TimesByLabel(LocalExecutor):
    """Times every model by its label's planted time, and profiles it by its planted profile
    (none planted: the profiler fails); compiles nothing (the test plants the binaries)."""

    def __init__(
        self, times_ms: dict[str, float], profiles: dict[str, InModelTimes] | None = None
    ) -> None:
        self.times_ms = times_ms
        self.profiles = profiles or {}
        self.sessions: list[list[str]] = []
        self.profiled: list[str] = []

    def run_models_side_by_side(self, comparison: ModelComparison) -> dict[str, ModelRun]:
        self.sessions.append([label for label, _ in comparison.models])
        return {label: _run(label, self.times_ms[label]) for label, _ in comparison.models}

    def profile_model(self, comparison: ModelComparison, calls: int) -> InModelTimes:
        label = comparison.models[0][0]
        self.profiled.append(label)
        return self.profiles.get(label, InModelTimes({}, {}, 0, "no profile planted"))


def _two_dispatch_run(tmp_path: Path, executor: LocalExecutor) -> ModelTuningRun:
    """A run of a model with two tuned dispatches, "a" and "b" (exports `ea` and `eb`; `erest`
    is untouched), each with two candidate specs, its default binary planted."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    run = ModelTuningRun(
        Mode.IN_PROCESS, ModelTuneOptions(model_path=tmp_path / "m.mlir", output_dir=tmp_path),
        parse_target("cpu"), tmp_path, executor,
    )  # fmt: skip
    run.model = ModelUnderTuning(
        tmp_path / "m.mlir", "main", tmp_path / "inputs.npz", run.target, False, "local-task",
        OUTPUTS,
    )  # fmt: skip
    run.default_vmfb = run.current_vmfb = tmp_path / "default.vmfb"
    run.default_ms = 10.0
    profiles = []
    for name in ("a", "b", "rest"):
        path = tmp_path / f"{name}_benchmark.mlir"
        path.write_text(f"hal.executable.export public @e{name} ordinal(0)\n")
        profiles.append(DispatchProfile(name, path, f"problem {name}", name != "rest", 3.0, 1))
    run.hot = HotSet(tuple(profiles), tuple(profiles[:2]), 10.0, 9.0, 6.0)
    run.candidates = {
        name: [tmp_path / f"t/{name}/{name}0", tmp_path / f"t/{name}/{name}1"] for name in "ab"
    }
    return run


def _planted_compile(
    run: ModelTuningRun, chosen: list, folder: Path, room: object = None
) -> tuple[dict[str, Path], list[dict[str, object]]]:
    return (
        {plan.label: folder / f"{plan.label}.vmfb" for plan in chosen},
        [{"variant": plan.label, "status": "compiled", "specs": [str(s) for s in plan.specs]}
         for plan in chosen],
    )  # fmt: skip


def test_the_combination_of_each_dispatch_s_fastest_candidate_can_win(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two dispatches whose fastest candidates in the first session are the first's second one
    and the second's first one (no planned joint variant), and no profile of the variants: the
    combination is built, confirmed in the second session, wins, and its specs are accepted."""
    from ireetune.flows.model import local_select

    executor = TimesByLabel(
        {
            "default": 10.0,
            "best": 9.9,
            "d0c0": 9.8,
            "d0c1": 9.0,
            "d1c0": 9.2,
            "d1c1": 10.2,
            "rank1": 9.9,
            "combined": 8.0,
        }  # fmt: skip
    )
    run = _two_dispatch_run(tmp_path, executor)
    pending = [(name, run.candidates[name]) for name in "ab"]
    plans = local_select._compile_order(plan_variants(pending))
    monkeypatch.setattr(local_select, "_compile_plans", _planted_compile)
    built, rows = _planted_compile(run, plans, tmp_path)
    winner = local_select._time_and_decide(run, plans, built, rows, tmp_path)
    # No profile could be taken: the combination comes from the first session's model times.
    assert executor.profiled == ["default"]
    assert winner is not None and winner.label == "combined"
    assert winner.specs == (pending[0][1][1], pending[1][1][0])
    # One first session of all six, then the confirmation with the combination in it.
    assert executor.sessions[0] == ["default", "best", "d0c0", "d1c0", "rank1", "d0c1", "d1c1"]
    assert "combined" in executor.sessions[1]
    assert [row["variant"] for row in rows if row.get("accepted")] == ["combined"]


# Each variant's whole-model time (ms) in the tests that profile the variants: the first
# session's times would combine a1 with b0.
MODEL_TIMES = {"default": 10.0, "best": 9.9, "d0c0": 9.8, "d0c1": 9.0, "d1c0": 9.2, "d1c1": 10.2,
               "rank1": 9.9, "combined": 9.5, "in_model": 8.0}  # fmt: skip


def _profile(a: float, b: float, rest: float = 4.0) -> InModelTimes:
    return InModelTimes({"ea": a, "eb": b, "erest": rest}, {"ea": 1, "eb": 1, "erest": 1}, 60)


def test_each_dispatch_s_candidate_fastest_inside_the_model_is_combined_and_can_win(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first session's model times would combine a1 with b0; the profiles of the variants
    say a0 and b1 are the fastest inside the model (read in the joint variants too, on the
    untouched dispatch's clock). Their combination is built, confirmed, and wins; each row
    keeps its dispatches' ratios and selection/in_model.json the picks."""
    from ireetune.flows.model import local_select

    times = dict(MODEL_TIMES)
    profiles = {
        "default": _profile(3.0, 3.0),
        # a0 is 0.8x in the joint variant (which ran on a clock 1.25x slower) and alone.
        "best": _profile(3.0, 3.75, rest=5.0),
        "d0c0": _profile(2.4, 3.0),
        "d0c1": _profile(3.3, 3.0),
        "d1c0": _profile(3.0, 3.3),
        # b1 is 0.9x alone and in rank1.
        "d1c1": _profile(3.0, 2.7),
        "rank1": _profile(3.3, 2.7),
    }
    executor = TimesByLabel(times, profiles)
    run = _two_dispatch_run(tmp_path, executor)
    pending = [(name, run.candidates[name]) for name in "ab"]
    plans = local_select._compile_order(plan_variants(pending))
    monkeypatch.setattr(local_select, "_compile_plans", _planted_compile)
    built, rows = _planted_compile(run, plans, tmp_path)
    planned = list(built)
    winner = local_select._time_and_decide(run, plans, built, rows, tmp_path)
    # The default is profiled before and after the variants.
    assert executor.profiled == ["default", *planned, "default"]
    assert winner is not None and winner.label == "in_model"
    assert winner.specs == (pending[0][1][0], pending[1][1][1])
    assert "in_model" in executor.sessions[1] and "combined" not in executor.sessions[1]
    ratios = {row["variant"]: row.get("in_model_ratios") for row in rows}
    assert ratios["best"] == pytest.approx({"a": 0.8, "b": 1.0})
    assert ratios["d1c1"] == pytest.approx({"b": 0.9})
    document = json.loads((tmp_path / "in_model.json").read_text())
    assert [pick["dispatch"] for pick in document["picks"]] == ["a", "b"]


def test_the_selection_compiles_joint_variants_first_where_the_default_profiles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The selection profiles the default before it compiles: where that works, every rank's
    joint variant compiles before the candidates alone and the profile is the picks' first;
    where it does not, the order is the whole-model one (each first candidate alone early)."""
    from ireetune.flows.model import local_select

    times = dict(MODEL_TIMES)
    labels = ["default", "best", "d0c0", "d1c0", "rank1", "d0c1", "d1c1"]
    orders: list[list[str]] = []

    def recording(
        run: ModelTuningRun, chosen: list, folder: Path, room: object = None
    ) -> tuple[dict[str, Path], list[dict[str, object]]]:
        orders.append([plan.label for plan in chosen])
        return _planted_compile(run, chosen, folder)

    monkeypatch.setattr(local_select, "_compile_plans", recording)
    executor = TimesByLabel(times, {label: _profile(3.0, 3.0) for label in labels})
    local_select.select_variants(_two_dispatch_run(tmp_path / "profiled", executor))
    assert orders[0] == ["best", "rank1", "d0c0", "d1c0", "d0c1", "d1c1"]
    # The default once before the compiles, each variant, and the default again.
    assert executor.profiled == ["default", *orders[0], "default"]
    unprofiled = TimesByLabel(times)
    local_select.select_variants(_two_dispatch_run(tmp_path / "unprofiled", unprofiled))
    assert orders[1] == ["best", "d0c0", "d1c0", "rank1", "d0c1", "d1c1"]
    assert unprofiled.profiled == ["default"]


def test_joint_variants_alone_are_enough_for_the_picks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the joint variants were built (the budget had room for one compile per rank): their
    profiles read each dispatch's candidates, and the picks make the combination."""
    from ireetune.flows.model import local_select

    times = {"default": 10.0, "best": 9.9, "rank1": 9.9, "in_model": 8.0}
    profiles = {
        "default": _profile(3.0, 3.0),
        # a0 and b1 are the fastest inside the model.
        "best": _profile(2.4, 3.3),
        "rank1": _profile(3.3, 2.7),
    }
    executor = TimesByLabel(times, profiles)
    run = _two_dispatch_run(tmp_path, executor)
    pending = [(name, run.candidates[name]) for name in "ab"]
    plans = local_select._compile_order(plan_variants(pending), joints_first=True)
    joints = [plan for plan in plans if plan.dispatch is None]
    monkeypatch.setattr(local_select, "_compile_plans", _planted_compile)
    built, rows = _planted_compile(run, joints, tmp_path)
    winner = local_select._time_and_decide(run, plans, built, rows, tmp_path)
    assert winner is not None and winner.label == "in_model"
    assert winner.specs == (pending[0][1][0], pending[1][1][1])


def test_no_profile_pick_no_combination(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The profiles show no candidate faster inside the model: nothing is combined, even where
    the first session's model times would have combined two."""
    from ireetune.flows.model import local_select

    times = {"default": 10.0, "best": 9.9, "d0c0": 9.8, "d0c1": 9.0, "d1c0": 9.2, "d1c1": 10.2,
             "rank1": 9.9}  # fmt: skip
    labels = ["default", "best", "d0c0", "d1c0", "rank1", "d0c1", "d1c1"]
    executor = TimesByLabel(times, {label: _profile(3.0, 3.0) for label in labels})
    run = _two_dispatch_run(tmp_path, executor)
    pending = [(name, run.candidates[name]) for name in "ab"]
    plans = local_select._compile_order(plan_variants(pending))
    monkeypatch.setattr(local_select, "_compile_plans", _planted_compile)
    built, rows = _planted_compile(run, plans, tmp_path)
    local_select._time_and_decide(run, plans, built, rows, tmp_path)
    assert len(executor.profiled) == len(built) + 2
    assert not any(
        label in session for session in executor.sessions for label in ("combined", "in_model")
    )


def test_each_session_lasts_long_enough_within_ten_times_its_least_rounds() -> None:
    from ireetune.flows.model.local_select import SESSION_MIN_S, session_plan

    plan = session_plan(5, 25, 10.0)
    assert 5 < plan.rounds < 50
    assert plan.rounds * 26 * plan.calls_per_round * 10.0 >= SESSION_MIN_S * 1000
    # Five models of 10 ms would need 200 rounds for 20 s: ten times the least (10) is the most.
    assert plan.confirm_rounds == 100
    # A slow model keeps the least rounds (as split mode), a tiny one ten times as many.
    slow = session_plan(5, 25, 2000.0)
    assert (slow.rounds, slow.confirm_rounds) == (5, 10)
    fast = session_plan(5, 2, 0.01)
    assert (fast.rounds, fast.confirm_rounds) == (50, 100)


def test_the_sessions_are_shortened_to_what_is_left_of_the_budget() -> None:
    """Under a budget the sessions last at most what is left (down to their least rounds); with
    room enough, or no budget, they are as planned."""
    from ireetune.flows.model.local_select import fitting_plan, session_plan, sessions_seconds

    planned = session_plan(5, 25, 10.0)
    assert fitting_plan(5, 25, 10.0, 0.5, None) == planned
    assert fitting_plan(5, 25, 10.0, 0.5, 1000.0) == planned
    full_s = sessions_seconds(planned, 25, 10.0, 0.5)
    short = fitting_plan(5, 25, 10.0, 0.5, full_s / 2)
    assert short.rounds < planned.rounds and short.confirm_rounds < planned.confirm_rounds
    assert sessions_seconds(short, 25, 10.0, 0.5) <= full_s / 2
    least = fitting_plan(5, 25, 10.0, 0.5, 0.0)
    assert (least.rounds, least.confirm_rounds) == (5, 10)


def _budgeted_run(tmp_path: Path, left_s: float) -> ModelTuningRun:
    import time

    from ireetune.flows.model.run import ModelCosts

    run = ModelTuningRun(
        Mode.IN_PROCESS, ModelTuneOptions(model_path=tmp_path / "m.mlir", output_dir=tmp_path),
        parse_target("cpu"), tmp_path, LocalExecutor(),
    )  # fmt: skip
    run.options = replace(run.options, time_budget_s=1000.0)
    run.started = time.monotonic() - (1000.0 - left_s)
    run.default_ms, run.costs = 10.0, ModelCosts(compile_s=5.0, load_s=1.0)
    return run


def test_a_batch_is_compiled_only_if_its_sessions_and_the_run_s_end_fit_the_budget(
    tmp_path: Path,
) -> None:
    """Room for a batch: the batch and a combined variant's compile, the variants' profiles
    (when a combination is possible), both sessions of the variants built by then at their
    planned length, and the decide and report phases."""
    from ireetune.core.budget import SHARES, TaskScheduler
    from ireetune.flows.model.local_select import (
        room_for_confirmation,
        room_for_sessions,
        session_plan,
        sessions_seconds,
    )
    from ireetune.model.variant_profiles import profiles_seconds

    plan = session_plan(5, 6, 10.0)
    tail_s = TaskScheduler(1000.0, 0.0).tail_seconds(load_s=1.0)
    single_need = 7.0 + sessions_seconds(plan, 6, 10.0, 1.0) + tail_s
    # Six variants and the default twice, each loaded (1 s), 60 calls of 10 ms, and the tools.
    profiles_s = profiles_seconds(6, 10.0, 1.0)
    assert profiles_s == pytest.approx(8 * 2.2)
    need = single_need + 7.0 + profiles_s
    # The decide and report phases compile nothing new: their binaries are copies.
    assert tail_s == 4 * 1.0 + SHARES.tail_slack_s
    assert room_for_sessions(_budgeted_run(tmp_path, need + 5.0))(6, 7.0)
    assert not room_for_sessions(_budgeted_run(tmp_path, need - 5.0))(6, 7.0)
    # One tuned dispatch has no combined variant to compile, nor variants to profile.
    single = room_for_sessions(_budgeted_run(tmp_path, single_need + 2.0), combinable=False)
    assert single(6, 7.0)
    assert not room_for_sessions(_budgeted_run(tmp_path, single_need - 2.0), combinable=False)(
        6, 7.0
    )
    # After the first session only the confirmation is left to fit.
    confirm_need = single_need - (6 + 1) * (1.0 + plan.rounds * plan.calls_per_round * 0.01)
    assert room_for_confirmation(_budgeted_run(tmp_path, confirm_need + 5.0), plan)(1, 7.0)
    assert not room_for_confirmation(_budgeted_run(tmp_path, confirm_need - 5.0), plan)(1, 7.0)


def test_no_batch_is_compiled_without_room(tmp_path: Path) -> None:
    from ireetune.compile.pool import default_jobs
    from ireetune.flows.model.local_select import _compile_plans

    run = _budgeted_run(tmp_path, 1.0)
    asked: list[tuple[int, float]] = []

    def no_room(variants: int, batch_s: float) -> bool:
        asked.append((variants, batch_s))
        return False

    # Nothing is compiled: the run has no model to compile.
    assert _compile_plans(run, list(PLANS), tmp_path, no_room) == ({}, [])
    # Asked for the first batch, then for each smaller one, at the prepare phase's compile time.
    assert asked == [(n, 5.0) for n in range(min(len(PLANS), default_jobs()), 0, -1)]


def test_a_batch_without_room_is_cut_to_the_variants_that_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model that compiles slowly may leave room for one more variant and not for a batch of
    `jobs`: the one is compiled (the first planned, a dispatch's best candidate), and nothing
    after it."""
    from ireetune.compile.driver import CompileStatus
    from ireetune.compile.pool import CompileOutcome
    from ireetune.flows.model import local_select

    run = _budgeted_run(tmp_path, 1.0)
    run.options = replace(run.options, jobs=2)
    run.model = ModelUnderTuning(
        tmp_path / "m.mlir", "main", tmp_path / "inputs.npz", run.target, False, "local-task"
    )
    compiled: list[list[str]] = []

    def compile_each(_: object, __: object, plans: list[Any], folder: Path, jobs: int) -> list[Any]:
        compiled.append([plan.label for plan in plans])
        return [
            (plan, CompileOutcome(i, CompileStatus.COMPILED, "", plan.label, 1.0))
            for i, plan in enumerate(plans)
        ]

    monkeypatch.setattr(local_select, "compile_variants", compile_each)
    built, rows = local_select._compile_plans(
        run, list(PLANS), tmp_path, lambda variants, _: variants <= 1
    )
    assert compiled == [[PLANS[0].label]]
    assert (list(built), [row["variant"] for row in rows]) == ([PLANS[0].label], [PLANS[0].label])


SPEC = """
module attributes {iree_codegen.tuning_spec_with_default_entrypoint, transform.with_named_sequence} {
  transform.named_sequence @apply(%op: !transform.any_op {transform.readonly}, %config: !transform.any_param {transform.readonly}) {
    transform.annotate %op "compilation_info" = %config : !transform.any_op, !transform.any_param
    transform.yield
  }
  transform.named_sequence @match(%op: !transform.any_op {transform.readonly}) -> (!transform.any_op, !transform.any_param) {
    transform.match.operation_name %op ["OP"] : !transform.any_op
    %config = transform.param.constant #iree_codegen.compilation_info<lowering_config = #iree_cpu.lowering_config<distribution = [32, 32, 0]>, translation_info = #iree_codegen.translation_info<pipeline = #iree_cpu.pipeline<DoubleTilingExpert>>> -> !transform.any_param
    transform.yield %op, %config : !transform.any_op, !transform.any_param
  }
  transform.named_sequence @__kernel_config(%root: !transform.any_op {transform.consumed}) -> !transform.any_op attributes {iree_codegen.tuning_spec_entrypoint} {
    %updated = transform.foreach_match in %root @match -> @apply : (!transform.any_op) -> !transform.any_op
    transform.yield %updated : !transform.any_op
  }
}
"""


def test_the_decide_phase_copies_the_variant_the_selection_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The final check links the winning variant's specs again and compiles the model with
    them; the flags' combined check compiles the final spec: both copy the selection's binary
    (the time budget keeps no compile for them), and other specs still compile."""
    from ireetune.compile.driver import CompileStatus
    from ireetune.model import prepare
    from ireetune.model.variant_build import compile_variants
    from ireetune.model.variants import VariantPlan
    from ireetune.spec.link import link_spec_files
    from tests.conftest import REPOSITORY

    model = ModelUnderTuning(
        REPOSITORY / "examples" / "mlp.mlir", "mlp", tmp_path / "inputs.npz", parse_target("cpu"),
        False, "local-task",
    )  # fmt: skip
    specs = []
    for name, op in (("a", "linalg.conv_2d_nhwc_hwcf"), ("b", "linalg.batch_matmul")):
        specs.append(tmp_path / f"{name}.mlir")
        specs[-1].write_text(SPEC.replace("OP", op))
    (tmp_path / "selection").mkdir()
    [(_, outcome)] = compile_variants(
        LocalExecutor(), model, [VariantPlan("best", tuple(specs))], tmp_path / "selection", 2
    )
    assert outcome.status is CompileStatus.COMPILED
    compiled: list[Path] = []
    real_compile = prepare.run_compile
    monkeypatch.setattr(
        prepare, "run_compile", lambda request: compiled.append(request.output_path) or real_compile(request)
    )  # fmt: skip
    final_spec = tmp_path / "set0_spec.mlir"
    link_spec_files(specs, final_spec)
    assert model.compile(final_spec, tmp_path / "set0.vmfb") == ""
    assert model.compile(final_spec, tmp_path / "tuned.vmfb") == ""
    variant = (tmp_path / "selection" / "best.vmfb").read_bytes()
    assert (tmp_path / "set0.vmfb").read_bytes() == variant
    assert (tmp_path / "tuned.vmfb").read_bytes() == variant
    assert compiled == []
    # One spec of the two is another binary's inputs: compiled.
    assert model.compile(specs[0], tmp_path / "a.vmfb") == ""
    assert compiled == [tmp_path / "a.vmfb"]

    # A build with its configurations dumped (the flag finalists') is not the plain one the
    # user compiles: it never stands in for it.
    from ireetune.compile.driver import DUMP_CONFIGURATIONS_FLAG, build_request

    dumped = build_request(
        model.target, model.mlir_path, tmp_path / "dumped.vmfb", spec_path=specs[1],
        dumps=((DUMP_CONFIGURATIONS_FLAG, tmp_path / "configurations"),),
    )  # fmt: skip
    assert real_compile(dumped).ok
    model.remember(dumped)
    assert model.compile(specs[1], tmp_path / "b.vmfb") == ""
    assert compiled == [tmp_path / "a.vmfb", tmp_path / "b.vmfb"]
    assert (tmp_path / "b.vmfb").read_bytes() != (tmp_path / "dumped.vmfb").read_bytes()


def test_each_later_rank_s_candidates_are_joined_where_two_dispatches_have_one() -> None:
    a0, a1, a2, c0, c1 = (Path(name) for name in ("a0", "a1", "a2", "c0", "c1"))
    plans = plan_variants([("a", [a0, a1, a2]), ("b", []), ("c", [c0, c1])])
    joint = [(plan.label, plan.specs, plan.joined) for plan in plans if plan.dispatch is None]
    # The third rank has one candidate: it is tried alone only.
    assert joint == [("best", (a0, c0), (0, 2)), ("rank1", (a1, c1), (0, 2))]
    # Each variant's dispatches, in the order of its specs (split mode's rows name them).
    assert [plan.members for plan in plans] == [(0,), (0,), (0,), (2,), (2,), (0, 2), (0, 2)]


def test_a_candidate_in_a_joint_variant_counts_as_tried_in_the_model() -> None:
    from types import SimpleNamespace

    from ireetune.flows.model.local_select import _note_the_rest

    pending = [("a", [Path("a0"), Path("a1")]), ("b", [Path("b0"), Path("b1")])]
    rows = [
        {"variant": label, "specs": specs, "status": "compiled", "reason": ""}
        for label, specs in [("best", ["a0", "b0"]), ("d0c0", ["a0"]), ("d1c0", ["b0"])]
    ]
    joint = {"variant": "rank1", "specs": ["a1", "b1"], "status": "compiled", "reason": ""}
    run = SimpleNamespace(accepted={}, dispatch_notes={}, notes=[])
    _note_the_rest(run, pending, [*rows, joint])  # type: ignore[arg-type]
    assert run.dispatch_notes["a"].startswith("every candidate tried in the model, 1 of 2 alone")
    assert run.notes == []
    run = SimpleNamespace(accepted={}, dispatch_notes={}, notes=[])
    _note_the_rest(run, pending, rows)  # type: ignore[arg-type]
    assert run.dispatch_notes["b"] == (
        "tuned; 1 of its 2 candidates tried in the model before the time budget was spent"
    )
    assert run.notes == ["time budget spent during model-level selection"]


def test_the_variants_are_profiled_only_with_room_for_the_picks_after(tmp_path: Path) -> None:
    """Profiling the variants leaves room for what the picks need after it: their variant's
    compile, its confirmation, and the decide and report phases; else the first session's
    combination is built instead, without profiles."""
    from ireetune.core.budget import TaskScheduler
    from ireetune.flows.model.local_select import (
        _room_for_profiles,
        confirmation_seconds,
        session_plan,
    )
    from ireetune.model.variant_profiles import profiles_seconds

    plan = session_plan(5, 6, 10.0)
    need = (
        profiles_seconds(6, 10.0, 1.0)
        + 5.0
        + confirmation_seconds(plan, 10.0, 1.0)
        + TaskScheduler(1000.0, 0.0).tail_seconds(load_s=1.0)
    )
    assert _room_for_profiles(_budgeted_run(tmp_path, need + 2.0), 6, plan)
    assert not _room_for_profiles(_budgeted_run(tmp_path, need - 2.0), 6, plan)


def test_a_candidate_alone_is_read_against_the_other_tuned_dispatch_in_its_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The untouched rest is too small to serve as a clock. d0c0 (a0 alone) was profiled on a
    machine 1.25x slower: b, which it leaves at the default, took 3.75 ms for its 3, so a0's
    unchanged 3.0 ms reads 0.8 in its row. The joint variant touches both: nothing corrects it."""
    from ireetune.flows.model import local_select

    times = dict(MODEL_TIMES)
    profiles = {
        label: _profile(3.0, 3.0, rest=0.1)
        for label in ("default", "d0c1", "d1c0", "d1c1", "rank1")
    }
    profiles["d0c0"] = _profile(3.0, 3.75, rest=0.125)
    profiles["best"] = _profile(3.0, 3.75, rest=0.125)
    executor = TimesByLabel(times, profiles)
    run = _two_dispatch_run(tmp_path, executor)
    pending = [(name, run.candidates[name]) for name in "ab"]
    plans = local_select._compile_order(plan_variants(pending))
    monkeypatch.setattr(local_select, "_compile_plans", _planted_compile)
    built, rows = _planted_compile(run, plans, tmp_path)
    local_select._time_and_decide(run, plans, built, rows, tmp_path)
    ratios = {row["variant"]: row.get("in_model_ratios") for row in rows}
    assert ratios["d0c0"] == pytest.approx({"a": 0.8})
    assert ratios["best"] == pytest.approx({"a": 1.0, "b": 1.25})
