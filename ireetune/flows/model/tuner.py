"""Tune a whole model: one flow, run in process or split between a compile and a device host.

The flow is one sequence of phases over one run object (flows/model/run.py): prepare, flags,
profile, dispatches, variants, decide, report. Its mode says where measuring happens:

- `tune_model`: in process (flows/model/local.py), every phase on this host; `continue_model_run`
  continues a stopped one from its folder (model_run.json, flows/model/state.py) at the
  phase after the last one saved;
- `prepare_split_run`, then `continue_split_run` after each device step: split
  (flows/model/split.py), this host compiles and the run pauses where the device must measure
  (`ireetune measure` on the device host; docs/split_flow.md).

This module checks the options, makes the run folder and the executor, and runs the phases in
the chosen mode; `continue_model_folder` continues a model run folder in the mode it was
started in (`ireetune continue`, flows/continue_folder.py).
"""

from __future__ import annotations

import json
import math
import shlex
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from ireetune.core.errors import IreetuneError
from ireetune.core.files import write_text_atomically
from ireetune.core.records import MODEL_REPORT_FORMAT
from ireetune.core.run_dir import check_output_dir, create_run_dir
from ireetune.core.target import Target
from ireetune.core.tools import path_argument
from ireetune.executor import open_executor
from ireetune.executor.base import LocalExecutor
from ireetune.flags.check import check_flags_with_compiler
from ireetune.flows.handoff.folder_flags import check_folder_flags
from ireetune.flows.handoff.model_folder import hash_file
from ireetune.flows.model.local import LOCAL_PHASES
from ireetune.flows.model.options import ModelTuneOptions
from ireetune.flows.model.report import dispatch_outcomes
from ireetune.flows.model.run import (
    Mode,
    ModelTuneResult,
    ModelTuningRun,
    Phase,
    remaining_phases,
)
from ireetune.flows.model.split import SPLIT_PHASES
from ireetune.flows.model.split_device import device_step_command, receive_device_results
from ireetune.flows.model.state import (
    SplitStage,
    read_model_run,
    read_run_file,
)
from ireetune.flows.model.state_restore import (
    new_split_section,
    restore_decision,
    restore_run,
    restore_split_run,
    save_after_phase,
    save_run,
)
from ireetune.flows.sequence import run_sequence
from ireetune.frontend.model_inputs import parse_input_spec
from ireetune.targets import parse_target
from ireetune.verify.compare import check_inputs

__all__ = [
    "ModelTuneOptions",
    "ModelTuneResult",
    "SplitStatus",
    "continue_model_folder",
    "continue_model_run",
    "continue_split_run",
    "describe_status",
    "prepare_split_run",
    "tune_model",
]


def _check_options(options: ModelTuneOptions) -> Target:
    """Check what a run is asked to do before its folder exists; return its target."""
    target = parse_target(options.target).with_global_flags(options.extra_flags)
    check_flags_with_compiler(options.extra_flags, target, "--flags")
    for flag_set in options.flag_sets:
        check_flags_with_compiler(flag_set, target, "--try-flags")
    if options.coverage is not None and not 0 < options.coverage <= 1:
        raise IreetuneError("--coverage must be in (0, 1]")
    if not (math.isfinite(options.flag_threshold) and options.flag_threshold >= 0):
        raise IreetuneError("--flag-threshold must be a finite number of at least 0")
    check_output_dir(options.output_dir)
    return target


# --- In process ------------------------------------------------------------------------------


def tune_model(options: ModelTuneOptions) -> ModelTuneResult:
    """Tune a model end to end on this host; see flows/model/local.py for the phases.

    A run that fails before it has learned anything (the model does not import, compile or
    run) leaves no folder behind; a later failure (or an interrupt) marks the folder's report as
    failed and leaves the run saved after its last phase, for `continue_model_run`.
    """
    target = _check_options(options)
    # Each --input on its own, before the run folder exists (the model is read later).
    input_specs = [parse_input_spec(text) for text in options.inputs]
    check_inputs(
        [spec.shape for spec in input_specs],
        [spec.element_type for spec in input_specs],
        "the --input values",
    )
    output_existed = options.output_dir.exists()
    run_dir = create_run_dir(options.output_dir, f"model_{options.model_path.stem}")
    run: ModelTuningRun | None = None
    try:
        with open_executor(options.executor, options.ray) as executor:
            run = ModelTuningRun(Mode.IN_PROCESS, options, target, run_dir, executor)
            # Saved before the first phase too: a folder stopped there is refused by name.
            save_run(run)
            run_sequence(run, remaining_phases(run, LOCAL_PHASES), (save_after_phase,))
            assert run.result is not None, "the decide phase makes the result"
            return run.result
    except BaseException as failure:
        if run is None or not run.run_progress.done:
            shutil.rmtree(run_dir, ignore_errors=True)
            if not output_existed and not any(options.output_dir.iterdir()):
                options.output_dir.rmdir()
        else:
            write_text_atomically(
                run_dir / "report.json",
                json.dumps(
                    {"format": MODEL_REPORT_FORMAT, "outcome": "failed", "error": str(failure)},
                    indent=2,
                )
                + "\n",
            )
        raise


def continue_model_run(
    run_dir: Path, jobs: int | None = None, database_path: Path | None = None
) -> ModelTuneResult:
    """Continue a stopped in-process run from its folder: load the run as its last saved phase
    left it and run the phases after that one, on the same target and options (`jobs`, when
    given, replaces the run's parallel compiles; `database_path` is the command line's
    database, None for the default: a run folder does not choose it)."""
    stored = read_model_run(run_dir)
    with open_executor(stored.options.executor, stored.options.ray) as executor:
        run = restore_run(run_dir, stored, executor, jobs, database_path)
        if stored.final is not None:
            restore_decision(run, stored.final, dispatch_outcomes(run))
        run_sequence(run, remaining_phases(run, LOCAL_PHASES), (save_after_phase,))
    assert run.result is not None, "the decide phase makes the result"
    return run.result


def continue_model_folder(
    run_dir: Path, jobs: int | None = None, database_path: Path | None = None
) -> str:
    """Continue a model run from its folder in the mode it was started in, on the database the
    command line names (`database_path`, None for the default); return what the command line
    prints (the report, or the next step of a split run)."""
    if read_run_file(run_dir).mode is Mode.IN_PROCESS:
        result = continue_model_run(run_dir, jobs, database_path)
        return f"{_report_text(result.run_dir)}run folder: {result.run_dir}\n"
    return describe_status(continue_split_run(run_dir, jobs, database_path))


# --- Split between a compile host and a device host ------------------------------------------


@dataclass(frozen=True)
class SplitStatus:
    """What a compile-host step left: the folder, its stage, and the next command to run."""

    run_dir: Path
    phase: str
    round_trip: int
    next_command: str
    report: str = ""


def prepare_split_run(options: ModelTuneOptions) -> SplitStatus:
    """Start a split run: everything the first device step needs, compiled with the executor
    the options choose (`continue_split_run` compiles on this host)."""
    target = _check_options(options)
    # Every flag a split run's dispatch folders carry must be one they may carry (`finish`
    # reads them back), and the threshold is written into the device's task.
    for flag_set in options.flag_sets:
        check_folder_flags(flag_set, "--try-flags")
    check_folder_flags(options.extra_flags, "--flags with --stop-after compile")
    run_dir = create_run_dir(options.output_dir, f"model_{options.model_path.stem}")
    state = new_split_section(options, list(options.devices) or [target.runtime_device])
    with open_executor(options.executor, options.ray) as executor:
        run = ModelTuningRun(Mode.SPLIT, options, target, run_dir, executor, state=state)
        save_run(run)
        return _run_split(run)


def continue_split_run(
    run_dir: Path, jobs: int | None = None, database_path: Path | None = None
) -> SplitStatus:
    """Do what is due next in a split run, after a device step (or resume a stopped phase);
    compile on this host (the local executor), on the database the command line names
    (`database_path`, None for the default: a run folder does not choose it)."""
    stored = read_run_file(run_dir)
    state = stored.split
    if state is None:
        raise IreetuneError(
            f"{run_dir} is a model run that measures as it goes, not a split one: continue it "
            "with `ireetune continue`"
        )
    options = stored.run_options(jobs, database_path)
    model = stored.model
    if model is not None and hash_file(run_dir / model.mlir) != model.mlir_sha256:
        raise IreetuneError(
            f"{run_dir / model.mlir} changed since the run was prepared; start a new run"
        )
    if stored.split_stage is SplitStage.DONE:
        return SplitStatus(run_dir, SplitStage.DONE, state.round_trip, "", _report_text(run_dir))
    run = restore_split_run(run_dir, stored, LocalExecutor(), options)
    if stored.split_stage is SplitStage.AWAITING_DEVICE:
        receive_device_results(run)
    run.started = time.monotonic()
    return _run_split(run)


def _run_split(run: ModelTuningRun) -> SplitStatus:
    """Run the split mode's phases until the run pauses for the device or is decided; save the
    run after each phase, done when it did not pause (it started no round trip; one that did
    waits for it: flows/model/split_device.py `send_to_device`)."""
    round_trip = run.split_state.round_trip

    def save_after_split_phase(run: ModelTuningRun, phase: Phase) -> None:
        if run.split_state.round_trip == round_trip:
            run.run_progress = run.run_progress.after(phase.value)
        save_run(run)

    pause = run_sequence(run, remaining_phases(run, SPLIT_PHASES), (save_after_split_phase,))
    if pause is not None:
        return SplitStatus(
            run.run_dir, SplitStage.AWAITING_DEVICE, pause.round_trip,
            device_step_command(run.run_dir),
        )  # fmt: skip
    # Decided: the run waits for no device any more.
    run.run_progress = run.run_progress.paused(None)
    save_run(run)
    return SplitStatus(
        run.run_dir, SplitStage.DONE, run.split_state.round_trip, "", _report_text(run.run_dir)
    )


def _report_text(run_dir: Path) -> str:
    path = run_dir / "report.txt"
    return path.read_text() if path.exists() else ""


def describe_status(status: SplitStatus) -> str:
    """Say, for the command line, where the run stands and what to run next."""
    if status.phase == SplitStage.DONE:
        return f"{status.report}run folder: {status.run_dir}\n"
    return (
        f"run folder: {status.run_dir}\nround trip {status.round_trip}: copy the folder to the "
        f"GPU host and run there (runtime only): {status.next_command}\n"
        f"then, here: {shlex.join(['ireetune', 'continue', path_argument(status.run_dir)])}\n"
    )
