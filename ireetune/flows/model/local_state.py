"""The state file of an in-process model run (`model_run.json`): one typed model for its writer
and its reader, and the run rebuilt from it.

`ireetune tune MODEL` saves the run when it starts, after every phase, and after every dispatch
of the dispatch phase; `ireetune continue RUN` reads it back as untrusted data (the format
first, a folder of another version refused in one line naming it, then every field, every path
inside the folder) and rebuilds the run object that the phases after the last one saved read:

    saved after   what the later phases read
    (start)       the options (a run stopped here is refused: nothing is done yet)
    prepare       the model (its MLIR and the hashes of the model file and the MLIR, the entry
                  function, inputs, device, compile timeout), the default's outputs, the
                  untouched default binary and its time
    flags         the flag search's trials, winner and runtime flags (whence the global flags of
                  every later compile), the default binary and time (the winner's)
    profile       the hot set: profile.json, read back (not kept twice)
    dispatches    each tuned dispatch's kept candidates, winner and tuning-session times, and
                  the dispatches done (saved after each one: a phase cut short goes on with the
                  dispatches not done)
    variants      the specs selection accepted
    decide        the final check's figures, the tuned spec and flags files, the combined check
    (any)         notes, each dispatch's note, the time spent so far (`--time-budget` goes on)

Nothing else is kept: the selection's trials are in selection/trials.json for people, and a
phase cut short starts again from its beginning (the dispatch phase from its next dispatch).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from ireetune.core.errors import IreetuneError
from ireetune.core.fields import Milliseconds, Seconds, bounded_as
from ireetune.core.files import write_text_atomically
from ireetune.core.flag_space import DEFAULT_FLAGS
from ireetune.core.options import check_option_numbers, value_type_of
from ireetune.core.records import DispatchOutcome
from ireetune.database.run_files import (
    MAX_CANDIDATE_ID,
    FileModel,
    InsidePath,
    RunFileError,
    dump_document,
    dump_record,
    read_model_file,
)
from ireetune.decision.rules import DecisionRule
from ireetune.decision.stats import SpeedupEstimate
from ireetune.executor import Executor
from ireetune.flags.check import check_flag_form
from ireetune.flags.trials import TRIALS_FILE_NAME, FlagSearchResult, FlagTrial, model_flag_rule
from ireetune.flows.dispatch.options import TuneOptions
from ireetune.flows.handoff.model_folder import hash_file
from ireetune.flows.model.options import ModelTuneOptions
from ireetune.flows.model.options_file import ModelOptionsFile, options_of
from ireetune.flows.model.run import (
    PHASES,
    Mode,
    ModelCosts,
    ModelTuneResult,
    ModelTuningRun,
    Phase,
)
from ireetune.model.final_check import FinalCheck
from ireetune.model.hot import DispatchProfile, HotSet
from ireetune.model.prepare import ModelUnderTuning
from ireetune.targets import parse_target

MODEL_RUN_NAME = "model_run.json"
MODEL_RUN_FORMAT = "ireetune-model-run/2"
PROFILE_NAME = "profile.json"

Count = Annotated[int, Field(ge=0, le=MAX_CANDIDATE_ID)]


class ModelFile(FileModel):
    """The model under tuning, as the prepare phase left it."""

    source_sha256: str
    # "" when the model file itself is the MLIR tuned (an .mlir model is not copied).
    mlir: InsidePath = ""
    mlir_sha256: str
    function: str
    inputs: InsidePath
    default_outputs: InsidePath
    device: str
    compile_timeout_s: Annotated[
        Seconds, bounded_as(value_type_of(TuneOptions, "compile_timeout_s"))
    ]


class FlagPhaseFile(FileModel):
    """The flag search's result: its trials (as flags/trials.json shows them), the winning
    trial (its binary is flags/N.vmfb) and the runtime flags kept."""

    trials: tuple[FlagTrial, ...]
    winner_trial: Count | None = None
    runtime_flags: tuple[str, ...] = ()


class KeptCandidateFile(FileModel):
    """A kept candidate spec of a tuned dispatch, with the default's and its own time from the
    dispatch's tuning session."""

    spec: InsidePath
    default_ms: Milliseconds | None = None
    candidate_ms: Milliseconds | None = None


class TunedDispatchFile(FileModel):
    candidates: tuple[KeptCandidateFile, ...] = ()
    winner: InsidePath = ""


class FinalFile(FileModel):
    """What the decide phase found: the final check, the files written, the combined check."""

    default_ms: Milliseconds
    tuned_ms: Milliseconds
    tuned_spec: InsidePath = ""
    estimate: SpeedupEstimate | None = None
    dropped: tuple[str, ...] = ()
    tuned_flags: InsidePath = ""
    combined: SpeedupEstimate | None = None


class ModelRunFile(FileModel):
    """model_run.json: the phases done and what each left for the later ones."""

    FORMAT: ClassVar[str] = MODEL_RUN_FORMAT

    format: str
    mode: Literal["in-process"]
    phases_done: tuple[Phase, ...]
    options: ModelOptionsFile
    elapsed_s: Seconds = 0.0
    model: ModelFile | None = None
    original_vmfb: InsidePath = ""
    original_ms: Milliseconds = 0.0
    # The prepare phase's measure of the model's costs (`ModelCosts`); 0 in a file written
    # before they were measured.
    compile_s: Seconds = 0.0
    load_s: Seconds = 0.0
    default_vmfb: InsidePath = ""
    default_ms: Milliseconds = 0.0
    flag_search: FlagPhaseFile | None = None
    dispatches_done: tuple[str, ...] = ()
    dispatches: dict[str, TunedDispatchFile] = {}
    accepted: dict[str, InsidePath] = {}
    final: FinalFile | None = None
    notes: tuple[str, ...] = ()
    dispatch_notes: dict[str, str] = {}

    def run_options(
        self, jobs: int | None = None, database_path: Path | None = None
    ) -> ModelTuneOptions:
        """Return the run's options as the flow takes them (`jobs`, when given, replaces the
        run's parallel compiles; the database is the command line's, `database_path`, None for
        the default: a folder does not choose it)."""
        return options_of(self.options, jobs or self.options.jobs, database_path)

    @model_validator(mode="after")
    def _check_phases(self) -> ModelRunFile:
        check_option_numbers(self.options, "options")
        if self.phases_done != PHASES[: len(self.phases_done)]:
            raise ValueError("phases_done must name the first phases of the flow, in order")
        if Phase.PREPARE in self.phases_done and not (
            self.model and self.original_vmfb and self.default_vmfb
        ):
            raise ValueError("a run past its prepare phase must hold its model and binaries")
        if Phase.DECIDE in self.phases_done and self.final is None:
            raise ValueError("a run past its decide phase must hold its final check")
        search = self.flag_search
        winner = search.winner_trial if search is not None else None
        if search is not None and winner is not None and winner >= len(search.trials):
            raise ValueError("flag_search.winner_trial names no trial")
        return self


class ProfileDispatchFile(FileModel):
    name: str
    benchmark: InsidePath
    problem: str
    tunable: bool
    invocations: Count
    dispatch_ms: Milliseconds | None
    selected: bool


class ProfileFile(FileModel):
    """profile.json, as `ireetune continue` reads it back: the hot set."""

    FORMAT: ClassVar[str] = "ireetune-model-profile/1"

    model_ms: Milliseconds
    explained_ms: Milliseconds
    covered_ms: Milliseconds
    dispatches: tuple[ProfileDispatchFile, ...]


# --- Writing ---------------------------------------------------------------------------------


def _inside(run: ModelTuningRun, path: Path | None) -> str:
    """Return a path of the run folder as the file holds it (relative; "" for none)."""
    return str(path.relative_to(run.run_dir)) if path is not None else ""


def _model_document(run: ModelTuningRun) -> dict[str, Any] | None:
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


def _absolute_paths(options: ModelTuneOptions) -> ModelTuneOptions:
    """Return the options with their paths absolute: `continue` may run from another folder."""
    database = options.database_path
    return dataclasses.replace(
        options,
        model_path=options.model_path.absolute(),
        output_dir=options.output_dir.absolute(),
        database_path=database.absolute() if database is not None else None,
    )


def save_model_run(run: ModelTuningRun) -> None:
    """Write model_run.json from the run as it stands, checked against its reader's model."""
    document = {
        "format": MODEL_RUN_FORMAT,
        "mode": run.mode.value,
        "phases_done": list(run.phases_done),
        "options": dump_record(ModelTuneOptions, _absolute_paths(run.options)),
        "elapsed_s": max(0.0, time.monotonic() - run.started),
        "model": _model_document(run),
        "original_vmfb": _inside(run, run.original_vmfb),
        "original_ms": run.original_ms,
        "compile_s": run.costs.compile_s,
        "load_s": run.costs.load_s,
        "default_vmfb": _inside(run, run.default_vmfb),
        "default_ms": run.default_ms,
        "flag_search": _flag_document(run),
        "dispatches_done": list(run.dispatches_done),
        "dispatches": _dispatch_documents(run),
        "accepted": {name: _inside(run, spec) for name, spec in run.accepted.items()},
        "final": _final_document(run),
        "notes": list(run.notes),
        "dispatch_notes": dict(run.dispatch_notes),
    }
    write_text_atomically(run.run_dir / MODEL_RUN_NAME, dump_document(ModelRunFile, document))


def save_after_phase(run: ModelTuningRun, phase: Phase) -> None:
    """Save an in-process run after a phase (the sequencer's callback)."""
    run.phases_done.append(phase.value)
    save_model_run(run)


def default_outputs_path(run_dir: Path) -> Path:
    """Return where the prepare phase's timing worker saved the default model's outputs (the
    model's id in that session is `default`)."""
    return run_dir / "default_outputs.npz"


# --- Reading ---------------------------------------------------------------------------------


def read_model_run(run_dir: Path) -> ModelRunFile:
    """Read a model run's state (format, then every field); refuse in one line a run that cannot
    be continued: finished, stopped before its prepare phase was saved, or whose model changed."""
    path = run_dir / MODEL_RUN_NAME
    stored = read_model_file(path, ModelRunFile, run_dir)
    if len(stored.phases_done) == len(PHASES):
        raise IreetuneError(
            f"{run_dir} is finished (every phase done): nothing to continue; its report is "
            f"{run_dir / 'report.txt'}"
        )
    if not stored.phases_done:
        raise IreetuneError(
            f"{run_dir} was stopped before its prepare phase finished: nothing to continue from; "
            f"run `ireetune tune {stored.options.model_path}` again"
        )
    assert stored.model is not None, "the model's check requires it past the prepare phase"
    source = stored.options.model_path
    if not source.is_file() or hash_file(source) != stored.model.source_sha256:
        raise IreetuneError(
            f"{source} changed (or is gone) since the run started: its SHA-256 is not the one "
            f"{path} holds; start a new run"
        )
    if not stored.model.mlir:
        # A folder is data: it compiles its own copy of the model, never one it names elsewhere.
        raise IreetuneError(
            f"{path}: the run holds no copy of its model (a folder written before runs kept "
            f"one): start a new run with `ireetune tune {source}`"
        )
    mlir = run_dir / stored.model.mlir
    if not mlir.is_file() or hash_file(mlir) != stored.model.mlir_sha256:
        raise IreetuneError(f"{mlir} changed since the run started; start a new run")
    flags = stored.flag_search
    if flags is not None:
        for trial in flags.trials:
            check_flag_form(trial.flag_set.flags, f"{path}: flag_search")
        check_flag_form(flags.runtime_flags, f"{path}: flag_search.runtime_flags")
    check_flag_form(stored.options.extra_flags, f"{path}: options.extra_flags")
    return stored


def read_hot_set(run_dir: Path) -> HotSet:
    """Read the hot set back from profile.json (its benchmarks inside the run folder)."""
    path = run_dir / PROFILE_NAME
    stored = read_model_file(path, ProfileFile, run_dir)
    ranked = tuple(
        DispatchProfile(
            d.name, run_dir / d.benchmark, d.problem, d.tunable, d.dispatch_ms, d.invocations
        )
        for d in stored.dispatches
    )
    selected = tuple(p for p, d in zip(ranked, stored.dispatches, strict=True) if d.selected)
    return HotSet(ranked, selected, stored.model_ms, stored.explained_ms, stored.covered_ms)


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
    """Rebuild the run object as the last saved phase left it (on the database the command
    line names, `database_path`)."""
    options = stored.run_options(jobs, database_path)
    assert stored.model is not None
    saved = stored.model
    target = parse_target(options.target).with_global_flags(options.extra_flags)
    run = ModelTuningRun(Mode.IN_PROCESS, options, target, run_dir, executor)
    run.started = time.monotonic() - stored.elapsed_s
    run.phases_done = [phase.value for phase in stored.phases_done]
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
        run.under_tuning.mlir_path,
    )  # fmt: skip
