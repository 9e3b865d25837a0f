"""The phases of the model flow that have one body for both modes: the modes differ only in
where they measure, here or on the device host (a `Pause`, and the device's results read back on
`continue`, flows/model/split_device.py).

prepare   the model imported (MLIR as is; ONNX through iree-import-onnx) into the run folder's
          own copy, its inputs written, the default model compiled. In process the default is
          timed here (`_time_here`): its time, its outputs and what a compile and a timing
          session cost plan the later phases. Split, the device times it in the profile phase's
          round trip; each sub-step (the import, the default's compile) is recorded in
          model_run.json as it finishes and kept when the phase runs again after a kill, and an
          ONNX model's weights may stay outside its MLIR (`--externalize-weights`).
profile   the model's dispatches profiled on its device, and the hot set picked from them
          (`--coverage`, `--max-dispatches`; dispatches too small for the model rule skipped;
          profile.json). In process the dispatch benchmarks are dumped, compiled, their launches
          counted and each timed here, against the prepare phase's time of the model, or the
          flag phase's winner timed again (`_measure_here`). Split, they are dumped, compiled
          and counted here, each tunable one's work measured, and the dispatch-level folders of
          the ones a static ranking puts first (FLOPs x launches) compiled; then [device] the
          model and every dispatch are profiled and every folder measured
          (`_measure_on_device`).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ireetune.core.errors import IreetuneError
from ireetune.flows.dispatch.options import References, StopAfter, TuneOptions
from ireetune.flows.dispatch.tuner import tune_dispatch
from ireetune.flows.handoff.model_folder import LabelledBinary, ProfileTask, hash_file
from ireetune.flows.model.options import DEFAULT_COVERAGE, ModelTuneOptions
from ireetune.flows.model.run import Mode, ModelCosts, ModelTuningRun, Pause
from ireetune.flows.model.split_device import record_time, relative_to_run, send_to_device
from ireetune.flows.model.state import ModelFile, SplitDispatchFile
from ireetune.flows.model.state_restore import save_run
from ireetune.frontend.model_import import import_model
from ireetune.model.gate import skip_small_dispatches
from ireetune.model.headroom import efficiencies, prior_cut
from ireetune.model.hot import DispatchProfile, HotSet, select_hot_dispatches
from ireetune.model.prepare import ModelUnderTuning, write_model_inputs
from ireetune.model.profile import (
    InModelProfile,
    benchmark_exports,
    profile_dispatches,
    write_profile,
)
from ireetune.model.select import MODEL_RULE
from ireetune.model.static_rank import estimate_cost, pre_rank_dispatches
from ireetune.model.timing import ModelComparison, ModelRun, fastest_round_ms
from ireetune.problem.convolution import GROUPED_CONVOLUTION

# How the prepare phase times the default model: at least this many rounds of this many calls.
PREPARE_MIN_ROUNDS = 3
PREPARE_REPETITIONS = 3


def prepare(run: ModelTuningRun) -> Pause | None:
    """Import the model (its own copy in the folder), write its inputs, compile the default
    model; in process, time it."""
    options, run_dir = run.options, run.run_dir
    split = run.mode is Mode.SPLIT
    # The sub-steps a split run did before a kill (an in-process run does the phase again).
    done = run.split_state.done_steps if split else []
    if "import" not in done:
        weights = run_dir / "import" / "weights.irpa"
        externalize = split and options.externalize_weights and options.model_path.suffix == ".onnx"
        mlir_path = import_model(
            options.model_path, run_dir / "import", weights if externalize else None,
            options.split_grouped_convs is True, run.notes,
        )  # fmt: skip
        if not mlir_path.resolve().is_relative_to(run_dir.resolve()):
            # The run compiles its own copy (same name: binaries embed it), so a continued run
            # reads no model its folder names (a folder is data: flows/handoff/folder_trust.py),
            # and a split run's later phases check its hash.
            (run_dir / "import").mkdir(exist_ok=True)
            mlir_path = shutil.copyfile(mlir_path, run_dir / "import" / mlir_path.name)
        mlir_path, function = write_model_inputs(
            mlir_path, options.inputs, options.seed, run_dir / "inputs.npz", options.function,
            run_dir / "import",
        )  # fmt: skip
        run.model_file = ModelFile(
            mlir=relative_to_run(run_dir, mlir_path), mlir_sha256=hash_file(mlir_path),
            function=function, parameters=("import/weights.irpa",) if externalize else (),
        )  # fmt: skip
        _step_done(run, done, "import")
    run.model = model = model_of(run)
    if not split:
        model.device = options.devices[0] if options.devices else run.target.runtime_device
    if "default" not in done:
        compile_started = time.monotonic()
        model.compile_default(run_dir / "default.vmfb")
        assert run.model_file is not None
        run.model_file = run.model_file.model_copy(
            update={"compile_timeout_s": model.compile_timeout_s}
        )
        _step_done(run, done, "default")
        if not split:
            _time_here(run, compile_started)
    return None


def model_of(run: ModelTuningRun) -> ModelUnderTuning:
    """Return the model under tuning as the run file records it."""
    model = run.model_file
    assert model is not None, "the prepare phase imports the model"
    under_tuning = ModelUnderTuning(
        run.run_dir / model.mlir, model.function, run.run_dir / model.inputs, run.target,
        run.options.with_default_specs,
    )  # fmt: skip
    under_tuning.compile_timeout_s = model.compile_timeout_s
    return under_tuning


def _step_done(run: ModelTuningRun, done: list[str], step: str) -> None:
    """Record a split run's sub-step as done (an in-process run records only its phases)."""
    if run.mode is Mode.SPLIT:
        done.append(step)
        save_run(run)


def _time_here(run: ModelTuningRun, compile_started: float) -> None:
    """Time the default model here: its time, its outputs, and what a compile and a timing
    session cost besides the calls."""
    run.default_vmfb = run.original_vmfb = run.run_dir / "default.vmfb"
    timing_started = time.monotonic()
    timed = _time_model(run, run.default_vmfb, ())
    calls_s = sum(timed.times_ms) / 1000.0
    run.costs = ModelCosts(
        timing_started - compile_started, max(0.0, time.monotonic() - timing_started - calls_s)
    )
    run.under_tuning.default_outputs = timed.outputs
    run.default_ms = run.original_ms = fastest_round_ms(timed.times_ms, PREPARE_REPETITIONS)


def _time_model(run: ModelTuningRun, vmfb: Path, runtime_flags: Sequence[str]) -> ModelRun:
    """Time one build of the model here in a few rounds of a few calls.

    Its time is the basis of every share the profile gives and of the gate that skips
    dispatches too small to matter: the median of its fastest round (`fastest_round_ms`), as
    the profile keeps each dispatch's (model/dispatch_times.py), and never of `--rounds 1` (one
    call, which a loaded machine made 12 times a 0.07 ms model's time)."""
    model, options = run.under_tuning, run.options
    timed = run.executor.run_models_side_by_side(
        ModelComparison(
            [("default", vmfb)], model.function, model.inputs_path, run.run_dir, model.device,
            max(options.rounds, PREPARE_MIN_ROUNDS), PREPARE_REPETITIONS,
            runtime_flags=runtime_flags,
        )
    )["default"]  # fmt: skip
    if not timed.ok:
        raise IreetuneError(f"the default model does not run: {timed.reason}")
    return timed


# The dispatches' profiles with their times, and the model's time; or the pause for the device.
Measured = tuple[list[DispatchProfile], float] | Pause


def hot_coverage(options: ModelTuneOptions) -> float:
    """Return the share of the model's time the hot set covers: `--coverage`; without it 0.9,
    or with a time budget all of it, so that the dispatch phase's scheduler, not a share, picks
    which of the `--max-dispatches` hot dispatches to tune. The BERT-style encoder's profile
    once put 90% in three problems: the run tuned those and ended 200 s before its 600 s budget,
    leaving its packs (3.4x faster alone in another run) untuned (2026-12-03)."""
    if options.coverage is not None:
        return options.coverage
    return DEFAULT_COVERAGE if options.time_budget_s is None else 1.0


def weighs_hot_set(options: ModelTuneOptions, mode: Mode) -> bool:
    """Say whether the hot set is weighed by headroom (`hot_weight`): in process, with a time
    budget."""
    return options.time_budget_s is not None and mode is Mode.IN_PROCESS


def hot_weight(
    options: ModelTuneOptions, profiles: Sequence[DispatchProfile], mode: Mode
) -> Callable[[DispatchProfile], float] | None:
    """Return what the hot set weighs each dispatch's time by: in process with a time budget,
    the share of its time tuning it is expected to cut, from how far it runs from the model's
    fastest dispatches (model/headroom.py), so that the `--max-dispatches` tuned are those the
    scheduler expects to gain most. inception_v2's window sums and pooling windows took 35% of
    its time, 2-4% each, ran at a tenth of its convolutions' throughput, and were left out of a
    hot set of its largest dispatches (2026-12-06). None without a budget (the hot set then
    covers `--coverage` of the time, and every dispatch of it is tuned), and in split mode: its
    compile host compiles the candidates of the dispatches likely to be hot before the device
    times any (model/static_rank.py), and a hot set weighed after would need another trip."""
    if not weighs_hot_set(options, mode):
        return None
    found = efficiencies(profiles)
    return lambda profile: prior_cut(profile, found)


def profile(run: ModelTuningRun) -> Pause | None:
    """Profile the model's dispatches on its device and pick the hot set (profile.json)."""
    options = run.options
    measured = _measure_on_device(run) if run.mode is Mode.SPLIT else _measure_here(run)
    if isinstance(measured, Pause):
        return measured
    profiles, model_ms = measured
    run.hot = select_hot_dispatches(
        profiles,
        model_ms,
        hot_coverage(options),
        options.max_dispatches,
        hot_weight(options, profiles, run.mode),
    )
    run.hot, skipped = skip_small_dispatches(run.hot, MODEL_RULE.threshold)
    run.dispatch_notes.update(skipped)
    write_profile(run.run_dir, run.hot)
    grouped = grouped_convolutions_note(run.hot, options, run.mode)
    if grouped is not None:
        run.notes.append(grouped)
    return None


def grouped_convolutions_note(hot: HotSet, options: ModelTuneOptions, mode: Mode) -> str | None:
    """Point a split mode run of an ONNX model at `--split-grouped-convs` when its profile holds
    grouped convolutions, which no space tunes (None: it has none, is no ONNX model, the option
    was given, or the run is in process, whose flag phase timed the split import itself);
    their share is of the model's measured time, as the report's table counts it."""
    onnx = options.model_path.suffix.lower() == ".onnx"
    if options.split_grouped_convs is not None or mode is not Mode.SPLIT or not onnx:
        return None
    grouped = [p for p in hot.ranked if not p.tunable and GROUPED_CONVOLUTION in p.problem]
    if not grouped:
        return None
    share = sum(p.total_ms for p in grouped) / max(hot.model_ms, hot.explained_ms, 1e-9)
    return (
        f"{len(grouped)} dispatch(es), {share:.0%} of the model's measured time, are grouped "
        "convolutions, which are not tuned: "
        "--split-grouped-convs splits an ONNX model's per group at import "
        "(AlexNet ran about 4x faster so on a 2-core AVX-512 machine; docs/model_tuning.md)"
    )


def _measure_here(run: ModelTuningRun) -> Measured:
    """Dump, compile and time every dispatch here; the model's time is the prepare phase's, or
    the flag phase's winner timed again beside the dispatches: the flag phase's session timed it
    among dozens of sets, one call a turn, and a stretch at the machine's slow speed stays in
    its estimate (GoogLeNet's winner read 38.4 ms there, 27.4 ms in the same run's final
    check, and every dispatch's share of the model a third too small; 2026-12-05)."""
    model = run.under_tuning
    runtime_flags = run.flag_search.runtime_flags if run.flag_search else ()
    in_model = None
    if run.default_vmfb is not None:
        comparison = ModelComparison(
            [("default", run.default_vmfb)], model.function, model.inputs_path, run.run_dir,
            model.device, 1, runtime_flags=runtime_flags,
        )  # fmt: skip
        in_model = InModelProfile(comparison, run.default_ms)
    dispatches = profile_dispatches(
        run.executor, model, run.run_dir, run.options.jobs, timed=True, in_model=in_model
    )
    if dispatches.timed_how:
        run.notes.append(dispatches.timed_how)
    if run.default_vmfb != run.original_vmfb and run.default_vmfb is not None:
        timed = _time_model(run, run.default_vmfb, runtime_flags)
        run.default_ms = fastest_round_ms(timed.times_ms, PREPARE_REPETITIONS)
    return dispatches.profiles, run.default_ms


def _measure_on_device(run: ModelTuningRun) -> Measured:
    """Dump and compile the dispatch benchmarks; before the device has profiled the model,
    compile the folders of the dispatches ranked first and pause; after, return its times."""
    options, run_dir, state = run.options, run.run_dir, run.split_state
    done = state.done_steps
    if "dispatches" not in done:
        dispatches = profile_dispatches(
            run.executor, run.under_tuning, run_dir, options.jobs, timed=False
        )
        state.dispatches = [
            SplitDispatchFile(
                index=d.index, name=d.name, benchmark=relative_to_run(run_dir, d.path),
                vmfb=relative_to_run(run_dir, dispatches.binaries[d.index]) if d.index in dispatches.binaries else "",
                problem=p.problem, tunable=p.tunable, invocations=p.invocations, kin=p.kin,
                flops=p.flops, bytes=p.bytes,
            )
            for d, p in zip(dispatches.dumped, dispatches.profiles, strict=True)
        ]  # fmt: skip
        done.append("dispatches")
        save_run(run)
    measured = state.profile
    dispatch_ms = measured.dispatch_ms if measured is not None else {}
    profiles = [
        DispatchProfile(
            d.name,
            run_dir / d.benchmark,
            d.problem,
            d.tunable,
            dispatch_ms.get(d.name),
            d.invocations,
            d.kin,
            d.flops,
            d.bytes,
        )  # fmt: skip
        for d in state.dispatches
    ]
    if measured is not None:
        if measured.timed_how and measured.timed_how not in run.notes:
            run.notes.append(measured.timed_how)
        return profiles, measured.model_ms
    costs = {d.name: estimate_cost(d.flops, d.bytes) for d in state.dispatches}
    compile_folders(run, pre_rank_dispatches(profiles, costs, options.max_dispatches))
    record_time(state, "prepare", "compile", time.monotonic() - run.started)
    dispatch_binaries = [LabelledBinary(d.name, d.vmfb) for d in state.dispatches if d.vmfb]
    launches = {d.name: d.invocations for d in state.dispatches if d.vmfb}
    exports = {
        d.name: tuple(benchmark_exports(run_dir / d.benchmark)) for d in state.dispatches if d.vmfb
    }
    return send_to_device(
        run,
        ProfileTask(tuple(dispatch_binaries), options.rounds, launches, exports),
        sorted(state.folders.values()),
    )


def compile_folders(run: ModelTuningRun, dispatches: Sequence[DispatchProfile]) -> None:
    """Compile a dispatch-level benchmark folder for each problem that has none."""
    options, run_dir, state = run.options, run.run_dir, run.split_state
    for hot in dispatches:
        if hot.problem in state.folders:
            continue
        try:
            result = tune_dispatch(
                TuneOptions(
                    input_path=hot.benchmark_path, target=options.target,
                    num_candidates=options.num_candidates, output_dir=run_dir / "tuning",
                    jobs=options.jobs, seed=options.seed, devices=tuple(state.devices),
                    use_database=False, show_progress=options.show_progress,
                    extra_flags=run.target.global_flags, stop_after=StopAfter.COMPILE,
                    # Every candidate's reference program now, so that one device step both
                    # measures and verifies (deferring them to the leaders costs a round trip).
                    references=References.ALL, decide_on_dispatch_benchmark=True,
                ),
                run.executor,
            )  # fmt: skip
        except IreetuneError as failure:
            run.notes.append(f"{hot.name}: not tuned: {failure}")
            state.folders[hot.problem] = ""
            save_run(run)
            continue
        state.folders[hot.problem] = relative_to_run(run_dir, result.run_dir)
        save_run(run)
