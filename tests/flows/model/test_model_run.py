"""The model flow's phase sequence: one order of phases, two modes, the run saved after each."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import NoReturn

import pytest

from ireetune.core.errors import IreetuneError
from ireetune.database.run_files import read_model_file
from ireetune.executor import LocalExecutor
from ireetune.flows.model.local import LOCAL_PHASES, prepare
from ireetune.flows.model.options import ModelTuneOptions
from ireetune.flows.model.phases import profile
from ireetune.flows.model.run import (
    PHASES,
    Mode,
    ModelCosts,
    ModelTuningRun,
    Pause,
    Phase,
    PhaseBody,
    remaining_phases,
)
from ireetune.flows.model.split import SPLIT_PHASES
from ireetune.flows.model.state import MODEL_RUN_FORMAT, MODEL_RUN_NAME, ModelRunFile
from ireetune.flows.model.state_restore import save_run
from ireetune.flows.sequence import RunProgress, run_sequence
from ireetune.model.timing import ModelComparison, ModelRun
from ireetune.targets import parse_target
from tests.conftest import REPOSITORY


def _run(tmp_path: Path, mode: Mode = Mode.IN_PROCESS) -> ModelTuningRun:
    options = ModelTuneOptions(model_path=tmp_path / "model.mlir", output_dir=tmp_path)
    return ModelTuningRun(mode, options, parse_target("cpu"), tmp_path, LocalExecutor())


def _tuning_that_takes_its_slot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[float], list[str]]:
    """Make the model flow's dispatch tuning a fake on a fake clock: each dispatch takes its
    whole slot and measures nothing. Return the clock and the dispatches tuned, in order."""
    from ireetune.flows.dispatch.options import TuneOptions
    from ireetune.flows.model import local

    clock = [1000.0]
    monkeypatch.setattr(local.time, "monotonic", lambda: clock[0])
    tuned: list[str] = []

    def each_takes_its_slot(options: TuneOptions, executor: object) -> SimpleNamespace:
        tuned.append(options.input_path.stem)
        clock[0] += options.time_budget_s or 0.0
        return SimpleNamespace(
            reused=False, best=None, records=(), run_dir=tmp_path, baseline_ms=1.0
        )

    monkeypatch.setattr(local, "tune_dispatch", each_takes_its_slot)
    return clock, tuned


def _recording_bodies(ran: list[str], pause_at: Phase | None = None) -> dict[Phase, PhaseBody]:
    def body_of(phase: Phase) -> PhaseBody:
        def body(run: ModelTuningRun) -> Pause | None:
            ran.append(phase.value)
            return Pause(1) if phase is pause_at else None

        return body

    return {phase: body_of(phase) for phase in PHASES}


def test_the_flow_has_one_order_of_phases_and_both_modes_run_every_one() -> None:
    assert [p.value for p in PHASES] == [
        "prepare", "flags", "profile", "dispatches", "variants", "decide", "report",
    ]  # fmt: skip
    assert list(LOCAL_PHASES) == list(PHASES)
    assert list(SPLIT_PHASES) == list(PHASES)


def test_both_modes_share_the_bodies_that_need_no_device() -> None:
    # Only the phases whose measuring pauses for a device host differ by mode.
    shared = [p.value for p in PHASES if LOCAL_PHASES[p] is SPLIT_PHASES[p]]
    assert shared == ["prepare", "flags", "profile", "report"]


def test_the_phases_run_in_order_and_the_run_is_saved_after_each(tmp_path: Path) -> None:
    run, ran = _run(tmp_path), []
    saved: list[tuple[str, list[str]]] = []

    def save(saved_run: ModelTuningRun, phase: Phase) -> None:
        saved.append((phase.value, list(ran)))

    assert run_sequence(run, remaining_phases(run, _recording_bodies(ran)), (save,)) is None
    assert ran == [p.value for p in PHASES]
    assert saved == [(p.value, [q.value for q in PHASES[: i + 1]]) for i, p in enumerate(PHASES)]


def test_a_phase_that_waits_for_the_device_pauses_the_run_after_saving_it(
    tmp_path: Path,
) -> None:
    run, ran = _run(tmp_path, Mode.SPLIT), []
    saved: list[str] = []
    pause = run_sequence(
        run,
        remaining_phases(run, _recording_bodies(ran, Phase.PROFILE)),
        (lambda _, phase: saved.append(phase.value),),
    )
    assert pause == Pause(1)
    assert ran == saved == ["prepare", "flags", "profile"]


def test_a_loaded_run_goes_on_at_the_phase_after_the_last_one_saved(tmp_path: Path) -> None:
    run, ran = _run(tmp_path), []
    run.run_progress = RunProgress(("prepare", "flags"))
    saved: list[str] = []
    run_sequence(
        run,
        remaining_phases(run, _recording_bodies(ran)),
        (lambda _, phase: saved.append(phase.value),),
    )
    assert ran == saved == ["profile", "dispatches", "variants", "decide", "report"]


def test_an_in_process_run_is_saved_with_its_options_before_its_first_phase(
    tmp_path: Path,
) -> None:
    run = _run(tmp_path)
    run.options = replace(run.options, flag_sets=(("--iree-opt-data-tiling",),), rounds=3)
    save_run(run)
    stored = read_model_file(tmp_path / MODEL_RUN_NAME, ModelRunFile, tmp_path)
    assert (stored.format, stored.phases_done, stored.model) == (MODEL_RUN_FORMAT, (), None)
    assert stored.run_options() == replace(
        run.options,
        model_path=run.options.model_path.absolute(),
        output_dir=run.options.output_dir.absolute(),
    )


def test_selection_out_of_time_says_so_once_and_for_each_dispatch(tmp_path: Path) -> None:
    """A budget spent before the model-level selection tries a tuned dispatch's candidates: each
    such dispatch says how far it got (it said nothing, the run's notes said the same line once
    per dispatch), and the run says once that the budget was spent there."""
    from dataclasses import replace

    from ireetune.flows.model.local import select_variants
    from ireetune.model.hot import DispatchProfile, select_hot_dispatches

    run = _run(tmp_path)
    run.options = replace(run.options, time_budget_s=1.0)
    run.started -= 10.0
    profiles = [
        DispatchProfile(name, tmp_path / f"{name}.mlir", f"conv_{name}", True, 1.0, 1)
        for name in ("d0", "d1")
    ]
    run.hot = select_hot_dispatches(profiles, model_ms=2.0, coverage=1.0, max_dispatches=2)
    run.candidates = {
        name: [tmp_path / f"{name}_{i}_spec.mlir" for i in range(3)] for name in ("d0", "d1")
    }
    run.default_vmfb = tmp_path / "default.vmfb"
    assert select_variants(run) is None
    assert run.dispatch_notes == {
        name: "tuned; 0 of its 3 candidates tried in the model before the time budget was spent"
        for name in ("d0", "d1")
    }
    assert run.notes == ["time budget spent during model-level selection"]
    assert run.accepted == {}


def test_the_dispatch_phase_leaves_part_of_the_budget_to_the_selection() -> None:
    """Tuning dispatches may take SHARES.dispatch_phase of what is left of --time-budget when the
    phase starts; the rest is kept for trying them in the model. No budget, no deadline; a budget
    already spent leaves none."""
    from ireetune.core.budget import SHARES, TaskScheduler

    assert TaskScheduler(budget_s=None, started=100.0).dispatch_phase_deadline(now=400.0) is None
    assert TaskScheduler(budget_s=600.0, started=100.0).dispatch_phase_deadline(now=400.0) == (
        400.0 + SHARES.dispatch_phase * 300.0
    )
    assert TaskScheduler(budget_s=600.0, started=100.0).dispatch_phase_deadline(now=800.0) == 800.0
    assert 0.0 < SHARES.dispatch_phase < 1.0


class CountingExecutor(LocalExecutor):
    """Run every comparison for real; keep how many calls each asked for."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def run_models_side_by_side(self, comparison: ModelComparison) -> dict[str, ModelRun]:
        self.calls.append(comparison.rounds * comparison.repetitions)
        return super().run_models_side_by_side(comparison)


def _prepared_mlp_run(tmp_path: Path, executor: LocalExecutor) -> ModelTuningRun:
    """The two-layer perceptron's in-process run with `--rounds 1`, its prepare phase done
    (the default compiled and timed through `executor`)."""
    model = tmp_path / "model.mlir"
    model.write_text((REPOSITORY / "examples" / "mlp.mlir").read_text())
    options = ModelTuneOptions(model_path=model, output_dir=tmp_path, rounds=1)
    run = ModelTuningRun(Mode.IN_PROCESS, options, parse_target("cpu"), tmp_path, executor)
    assert prepare(run) is None
    return run


def test_the_default_model_is_timed_on_several_calls_and_its_costs_kept(tmp_path: Path) -> None:
    # The default's time is the basis of the profile's shares and of the gate that skips small
    # dispatches: `--rounds 1` must not make it one call (a loaded machine made that call 12
    # times a 0.07 ms model's time, and the gate skipped its only dispatch).
    executor = CountingExecutor()
    run = _prepared_mlp_run(tmp_path, executor)
    assert executor.calls == [9] and run.default_ms > 0
    # What the model costs, for planning within the budget: a compile, and a session's loads.
    assert run.costs.compile_s > 0 and run.costs.load_s > 0
    save_run(run)
    stored = read_model_file(tmp_path / MODEL_RUN_NAME, ModelRunFile, tmp_path)
    assert (stored.compile_s, stored.load_s) == (run.costs.compile_s, run.costs.load_s)


class SlowStretchExecutor(LocalExecutor):
    """Time every comparison for real, then slow the calls of all rounds but the last 4x, as a
    stretch of the machine's slow speed does; keep what it returned."""

    def __init__(self) -> None:
        self.returned: dict[str, ModelRun] = {}

    def run_models_side_by_side(self, comparison: ModelComparison) -> dict[str, ModelRun]:
        runs = super().run_models_side_by_side(comparison)
        slow = (comparison.rounds - 1) * comparison.repetitions
        self.returned = {
            model_id: replace(run, times_ms=tuple(
                t * 4.0 if i < slow else t for i, t in enumerate(run.times_ms)
            ))
            for model_id, run in runs.items()
        }  # fmt: skip
        return self.returned


def test_the_default_model_s_time_is_its_fastest_round(tmp_path: Path) -> None:
    # Every dispatch's share of the model is its time over this one: a round that caught the
    # machine's slow speed must not stretch it (GoogLeNet's read 38.4 ms, its final check 27.4).
    executor = SlowStretchExecutor()
    run = _prepared_mlp_run(tmp_path, executor)
    times = executor.returned["default"].times_ms
    assert len(times) == 9
    assert run.default_ms == statistics.median(times[6:]) < statistics.median(times)


def test_the_profile_times_the_flag_winner_again_and_keeps_its_fastest_round(
    tmp_path: Path,
) -> None:
    # The flag phase's estimate of its winner comes from a session of dozens of sets, one call
    # a turn; a stretch at the machine's slow speed stays in it (GoogLeNet's read 38.4 ms, its
    # final check 27.4 ms). The profile's shares are taken against the winner timed again.
    executor = SlowStretchExecutor()
    run = _prepared_mlp_run(tmp_path, executor)
    # A flag winner (here the default's bytes under another name) with a stale, slow estimate.
    winner = tmp_path / "winner.vmfb"
    winner.write_bytes((tmp_path / "default.vmfb").read_bytes())
    run.default_vmfb, run.default_ms = winner, 1000.0
    assert profile(run) is None
    times = executor.returned["default"].times_ms
    assert run.default_ms == statistics.median(times[6:]) < 1000.0
    assert run.hot_set.model_ms == run.default_ms


def test_every_hot_dispatch_is_tuned_in_its_slot_and_the_selection_keeps_its_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scheduler tunes the dispatch it expects to gain most first, each within a slot of
    the phase by its expected gain (a dispatch that uses all of its slot leaves the others
    theirs; an earlier run tuned one of six dispatches and had no time left for the model), and
    ends the phase where trying every dispatch's first candidate in the model still fits."""
    from types import SimpleNamespace

    from ireetune.flows.dispatch.options import TuneOptions
    from ireetune.flows.model import local
    from ireetune.flows.model.local_select import room_for_sessions
    from ireetune.model.hot import DispatchProfile, select_hot_dispatches

    clock = [1000.0]
    monkeypatch.setattr(local.time, "monotonic", lambda: clock[0])
    slots: dict[str, float | None] = {}

    def each_takes_its_slot(options: TuneOptions, executor: object) -> SimpleNamespace:
        slots[options.input_path.stem] = options.time_budget_s
        clock[0] += options.time_budget_s or 0.0
        return SimpleNamespace(
            reused=False, best=None, records=(), run_dir=tmp_path, baseline_ms=1.0
        )

    monkeypatch.setattr(local, "tune_dispatch", each_takes_its_slot)
    run = _run(tmp_path)
    run.options = replace(run.options, time_budget_s=1000.0, rounds=3, jobs=2)
    run.started, run.default_ms, run.costs = clock[0], 10.0, ModelCosts(5.0, 1.0)
    profiles = [
        DispatchProfile(name, tmp_path / f"{name}.mlir", f"conv_{name}", True, ms, 1)
        for name, ms in (("d0", 2.0), ("d1", 6.0), ("d2", 2.0))
    ]
    run.hot = select_hot_dispatches(profiles, model_ms=10.0, coverage=1.0, max_dispatches=3)
    phase_s = (
        run.scheduler.dispatch_phase_deadline(clock[0], local.selection_seconds(run, 3)) - clock[0]
    )
    assert local.tune_dispatches(run) is None
    # Shares 0.6, 0.2, 0.2: d1 first with 60% of the phase; d1 gained nothing, so its family's
    # expected gain fell alike for d0 and d2, which share the rest.
    assert list(slots) == ["d1", "d0", "d2"]
    assert slots == pytest.approx({"d1": 0.6 * phase_s, "d0": 0.2 * phase_s, "d2": 0.2 * phase_s})
    assert run.dispatches_done == ["d1", "d0", "d2"]
    # What is left lets the selection compile and time all three first candidates and the
    # joint variant.
    assert room_for_sessions(run)(4, run.costs.compile_s)


def test_a_budget_too_short_for_every_dispatch_tunes_those_it_can_try_in_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With too little time left to tune every hot dispatch and try each in the model (a 30 s
    compile of the model), the phase tunes the dispatches expected to gain most that fit, and
    says of the others why; with less, none, and says what a compile costs."""
    from ireetune.flows.model import local
    from ireetune.flows.model.local_select import session_plan, sessions_seconds
    from ireetune.model.hot import DispatchProfile, select_hot_dispatches
    from ireetune.model.variant_profiles import profiles_seconds

    clock, tuned = _tuning_that_takes_its_slot(tmp_path, monkeypatch)
    profiles = [
        DispatchProfile(name, tmp_path / f"{name}.mlir", f"conv_{name}", True, ms, 1)
        for name, ms in (("d0", 2.0), ("d1", 6.0), ("d2", 2.0))
    ]

    def run_with(budget_s: float) -> ModelTuningRun:
        run = _run(tmp_path)
        run.options = replace(run.options, time_budget_s=budget_s, rounds=3, jobs=2)
        run.started, run.default_ms, run.costs = clock[0], 10.0, ModelCosts(30.0, 1.0)
        run.hot = select_hot_dispatches(profiles, model_ms=10.0, coverage=1.0, max_dispatches=3)
        return run

    one = local.selection_seconds(run_with(0.0), 1)
    assert local.selection_seconds(run_with(0.0), 2) - one >= local.LEAST_SLOT_S
    # One dispatch: one compile of the model (no joint or combined variant, nothing to profile;
    # the decide phase copies its binary); two: three variants in two batches of two, their
    # profiles (and the default's, twice), and a combined variant.
    plan_s = local.selection_seconds(run_with(0.0), 1) - sessions_seconds(
        session_plan(3, 1, 10.0), 1, 10.0, 1.0
    )
    assert plan_s == pytest.approx(30.0 + run_with(0.0).scheduler.tail_seconds(1.0))
    plan_s = local.selection_seconds(run_with(0.0), 2) - sessions_seconds(
        session_plan(3, 3, 10.0), 3, 10.0, 1.0
    )
    assert plan_s == pytest.approx(
        3 * 30.0 + profiles_seconds(3, 10.0, 1.0) + run_with(0.0).scheduler.tail_seconds(1.0)
    )
    run = run_with(one + 3 * local.LEAST_SLOT_S)
    assert local.tune_dispatches(run) is None
    assert tuned == ["d1"]
    left_out = (
        "not tuned: the time budget leaves room to tune and try in the model 1 of the 3 hot "
        "dispatches, the ones expected to gain most"
    )
    assert run.dispatch_notes == {
        "d0": left_out,
        "d1": "no candidate could be measured",
        "d2": left_out,
    }
    assert sorted(run.dispatches_done) == ["d0", "d1", "d2"]

    tuned.clear()
    run = run_with(one / 2)
    assert local.tune_dispatches(run) is None
    assert tuned == []
    assert run.dispatch_notes["d1"] == (
        f"not tuned: what is left of the time budget ({one / 2:.0f} s) can not tune a dispatch "
        "and still try it in the model (a compile of the model takes 30 s)"
    )


def test_a_left_out_dispatch_is_tuned_when_one_before_it_leaves_its_time_unspent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The budget fits two of three dispatches. The first one's space is empty (ZFNet-512's
    matrix-vector product): it takes none of its slot and has no candidate for the selection to
    try, so the third is tuned in the time it left, and its note no longer says it was left
    out. The phase does not end later than it was planned to. Dispatches that take their whole
    slots leave room only when they keep no candidate to try in the model."""
    from ireetune.flows.dispatch.options import TuneOptions
    from ireetune.flows.model import local
    from ireetune.model.hot import DispatchProfile, select_hot_dispatches

    clock, tuned = _tuning_that_takes_its_slot(tmp_path, monkeypatch)
    takes_its_slot = local.tune_dispatch
    slot_ends: list[float] = []

    def empty_for_d1(options: TuneOptions, executor: object) -> SimpleNamespace:
        if options.input_path.stem == "d1":
            raise IreetuneError("the search space of conv_d1 on cpu is empty")
        slot_ends.append(clock[0] + (options.time_budget_s or 0.0))
        return takes_its_slot(options, executor)

    monkeypatch.setattr(local, "tune_dispatch", empty_for_d1)
    profiles = [
        DispatchProfile(name, tmp_path / f"{name}.mlir", f"conv_{name}", True, ms, 1)
        for name, ms in (("d0", 2.0), ("d1", 6.0), ("d2", 1.0))
    ]

    def run_with(budget_s: float) -> ModelTuningRun:
        run = _run(tmp_path)
        run.options = replace(run.options, time_budget_s=budget_s, rounds=3, jobs=2)
        run.started, run.default_ms, run.costs = clock[0], 10.0, ModelCosts(30.0, 1.0)
        run.hot = select_hot_dispatches(profiles, model_ms=10.0, coverage=1.0, max_dispatches=3)
        return run

    run = run_with(local.selection_seconds(run_with(0.0), 2) + 2 * local.LEAST_SLOT_S + 1.0)
    planned_end = run.scheduler.dispatch_phase_deadline(clock[0], local.selection_seconds(run, 2))
    assert local.tune_dispatches(run) is None
    assert tuned == ["d0", "d2"]
    assert run.dispatch_notes["d1"] == "not tuned: the search space of conv_d1 on cpu is empty"
    assert not run.dispatch_notes["d2"].startswith("not tuned")
    assert (
        "d2: selected as well: the dispatches tuned before it left room in the dispatch "
        "phase (unspent slots, or no candidate to try in the model)" in run.notes
    )
    assert sorted(run.dispatches_done) == ["d0", "d1", "d2"]
    assert planned_end is not None and max(slot_ends) <= planned_end + 1e-9

    # Each takes its whole slot and keeps no candidate: the time the selection kept for trying
    # them in the model is free once both are done, and the third is tuned in it.
    tuned.clear()
    monkeypatch.setattr(local, "tune_dispatch", takes_its_slot)
    run = run_with(local.selection_seconds(run_with(0.0), 2) + 2 * local.LEAST_SLOT_S + 1.0)
    assert local.tune_dispatches(run) is None
    assert tuned == ["d1", "d0", "d2"]

    # Each takes its whole slot and keeps a candidate: the third stays left out.
    tuned.clear()

    def keeps_one(
        run: ModelTuningRun, hot: DispatchProfile, slot_s: float | None, share: float = 1.0
    ) -> tuple[float, bool, None]:
        tuned.append(hot.name)
        clock[0] += slot_s or 0.0
        run.candidates[hot.name] = [tmp_path / f"{hot.name}_spec.mlir"]
        return 1.0, True, None

    monkeypatch.setattr(local, "_tune_one_dispatch", keeps_one)
    run = run_with(local.selection_seconds(run_with(0.0), 2) + 2 * local.LEAST_SLOT_S + 1.0)
    assert local.tune_dispatches(run) is None
    assert tuned == ["d1", "d0"]
    assert run.dispatch_notes["d2"].startswith("not tuned: the time budget leaves room to tune")


def test_kin_a_tuned_dispatch_carried_nothing_to_are_selected_while_the_budget_allows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kin group is selected once, through its largest dispatch (model/kin.py). When that
    dispatch's candidates reach none of its kin (none faster alone, here none measured), its
    largest untuned kin is selected and tuned too, while the budget leaves room to try it in
    the model; profile.json says so for `ireetune continue`. Without the room, none is."""
    from ireetune.flows.model import local
    from ireetune.model.hot import DispatchProfile, select_hot_dispatches

    clock, tuned = _tuning_that_takes_its_slot(tmp_path, monkeypatch)
    profiles = [
        DispatchProfile(name, tmp_path / f"{name}.mlir", problem, True, ms, 1, kin)
        for name, problem, ms, kin in [
            ("k1", "conv_k1", 3.0, "conv|?"),
            ("k2", "conv_k2", 2.0, "conv|?"),
            ("k3", "conv_k2", 1.5, "conv|?"),
            ("k4", "conv_k4", 1.0, "conv|?"),
            ("mm", "matmul", 2.5, None),
        ]
    ]

    def run_with(budget_s: float) -> ModelTuningRun:
        run = _run(tmp_path)
        run.options = replace(run.options, time_budget_s=budget_s, rounds=3, jobs=2)
        run.started, run.default_ms, run.costs = clock[0], 10.0, ModelCosts(5.0, 1.0)
        run.hot = select_hot_dispatches(profiles, model_ms=10.0, coverage=1.0, max_dispatches=8)
        return run

    run = run_with(3000.0)
    assert [p.name for p in run.hot_set.selected] == ["k1", "mm"]
    assert local.tune_dispatches(run) is None
    # k1 first (the group's 7.5 ms), then mm, k2 (k3's problem too: its dispatches are tuned
    # together) and k4, each given back when the one before reached none of its kin.
    assert tuned == ["k1", "mm", "k2", "k4"]
    assert [p.name for p in run.hot_set.selected] == ["k1", "mm", "k2", "k4"]
    selected = {
        row["name"]: row["selected"]
        for row in json.loads((tmp_path / "profile.json").read_text())["dispatches"]
    }
    assert selected == {"k1": True, "k2": True, "k3": False, "k4": True, "mm": True}
    assert "k2: selected as well: k1, its kin, carried its candidates to none of its kin" in (
        run.notes
    )

    # Room for the two selected only: no kin is given back.
    tuned.clear()
    run = run_with(local.selection_seconds(run_with(0.0), 2) + 3 * local.LEAST_SLOT_S)
    assert local.tune_dispatches(run) is None
    assert sorted(tuned) == ["k1", "mm"]
    assert [p.name for p in run.hot_set.selected] == ["k1", "mm"]

    # Kin too small to clear the model rule (0.45% of a 1000 ms model) are not given back.
    tuned.clear()
    run = run_with(3000.0)
    run.hot = select_hot_dispatches(profiles, model_ms=1000.0, coverage=1.0, max_dispatches=8)
    assert local.tune_dispatches(run) is None
    assert sorted(tuned) == ["k1", "mm"]


@pytest.mark.parametrize(
    "matmul",
    ["mmt4d_12x16x190x16x576x1_f32_f32_f32", "inner_tiled_12x190x576_16x16x1_f32_f32_f32"],
)
def test_with_room_for_one_a_window_sum_goes_before_a_larger_data_tiled_matmul(
    matmul: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A data-tiled matmul's space searches only how its work is split (its prior is
    DISTRIBUTION_ONLY_PRIOR, an inner-tiled one's too): with room for one dispatch, GoogLeNet's window sum over channels
    (10.9% of the model) is tuned before its largest mmt4d (12.0%), as it was when that run's
    one spec gave the model 1.160x."""
    from ireetune.flows.model import local
    from ireetune.model.hot import DispatchProfile, select_hot_dispatches

    clock, tuned = _tuning_that_takes_its_slot(tmp_path, monkeypatch)
    profiles = [
        DispatchProfile(name, tmp_path / f"{name}.mlir", problem, True, ms, 1)
        for name, problem, ms in [
            ("mm", matmul, 12.0),
            ("lrn", "conv_192x55x55x5_f32_f32_f32", 10.9),
        ]
    ]

    def run_with(budget_s: float) -> ModelTuningRun:
        run = _run(tmp_path)
        run.options = replace(run.options, time_budget_s=budget_s, rounds=3, jobs=2)
        run.started, run.default_ms, run.costs = clock[0], 100.0, ModelCosts(5.0, 1.0)
        run.hot = select_hot_dispatches(profiles, model_ms=100.0, coverage=1.0, max_dispatches=8)
        return run

    assert [p.name for p in run_with(0.0).hot_set.selected] == ["mm", "lrn"]
    run = run_with(local.selection_seconds(run_with(0.0), 1) + 3 * local.LEAST_SLOT_S)
    assert local.tune_dispatches(run) is None
    assert tuned == ["lrn"]
    assert run.dispatch_notes["mm"].startswith("not tuned: the time budget leaves room")


def test_with_room_for_one_a_dispatch_far_from_the_models_fastest_goes_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two convolutions, neither data-tiled: the larger (12% of the model) runs at the FLOPs a
    ms the model's fastest dispatch reaches, the smaller (6%) at a tenth of it. With room for
    one, the smaller is tuned (model/headroom.py), and its note says how far it ran from the
    fastest. Without their work known, the larger would be: both have the same prior."""
    from ireetune.flows.model import local
    from ireetune.model.hot import DispatchProfile, select_hot_dispatches

    clock, tuned = _tuning_that_takes_its_slot(tmp_path, monkeypatch)

    def profiles(flops: int) -> list[DispatchProfile]:
        return [
            DispatchProfile(name, tmp_path / f"{name}.mlir", problem, True, ms, 1, None, work, 0)
            for name, problem, ms, work in [
                ("dense", "conv_1x56x56x32x3x3x128_f32_f32_f32", 12.0, 12 * flops),
                ("window", "conv_1x14x14x576x3x3_f32_f32_f32", 6.0, 6 * flops // 10),
                ("rest", "matmul_64x64x64_f32_f32_f32", 82.0, 82 * flops),
            ]
        ]

    def run_with(budget_s: float, flops: int) -> ModelTuningRun:
        run = _run(tmp_path)
        run.options = replace(run.options, time_budget_s=budget_s, rounds=3, jobs=2)
        run.started, run.default_ms, run.costs = clock[0], 100.0, ModelCosts(5.0, 1.0)
        run.hot = select_hot_dispatches(
            profiles(flops)[:2], model_ms=100.0, coverage=1.0, max_dispatches=8
        )
        run.hot = replace(run.hot, ranked=(*run.hot.ranked, profiles(flops)[2]))
        return run

    budget = local.selection_seconds(run_with(0.0, 0), 1) + 3 * local.LEAST_SLOT_S
    run = run_with(budget, 1_000_000)
    assert local.tune_dispatches(run) is None
    assert tuned == ["window"]
    assert run.dispatch_notes["dense"].startswith("not tuned: the time budget leaves room")
    assert any(
        "(it ran at 10% of the throughput the model's fastest dispatches reach)" in note
        for note in run.notes
    )

    # The report says why a dispatch the hot set left out was left out.
    notes = {outcome.name: outcome.note for outcome in local.dispatch_outcomes(run)}
    assert notes["rest"] == (
        "not selected: others were expected to gain more (the hot set weighs each dispatch's "
        "time by how far it ran from the model's fastest dispatches)"
    )

    tuned.clear()
    unknown = run_with(budget, 0)
    assert local.tune_dispatches(unknown) is None
    assert tuned == ["dense"]
    assert {o.name: o.note for o in local.dispatch_outcomes(unknown)}["rest"] == "not selected"


def test_a_family_learns_apart_near_and_far_from_the_models_fastest(tmp_path: Path) -> None:
    """A dense convolution at the model's fastest FLOPs a ms and a depthwise one at a tenth are
    two families to the scheduler: what tuning the first found teaches nothing about the
    second. Without their work known, both are `conv`."""
    from ireetune.flows.model import local
    from ireetune.model.hot import DispatchProfile, select_hot_dispatches

    def profiles(flops: int) -> list[DispatchProfile]:
        return [
            DispatchProfile(
                name, tmp_path / f"{name}.mlir", f"conv_{name}", True, 1.0, 1, None, f, 0
            )
            for name, f in [("dense", 10 * flops), ("depthwise", flops)]
        ]

    known = select_hot_dispatches(profiles(1000), 2.0, 1.0, 8)
    dense, depthwise = (
        local._task_of(known, p) for p in sorted(known.ranked, key=lambda p: p.name)
    )
    assert (dense.family, depthwise.family) == ("conv/near", "conv/far")
    assert depthwise.prior > dense.prior
    unknown = select_hot_dispatches(profiles(0), 2.0, 1.0, 8)
    assert {local._task_of(unknown, p).family for p in unknown.ranked} == {"conv"}


def test_a_dispatch_killed_mid_tuning_is_resumed_in_its_own_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Continuing a model run stopped while a dispatch was tuned resumes that dispatch's folder
    at the stage after the last one it saved (its candidates are not compiled again), instead of
    tuning it from the start in a new folder."""
    from ireetune.flows.dispatch import tuner as dispatch_tuner
    from ireetune.flows.model import local
    from ireetune.model.hot import DispatchProfile
    from tests.conftest import MATMUL_MODEL

    def stopped(run: object) -> NoReturn:
        raise KeyboardInterrupt  # As Ctrl-C would, once the compiled candidates are saved.

    model = tmp_path / "matmul.mlir"
    model.write_text(MATMUL_MODEL)
    run = _run(tmp_path)
    run.options = replace(run.options, num_candidates=3, use_database=False)
    hot = DispatchProfile("d0", model, "matmul", True, 1.0, 1)
    with monkeypatch.context() as patch:
        patch.setattr(dispatch_tuner, "measure_stage", stopped)
        with pytest.raises(KeyboardInterrupt):
            local._tune_one_dispatch(run, hot, None)
    (folder,) = (tmp_path / "tuning").iterdir()
    compiled = {path: path.stat().st_mtime_ns for path in folder.rglob("*.vmfb")}
    assert len(compiled) >= 3

    speedup, *_ = local._tune_one_dispatch(run, hot, None)
    assert speedup
    assert list((tmp_path / "tuning").iterdir()) == [folder]
    assert {path: path.stat().st_mtime_ns for path in compiled} == compiled
    assert run.candidates["d0"] and all(
        spec.is_relative_to(folder) for spec in run.candidates["d0"]
    )
    assert run.notes == [f"d0: its killed tuning run was resumed in {folder.name}"]


def test_later_phases_plan_with_the_flag_winner_s_compile_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Data tiling and im2col doubled MobileNet-v2's compile (6 s with the default flags, 13 s
    # with the winner's): planned on the default's, the run passed --time-budget.
    from ireetune.core.flag_space import FlagSet, FlagSpace
    from ireetune.decision.stats import Basis, SpeedupEstimate
    from ireetune.flags.trials import FlagSearchResult, FlagTrial, TrialStatus
    from ireetune.flows.model import flag_phase
    from ireetune.model.select import MODEL_RULE

    winner, other = FlagSet(("--iree-opt-data-tiling",)), FlagSet(("--iree-opt-level=O3",))
    trials = (
        FlagTrial(0, FlagSet(), TrialStatus.DEFAULT, compile_s=6.0),
        FlagTrial(1, winner, TrialStatus.TIMED, compile_s=13.0),
        FlagTrial(2, other, TrialStatus.TIMED, compile_s=30.0),
    )
    estimate = SpeedupEstimate(2.0, 1.9, 2.1, 5, Basis.MODEL, 10.0, 5.0)
    search = FlagSearchResult(
        winner, estimate, trials, MODEL_RULE, tmp_path / "trials.json",
        winner_binary=tmp_path / "winner.vmfb",
    )  # fmt: skip
    request = SimpleNamespace(space=FlagSpace((), ((winner,),)))
    monkeypatch.setattr(flag_phase, "flag_search_request", lambda run, target: request)
    monkeypatch.setattr(flag_phase, "search_model_flags", lambda executor, request, folder: search)
    run = _run(tmp_path)
    run.model = SimpleNamespace(target=None)  # type: ignore[assignment]
    run.costs = ModelCosts(compile_s=6.0, load_s=0.5)
    assert flag_phase.search_flags(run) is None
    assert run.costs == ModelCosts(compile_s=13.0, load_s=0.5)
    # A winner that compiles faster than the default leaves the longer figure.
    run.costs = ModelCosts(compile_s=20.0, load_s=0.5)
    assert flag_phase.search_flags(run) is None
    assert run.costs.compile_s == 20.0


def test_a_dispatch_is_tuned_on_the_model_s_dumped_benchmark_batched_and_checked_on_real_inputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the CPU the model's dispatch session searches and decides on the dispatch as the
    profile times it (its dumped benchmark, zeroed, batched), not on the root op alone on real
    inputs, called once per timing, as a standalone tune-dispatch does; the contenders' outputs
    are still checked on real inputs before any goes to the model (which decides)."""
    from ireetune.flows.dispatch import tuner as dispatch_tuner
    from ireetune.flows.dispatch.options import TuneOptions
    from ireetune.flows.model import local
    from ireetune.frontend.dispatches import dump_dispatches
    from ireetune.model.hot import DispatchProfile
    from ireetune.report.result import TuneResult
    from tests.conftest import FAST_RUN_OPTIONS, MATMUL_MODEL

    def every_candidate_a_contender(options: TuneOptions, executor: object) -> TuneResult:
        # The model flow's options, with every candidate confirmed and checked: no threshold.
        relaxed = replace(
            options, threshold=0.0, confirm_above=0.0, confirm_top=3, hopeless_factor=1000.0,
            **FAST_RUN_OPTIONS,
        )  # fmt: skip
        return dispatch_tuner.tune_dispatch(relaxed, executor)  # type: ignore[arg-type]

    monkeypatch.setattr(local, "tune_dispatch", every_candidate_a_contender)
    model = tmp_path / "matmul.mlir"
    model.write_text(MATMUL_MODEL)
    run = _run(tmp_path)
    run.options = replace(run.options, num_candidates=3, use_database=False)
    (dumped,) = dump_dispatches(model, run.target, tmp_path / "dispatches", 120.0)
    hot = DispatchProfile(dumped.name, dumped.path, "matmul", True, 1.0, 1)
    speedup, *_ = local._tune_one_dispatch(run, hot, None)
    assert speedup
    (folder,) = (tmp_path / "tuning").iterdir()
    info = json.loads((folder / "results.json").read_text())
    assert (info["timing_basis"], info["rule"].split("/")[-2]) == ("dispatch", "dispatch")
    # Each candidate was compiled from the model's benchmark, its buffer zeroed, and batched.
    assert (
        "hal.command_buffer.fill_buffer"
        in (folder / "inputs" / "stripped_benchmark.mlir").read_text()
    )
    measured = [c for c in info["candidates"] if c["median_ms"] is not None]
    assert {c["timing"] for c in measured} == {"batched"}
    contenders = sorted(int(cid) for cid in info["decision"]["judgements"])
    assert contenders == sorted(c["candidate_id"] for c in measured if c["candidate_id"])
    assert {c["candidate_id"]: c["outputs_match"] for c in measured if c["candidate_id"]} == {
        cid: True for cid in contenders
    }
    assert "real_input_timings" not in info
    assert run.candidates[dumped.name]


def test_with_a_time_budget_the_hot_set_covers_the_whole_model_unless_told_otherwise(
    tmp_path: Path,
) -> None:
    from ireetune.flows.model.phases import hot_coverage

    options = _run(tmp_path).options
    assert hot_coverage(options) == 0.9
    assert hot_coverage(replace(options, time_budget_s=600.0)) == 1.0
    assert hot_coverage(replace(options, time_budget_s=600.0, coverage=0.5)) == 0.5
    assert hot_coverage(replace(options, coverage=0.5)) == 0.5


def test_a_split_run_s_grouped_convolutions_point_at_the_option_that_splits_them(
    tmp_path: Path,
) -> None:
    """A split mode run cannot time the split import on the compile host: its note names the
    option. An in-process run timed both imports in its prepare phase, and one given the
    option (either way) chose."""
    from ireetune.flows.model.phases import grouped_convolutions_note
    from ireetune.flows.model.run import Mode
    from ireetune.model.hot import DispatchProfile, select_hot_dispatches

    grouped = "not tunable: conv_1x2x128: a grouped convolution (2 groups) is not tuned on the CPU"
    profiles = [
        DispatchProfile("g", tmp_path / "g.mlir", grouped, False, 3.0, 1),
        DispatchProfile("m", tmp_path / "m.mlir", "matmul_8x8x8", True, 1.0, 1),
    ]
    # The share is of the model's measured time (6 ms), as the report's table counts it.
    hot = select_hot_dispatches(profiles, 6.0, 1.0, 8)
    onnx = ModelTuneOptions(model_path=tmp_path / "m.onnx", output_dir=tmp_path)
    note = grouped_convolutions_note(hot, onnx, Mode.SPLIT)
    assert note is not None and note.startswith("1 dispatch(es), 50% of the model's measured time")
    assert "--split-grouped-convs" in note
    assert grouped_convolutions_note(hot, onnx, Mode.IN_PROCESS) is None
    for chosen in (True, False):
        assert (
            grouped_convolutions_note(hot, replace(onnx, split_grouped_convs=chosen), Mode.SPLIT)
            is None
        )
    alone = select_hot_dispatches(profiles[1:], 6.0, 1.0, 8)
    assert grouped_convolutions_note(alone, onnx, Mode.SPLIT) is None
    mlir = replace(onnx, model_path=tmp_path / "m.mlir")
    assert grouped_convolutions_note(hot, mlir, Mode.SPLIT) is None


def test_a_session_faster_than_the_profile_cuts_the_gain_the_scheduler_learns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dispatch profiled at 6 times its own session's time of the default (an im2col gather
    whose time moved between two speeds) saves the model what the session's default loses: its
    family learns that, and the note says from which time it was counted."""
    from ireetune.core.candidate import make_knobs
    from ireetune.core.records import CandidateRecord, CandidateStatus
    from ireetune.flows.dispatch.options import TuneOptions
    from ireetune.flows.model import local
    from ireetune.model.hot import DispatchProfile, select_hot_dispatches

    def found_twice_as_fast(options: TuneOptions, executor: object) -> SimpleNamespace:
        records = (
            CandidateRecord(0, None, CandidateStatus.MEASURED, median_ms=0.15),
            CandidateRecord(
                1,
                make_knobs({"vec_0": 8}),
                CandidateStatus.MEASURED,
                median_ms=0.075,
                spec_path="1_spec.mlir",
                speedup=2.0,
            ),  # fmt: skip
        )
        return SimpleNamespace(
            reused=False, best=None, records=records, run_dir=tmp_path, baseline_ms=0.15
        )

    monkeypatch.setattr(local, "tune_dispatch", found_twice_as_fast)
    run = _run(tmp_path)
    run.default_ms = 10.0
    gather = DispatchProfile("im2col", tmp_path / "g.mlir", "elementwise_7x7x3x3x224", True, 0.9, 2)
    run.hot = select_hot_dispatches([gather], model_ms=10.0, coverage=1.0, max_dispatches=1)
    assert local.tune_dispatches(run) is None
    # Share 0.18 of the model (prior 10%); the profile's cut would save 9%, the session's a sixth.
    assert run.notes == [
        "im2col: expected to save 1.80% of the model; its best candidate 2.000x alone (1.50% of "
        "the model, counted from its session's 0.15 ms a launch for the default, not the "
        "profile's 0.9 ms)"
    ]
