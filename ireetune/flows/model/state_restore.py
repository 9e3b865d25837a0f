"""A model run written to its state file (`model_run.json`, declared in state.py) and rebuilt
from it: the one writer of both modes, and the run object as the last save left it.

An in-process run is rebuilt as its last saved phase left it, and runs the phases after that
one. A split run is rebuilt from its split section and runs every phase again: each keeps the
sub-steps its section records as done, and rebuilds what the later phases read (the model, the
flag phase's winner, the hot set).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import numpy as np

from ireetune.core.files import write_text_atomically
from ireetune.core.flag_space import DEFAULT_FLAGS
from ireetune.core.records import DispatchOutcome
from ireetune.database.run_files import RunFileError, dump_document, dump_record
from ireetune.decision.rules import DecisionRule
from ireetune.decision.stats import SpeedupEstimate
from ireetune.executor import Executor
from ireetune.flags.trials import TRIALS_FILE_NAME, FlagSearchResult, FlagTrial, model_flag_rule
from ireetune.flows.handoff.model_folder import hash_file
from ireetune.flows.model.options import ModelTuneOptions
from ireetune.flows.model.run import ModelCosts, ModelTuneResult, ModelTuningRun
from ireetune.flows.model.state import (
    MODEL_RUN_FORMAT,
    MODEL_RUN_NAME,
    FinalFile,
    FinalistsFile,
    FlagPhaseFile,
    Mode,
    ModelFile,
    ModelRunFile,
    Phase,
    SplitFlagsFile,
    SplitSection,
    read_hot_set,
)
from ireetune.flows.sequence import PROGRESS_KEY, RunProgress
from ireetune.model.final_check import FinalCheck
from ireetune.model.prepare import ModelUnderTuning
from ireetune.targets import parse_target

# --- Writing ---------------------------------------------------------------------------------


def _inside(run: ModelTuningRun, path: Path | None) -> str:
    """Return a path of the run folder as the file holds it (relative; "" for none)."""
    return str(path.relative_to(run.run_dir)) if path is not None else ""


def _model_document(run: ModelTuningRun) -> dict[str, Any] | None:
    """Return the model as the file holds it: a split run's record, made when it imported the
    model; an in-process run's, read from its model as it stands."""
    if run.mode is Mode.SPLIT:
        return dump_record(ModelFile, run.model_file) if run.model_file is not None else None
    model = run.model
    if model is None:
        return None
    inside = model.mlir_path.is_relative_to(run.run_dir)
    return {
        "source_sha256": hash_file(run.options.model_path),
        "mlir": _inside(run, model.mlir_path) if inside else "",
        "mlir_sha256": hash_file(model.mlir_path),
        "function": model.function,
        "inputs": _inside(run, model.inputs_path),
        "default_outputs": _inside(run, default_outputs_path(run.run_dir)),
        "device": model.device,
        "compile_timeout_s": model.compile_timeout_s,
    }


def _flag_document(run: ModelTuningRun) -> dict[str, Any] | None:
    search = run.flag_search
    if search is None:
        return None
    # The winner's binary is flags/N.vmfb, N its trial (each set is compiled once).
    winner = None
    if search.winner_binary is not None:
        (winner,) = [t.trial_id for t in search.trials if t.flag_set == search.winner]
    return {
        "trials": [dump_record(FlagTrial, trial) for trial in search.trials],
        "winner_trial": winner,
        "runtime_flags": list(search.runtime_flags),
    }


def _dispatch_documents(run: ModelTuningRun) -> dict[str, Any]:
    documents: dict[str, Any] = {}
    for name, specs in run.candidates.items():
        kept = []
        for spec in specs:
            default_ms, candidate_ms = run.session_ms.get(spec, (None, None))
            kept.append(
                {"spec": _inside(run, spec), "default_ms": default_ms, "candidate_ms": candidate_ms}
            )
        documents[name] = {"candidates": kept, "winner": _inside(run, run.winners.get(name))}
    for name, winner in run.winners.items():
        documents.setdefault(name, {"candidates": [], "winner": _inside(run, winner)})
    return documents


def _final_document(run: ModelTuningRun) -> dict[str, Any] | None:
    final, result = run.final, run.result
    if final is None or result is None:
        return None
    return {
        "default_ms": final.default_ms,
        "tuned_ms": final.tuned_ms,
        "tuned_spec": _inside(run, final.tuned_spec),
        "estimate": dump_record(SpeedupEstimate, final.estimate) if final.estimate else None,
        "dropped": list(final.dropped),
        "tuned_flags": _inside(run, result.tuned_flags_path),
        "combined": dump_record(SpeedupEstimate, result.combined) if result.combined else None,
    }


def _in_process_document(run: ModelTuningRun) -> dict[str, Any]:
    """Return what only an in-process run keeps (see state.py)."""
    return {
        "original_vmfb": _inside(run, run.original_vmfb),
        "original_ms": run.original_ms,
        "compile_s": run.costs.compile_s,
        "load_s": run.costs.load_s,
        "default_vmfb": _inside(run, run.default_vmfb),
        "default_ms": run.default_ms,
        "flag_search": _flag_document(run),
        "import_split": (
            dump_record(SpeedupEstimate, run.import_estimate) if run.import_estimate else None
        ),
        "dispatches_done": list(run.dispatches_done),
        "dispatches": _dispatch_documents(run),
        "accepted": {name: _inside(run, spec) for name, spec in run.accepted.items()},
        "final": _final_document(run),
        "finalists": dump_record(FinalistsFile, run.finalists) if run.finalists else None,
    }


def _absolute_paths(options: ModelTuneOptions) -> ModelTuneOptions:
    """Return the options with their paths absolute: `continue` may run from another folder."""
    database = options.database_path
    return dataclasses.replace(
        options,
        model_path=options.model_path.absolute(),
        output_dir=options.output_dir.absolute(),
        database_path=database.absolute() if database is not None else None,
    )


def save_run(run: ModelTuningRun) -> None:
    """Write model_run.json from the run as it stands, checked against its reader's model."""
    document = {
        "format": MODEL_RUN_FORMAT,
        "mode": run.mode.value,
        PROGRESS_KEY: dump_record(RunProgress, run.run_progress),
        "options": dump_record(ModelTuneOptions, _absolute_paths(run.options)),
        "elapsed_s": max(0.0, run.elapsed_before_s + time.monotonic() - run.started),
        "model": _model_document(run),
        "notes": list(run.notes),
        "dispatch_notes": dict(run.dispatch_notes),
    }
    if run.mode is Mode.SPLIT:
        document["split"] = run.split_state.model_dump(mode="json")
    else:
        document.update(_in_process_document(run))
    write_text_atomically(run.run_dir / MODEL_RUN_NAME, dump_document(ModelRunFile, document))


def save_after_phase(run: ModelTuningRun, phase: Phase) -> None:
    """Save an in-process run after a phase (the sequencer's callback)."""
    run.run_progress = run.run_progress.after(phase.value)
    save_run(run)


def default_outputs_path(run_dir: Path) -> Path:
    """Return where the prepare phase's timing worker saved the default model's outputs (the
    model's id in that session is `default`)."""
    return run_dir / "default_outputs.npz"


def new_split_section(options: ModelTuneOptions, devices: list[str]) -> SplitSection:
    """Return the split section of a new split run, before any of its sub-steps."""
    why = "" if options.search_flags else "--no-flag-search"
    return SplitSection(
        devices=devices, flags=SplitFlagsFile(searched=options.search_flags, why=why)
    )


# --- Reading ---------------------------------------------------------------------------------


def _read_outputs(path: Path) -> tuple[Any, ...]:
    try:
        with np.load(path, allow_pickle=False) as archive:
            return tuple(archive[f"arr_{i}"] for i in range(len(archive.files)))
    except (OSError, ValueError, KeyError) as error:
        raise RunFileError(f"cannot read the default model's outputs {path}: {error}") from None


def _flag_result(run_dir: Path, stored: FlagPhaseFile, rule: DecisionRule) -> FlagSearchResult:
    """Rebuild the flag search's result from its saved trials and winner."""
    winner = stored.trials[stored.winner_trial] if stored.winner_trial is not None else None
    flags_dir = run_dir / "flags"
    return FlagSearchResult(
        winner=winner.flag_set if winner is not None else DEFAULT_FLAGS,
        estimate=winner.confirmed if winner is not None else None,
        trials=stored.trials,
        rule=rule,
        trials_path=flags_dir / TRIALS_FILE_NAME,
        winner_binary=flags_dir / f"{winner.trial_id}.vmfb" if winner is not None else None,
        runtime_flags=stored.runtime_flags,
    )


def restore_run(
    run_dir: Path,
    stored: ModelRunFile,
    executor: Executor,
    jobs: int | None,
    database_path: Path | None = None,
) -> ModelTuningRun:
    """Rebuild an in-process run as the last saved phase left it (on the database the command
    line names, `database_path`)."""
    options = stored.run_options(jobs, database_path)
    assert stored.model is not None
    saved = stored.model
    target = parse_target(options.target).with_global_flags(options.extra_flags)
    run = ModelTuningRun(Mode.IN_PROCESS, options, target, run_dir, executor)
    run.started = time.monotonic() - stored.elapsed_s
    run.run_progress = stored.progress
    mlir = run_dir / saved.mlir if saved.mlir else options.model_path
    run.model = ModelUnderTuning(
        mlir, saved.function, run_dir / saved.inputs, target, options.with_default_specs,
        saved.device, _read_outputs(run_dir / saved.default_outputs), saved.compile_timeout_s,
    )  # fmt: skip
    run.original_vmfb, run.original_ms = run_dir / stored.original_vmfb, stored.original_ms
    run.costs = ModelCosts(stored.compile_s, stored.load_s)
    run.default_vmfb, run.default_ms = run_dir / stored.default_vmfb, stored.default_ms
    if stored.flag_search is not None:
        rule = model_flag_rule(options.flag_threshold)
        run.flag_search = search = _flag_result(run_dir, stored.flag_search, rule)
        if search.winner_binary is not None:
            run.target = target.with_global_flags((*options.extra_flags, *search.winner.flags))
            run.under_tuning.target = run.target
    run.import_estimate = stored.import_split
    if Phase.PROFILE in stored.phases_done:
        run.hot = read_hot_set(run_dir)
    run.dispatches_done = list(stored.dispatches_done)
    for name, tuned in stored.dispatches.items():
        run.candidates[name] = [run_dir / kept.spec for kept in tuned.candidates if kept.spec]
        if tuned.winner:
            run.winners[name] = run_dir / tuned.winner
        for kept in tuned.candidates:
            if kept.default_ms is not None and kept.candidate_ms is not None:
                run.session_ms[run_dir / kept.spec] = (kept.default_ms, kept.candidate_ms)
    run.accepted = {name: run_dir / spec for name, spec in stored.accepted.items()}
    run.finalists = stored.finalists
    run.notes, run.dispatch_notes = list(stored.notes), dict(stored.dispatch_notes)
    return run


def restore_split_run(
    run_dir: Path, stored: ModelRunFile, executor: Executor, options: ModelTuneOptions
) -> ModelTuningRun:
    """Rebuild a split run from its file, to run every phase again from its sub-steps done."""
    assert stored.split is not None, "a split run's file holds its split section"
    target = parse_target(options.target).with_global_flags(options.extra_flags)
    run = ModelTuningRun(Mode.SPLIT, options, target, run_dir, executor, state=stored.split)
    run.model_file, run.elapsed_before_s = stored.model, stored.elapsed_s
    run.run_progress = stored.progress
    run.notes, run.dispatch_notes = list(stored.notes), dict(stored.dispatch_notes)
    return run


def restore_decision(
    run: ModelTuningRun, stored: FinalFile, outcomes: tuple[DispatchOutcome, ...]
) -> None:
    """Put the decide phase's saved result back into the run (for its report)."""
    tuned_spec = run.run_dir / stored.tuned_spec if stored.tuned_spec else None
    run.final = FinalCheck(
        tuned_spec, stored.default_ms, stored.tuned_ms, stored.estimate, stored.dropped
    )
    run.result = ModelTuneResult(
        run.run_dir, stored.default_ms, stored.tuned_ms, tuned_spec, outcomes, tuple(run.notes),
        stored.estimate, run.target.global_flags, run.flag_search,
        run.run_dir / stored.tuned_flags if stored.tuned_flags else None, stored.combined,
        run.under_tuning.mlir_path, run.import_estimate, run.tuned_binary(tuned_spec),
    )  # fmt: skip
