"""The flag phase of a model run, in both modes: search the target's global compile flags on the
whole model; every later phase compiles with the winner (`flag_phase`).

In process (`search_flags`): flags/model_search.py searches (its seeds, then greedy single
changes of the best set, then the runtime options on the winner), compiling and timing here.

Split (`search_flags_split`): propose and compile here, time on the device, decide here.

    compile   the sets the in-process search starts from (`propose_seeds`: the target's
              known-good sets, or the `--try-flags` sets; at most `--max-flag-sets`; none that
              touches an option `--flags` fixes), each compiled once from the model's own copy,
              beside the default compiled the same way (flags/trials.py `compile_flag_sets`); a
              binary equal to the default's or an earlier set's is not timed
              (`classify_by_hash`)
    [device]  the untouched default and every distinct binary timed side by side in one
              process, interleaved, on the model's inputs, outputs compared with the default's;
              the fastest few by point estimate timed again in a fresh session (the variants'
              two sessions, flows/handoff/device_step.py): one round trip
    decide    the flag rule (`--flag-threshold`: the fresh session's interval above it, outputs
              equal) through `judge_flag_sets`, as in process; `flags/trials.json`. Every later
              compile carries the winner (`Target.with_global_flags`: the dispatch dump, the
              dispatch folders, the variants) and every later device task times the winner's
              binary as the default, as in process. The binaries of the sets not kept are
              deleted (`remove_losing_binaries`; the default's and the winner's stay).

What the in-process search does past its seeds (greedy single changes of the best set, each
successively halved) needs a measurement per step, and the runtime options' search
(flags/runtime.py) two sessions on the winner's binary (every set, then the best again): both
are in process only, and the split report says so. Each sub-step is recorded in model_run.json
(`split.flags`) as it finishes and kept when the phase runs again after a kill.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from ireetune.compile.driver import DEFAULT_SPECS_FLAG
from ireetune.compile.pool import default_jobs
from ireetune.core.errors import IreetuneError
from ireetune.core.flag_space import DEFAULT_FLAGS, FlagSpace
from ireetune.core.target import Target
from ireetune.flags.file import write_flag_files
from ireetune.flags.model_search import (
    propose_seeds,
    repetitions_for,
    search_model_flags,
    with_timing,
)
from ireetune.flags.trials import (
    TRIALS_FILE_NAME,
    FlagSearchResult,
    ModelFlagSearch,
    TrialStatus,
    classify_by_hash,
    compile_flag_sets,
    judge_flag_sets,
    model_flag_rule,
    remove_losing_binaries,
    write_trials,
)
from ireetune.flows.handoff.model_folder import LabelledBinary, VariantTask
from ireetune.flows.model.import_choice import choose_import
from ireetune.flows.model.run import Mode, ModelCosts, ModelTuningRun, Pause
from ireetune.flows.model.split_device import (
    device_step_command,
    load_outputs,
    record_time,
    send_to_device,
)
from ireetune.flows.model.state import SplitFlagsFile
from ireetune.flows.model.state_restore import save_run
from ireetune.model.timing import ModelRun

FLAGS_DIR = "flags"

# Said in the report of every split run that searched flags.
SPLIT_FLAG_NOTE = (
    "split flow: the flag phase timed the known-good sets in one round trip; the greedy steps "
    "past them are searched in process only"
)
RUNTIME_NOTE = (
    "runtime options: not searched in the split flow (in process only: `ireetune tune MODEL` "
    "on the device host)"
)


def flag_phase(run: ModelTuningRun) -> Pause | None:
    """Run the flag phase in the run's mode: the whole search here, or the split round trip."""
    if run.mode is Mode.SPLIT:
        return search_flags_split(run)
    search_flags(run)
    # The import tuned from here on, judged under the flags kept (flows/model/import_choice.py).
    choose_import(run)
    return None


def search_flags(run: ModelTuningRun) -> Pause | None:
    """Search the target's global flags on the whole model; later phases use the winner."""
    run.flag_request = request = flag_search_request(run, run.target)
    if not (run.options.search_flags and request.space.options + request.space.combinations):
        return None
    run.flag_search = search = search_model_flags(run.executor, request, run.run_dir / "flags")
    run.notes.extend(search.notes)
    if search.winner_binary is not None and search.estimate is not None:
        # Everything after this phase (dumps, dispatch tuning, selection) uses the winner.
        run.target = run.target.with_global_flags((*run.options.extra_flags, *search.winner.flags))
        run.under_tuning.target = run.target
        run.default_vmfb, run.default_ms = search.winner_binary, search.estimate.candidate_ms
        run.costs = costs_under_winner(run.costs, search)
    # Kept the moment the phase decides: a later phase that fails must not lose it.
    write_flag_files(run.run_dir, run.target.global_flags, search.runtime_flags)
    return None


def costs_under_winner(costs: ModelCosts, search: FlagSearchResult) -> ModelCosts:
    """The model's costs once the flag phase's winner applies: a compile takes what the winner's
    took, when that is longer (data tiling and im2col doubled MobileNet-v2's: the later phases,
    planned on the default's compile, ran past --time-budget)."""
    compiled = [t.compile_s for t in search.trials if t.flag_set == search.winner]
    return replace(costs, compile_s=max([costs.compile_s, *compiled]))


def flag_search_request(run: ModelTuningRun, target: Target) -> ModelFlagSearch:
    """Describe the flag phase's search from the model, the run's options and the target
    before the flag phase (the user's flags only)."""
    model, options = run.under_tuning, run.options
    default_specs = [DEFAULT_SPECS_FLAG] if model.with_default_specs else []
    return ModelFlagSearch(
        source_path=model.mlir_path, function=model.function, inputs_path=model.inputs_path,
        base_flags=(*target.compile_flags(), *default_specs), user_flags=options.extra_flags,
        device=model.device, space=_flag_space(run, target),
        rounds=options.rounds, repetitions=repetitions_for(run.original_ms),
        max_sets=options.max_flag_sets, jobs=options.jobs or default_jobs(),
        compile_timeout_s=model.compile_timeout_s,
        rule=model_flag_rule(options.flag_threshold),
        run_budget_s=options.time_budget_s,
    )  # fmt: skip


def _flag_space(run: ModelTuningRun, target: Target) -> FlagSpace:
    """The user's flag sets, else the target's space for this model (made only when the phase
    searches: a model-made option writes its file into the phase's folder)."""
    options, model = run.options, run.under_tuning
    if options.flag_sets:
        return FlagSpace((), options.flag_sets)
    if not options.search_flags:
        return target.flag_space()
    return target.model_flag_space(model.mlir_path, run.run_dir / "flags", model.compile_timeout_s)


def search_flags_split(run: ModelTuningRun) -> Pause | None:
    """Compile the flag sets and pause for the device to time them; once timed, decide; then
    make every later phase compile with the winner (if one was kept)."""
    step = run.split_state.flags
    if not step.searched:
        return None
    if not step.trials:
        _compile_flag_sets(run, step)
    if step.searched and not step.decided:
        if step.round_trip == 0:
            task = _flag_task(run, step)
            if task is not None:
                step.round_trip = run.split_state.round_trip + 1
                return send_to_device(run, flags=task)
        _decide(run, step)
    apply_flag_result(run)
    return None


def apply_flag_result(run: ModelTuningRun) -> None:
    """Put the decided flag phase into the run: its result, and the winner's flags on the target
    every later compile uses (after the user's `--flags`)."""
    step = run.split_state.flags
    if not step.decided:
        return
    trials = step.trials
    winner = next((t for t in trials if t.trial_id == step.winner), None)
    if winner is not None:
        run.target = run.target.with_global_flags(
            (*run.options.extra_flags, *winner.flag_set.flags)
        )
        run.under_tuning.target = run.target
    # Kept the moment the phase decides (the user's flags, then the winner's): a later phase that
    # fails must not lose it.
    write_flag_files(run.run_dir, run.target.global_flags, ())
    run.flag_search = FlagSearchResult(
        winner=winner.flag_set if winner is not None else DEFAULT_FLAGS,
        estimate=winner.confirmed if winner is not None else None,
        trials=tuple(trials), rule=model_flag_rule(run.options.flag_threshold),
        trials_path=run.run_dir / FLAGS_DIR / TRIALS_FILE_NAME, notes=tuple(step.notes),
        winner_binary=run.run_dir / FLAGS_DIR / f"{winner.trial_id}.vmfb" if winner else None,
    )  # fmt: skip


def _base_flags(run: ModelTuningRun) -> tuple[str, ...]:
    """Return the flags of every compile of the phase: the target's and the user's (and the
    shipped specs, where asked for)."""
    model = run.under_tuning
    default_specs = (DEFAULT_SPECS_FLAG,) if model.with_default_specs else ()
    return (*model.target.compile_flags(), *default_specs)


def _compile_flag_sets(run: ModelTuningRun, step: SplitFlagsFile) -> None:
    """Compile the default and every proposed set once; record them sorted by hash."""
    options, model = run.options, run.under_tuning
    space = _flag_space(run, run.target)
    if not space.options + space.combinations:
        step.searched, step.why = False, f"the target {options.target} has no flags to search"
        save_run(run)
        return
    started = time.monotonic()
    flag_sets = [DEFAULT_FLAGS, *propose_seeds(space, options.extra_flags, options.max_flag_sets)]
    compiled = compile_flag_sets(
        run.executor, model.mlir_path, _base_flags(run), dict(enumerate(flag_sets)),
        run.run_dir / FLAGS_DIR, options.jobs or default_jobs(), model.compile_timeout_s,
    )  # fmt: skip
    if compiled[0].status is not TrialStatus.DEFAULT:
        raise IreetuneError(f"the model does not compile with default flags: {compiled[0].reason}")
    step.trials, step.notes = classify_by_hash(compiled), [SPLIT_FLAG_NOTE]
    record_time(run.split_state, "flags", "compile", time.monotonic() - started)
    save_run(run)


def _flag_task(run: ModelTuningRun, step: SplitFlagsFile) -> VariantTask | None:
    """Return the device task that times every distinct binary (None: nothing to time)."""
    timed = [t for t in step.trials if t.status is TrialStatus.TIMED]
    if not timed:
        return None
    rounds = run.options.rounds
    return VariantTask(
        tuple(LabelledBinary(str(t.trial_id), f"{FLAGS_DIR}/{t.trial_id}.vmfb") for t in timed),
        rounds=rounds, calls_per_round=0, confirm_top=ModelFlagSearch.confirm_top,
        confirm_rounds=max(2 * rounds, 10), threshold=run.options.flag_threshold,
    )  # fmt: skip


def _decide(run: ModelTuningRun, step: SplitFlagsFile) -> None:
    """Judge the sets on the device's sessions (none timed: the defaults stay); write
    flags/trials.json and record the verdict."""
    rule = model_flag_rule(run.options.flag_threshold)  # as in process
    trials, contenders = step.trials, []
    measured: dict[str, Any] = {}
    if step.round_trip:
        results = run.device_results
        measured = (results or {}).get("flags") or {}
        if step.round_trip != run.split_state.round_trip or not measured:
            raise IreetuneError(
                f"{run.run_dir}: the device results hold no timings of the flag sets; run the "
                f"device step again: {device_step_command(run.run_dir)}"
            )
        calls = measured["calls_per_round"]
        first = _runs(run.run_dir, measured["first"])
        trials = [with_timing(t, first.get(str(t.trial_id)), first["default"], False, calls)
                  for t in trials]  # fmt: skip
        contenders = [t.trial_id for t in trials if str(t.trial_id) in measured["contenders"]]
        confirm = _runs(run.run_dir, measured["confirm"])
        if contenders and not ("default" in confirm and confirm["default"].ok):
            raise IreetuneError(f"{run.run_dir}: the default model did not run in the confirmation")
        trials = [
            with_timing(t, confirm.get(str(t.trial_id)), confirm["default"], True, calls)
            if t.trial_id in contenders
            else t
            for t in trials
        ]
    trials, winner = judge_flag_sets(trials, contenders, rule)
    removed = remove_losing_binaries(run.run_dir / FLAGS_DIR, trials, winner)
    step.trials, step.decided, step.winner = trials, True, winner
    step.notes = [*step.notes, *([removed] if removed else [])]
    timed = sorted(
        (t for t in trials if t.first is not None),
        key=lambda t: -(t.first.speedup if t.first else 0),
    )
    write_trials(
        run.run_dir / FLAGS_DIR / TRIALS_FILE_NAME, trials, rule,
        {"level": "model", "flow": "split", "source": str(run.under_tuning.mlir_path),
         "base_flags": list(_base_flags(run)), "rounds": run.options.rounds,
         "calls_per_round": measured.get("calls_per_round", 0),
         "winner": list(trials[winner].flag_set.flags) if winner is not None else [],
         "notes": list(step.notes),
         "search": [{"flags": list(t.flag_set.flags),
                     "relative": 1.0 / t.first.speedup if t.first else None, "rung": 0}
                    for t in timed],
         "runtime": None},
    )  # fmt: skip
    save_run(run)


def _runs(run_dir: Path, session: dict[str, Any]) -> dict[str, ModelRun]:
    """Return one device session's runs by label, with the outputs each saved."""
    runs = {}
    for label, entry in session.items():
        outputs = run_dir / entry["outputs"] if entry["outputs"] else None
        if outputs is not None and not outputs.is_file():
            raise IreetuneError(
                f"{run_dir}: {entry['outputs']} is missing; copy the device host's device/ "
                "folder back"
            )
        runs[label] = ModelRun(
            label, load_outputs(outputs) if outputs else (), tuple(entry["times_ms"]),
            entry["reason"] or ("" if outputs else "no outputs"),
        )  # fmt: skip
    return runs
