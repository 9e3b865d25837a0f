"""Resume a killed in-process dispatch run from its folder: load the run, continue at a stage.

`tune-dispatch` saves the run after every stage (flows/dispatch/state.py `save_run`): results.json
holds every candidate's record and the run's progress (flows/sequence.py `RunProgress`: the
stages done), and run_options.json (written
when the folder starts) the run's options. `ireetune continue RUN_DIR` reads both back as untrusted data, opens the run again on the same dispatch,
target flags and database, and hands it through the stages after the last one saved:

    last saved   continued at                    what is taken from the folder
    specs        compile, measure, check, decide  the specs and the reference program
    compile      measure, check, decide           the binaries and their hashes
    measure      measure, check, decide           the timings of the measured candidates (as
    check                                         earlier results: the facts are not saved, so
                                                  the leaders are confirmed again beside the
                                                  default; the checks run again)

A run with `--time-budget` goes on with what is left of it (flows/dispatch/budget.py). A run
killed before its specs were saved, one killed in the online search's rounds or in a time
budget's parts, one stopped after compiling (`measure`, then `continue` on the folder, finish
those) and a finished one are refused in one line. Running the same command again (the database
restoring finished candidates) still
works as before.
"""

from __future__ import annotations

import dataclasses
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from ireetune.compile.stage import compile_success_rate
from ireetune.core.errors import IreetuneError
from ireetune.core.records import TIMED_STATUSES, CandidateStatus
from ireetune.executor import Executor, open_executor
from ireetune.flows.dispatch.state import (
    DispatchRun,
    Stage,
    first_notes,
    read_progress,
    searches_on_real_inputs,
)
from ireetune.report.recorder import RunRecorder
from ireetune.report.result import TuneResult
from ireetune.verify.stage import ReferenceSetup

# What a finished run's results.json says; a killed one says "running" (or "failed").
_FINISHED = ("improved", "no-improvement", "reused")


def _remaining_stages(run_dir: Path, info: dict[str, Any]) -> tuple[str, tuple[Stage, ...]]:
    """Return the last stage saved and the stages the run continues with; refuse the rest."""
    from ireetune.flows.dispatch.decide import decide_stage
    from ireetune.flows.dispatch.stages import check_stage, compile_stage, measure_stage

    stage, outcome = read_progress(run_dir, info).last, info.get("outcome")
    if outcome in _FINISHED:
        raise IreetuneError(f"{run_dir} is finished ({outcome}): nothing to resume")
    if stage == "export":
        raise IreetuneError(
            f"{run_dir} stopped after compiling: measure it with `ireetune measure` where the "
            "device is, then `ireetune continue` it here"
        )
    if stage in ("measure_round", "pick_round", "next_part"):
        parts = "time_budget" in info and "online" not in str(info.get("ordering"))
        rounds = (
            "its time budget's parts, whose waiting candidates are not saved"
            if parts
            else "the online search's rounds, whose model is not saved"
        )
        raise IreetuneError(
            f"{run_dir} was stopped in {rounds}: run the same tune-dispatch command again (the "
            "database restores what was measured)"
        )
    continued: dict[str, tuple[Stage, ...]] = {
        "specs": (compile_stage, measure_stage, check_stage, decide_stage),
        "compile": (measure_stage, check_stage, decide_stage),
        "measure": (measure_stage, check_stage, decide_stage),
        "check": (measure_stage, check_stage, decide_stage),
    }
    if stage not in continued:
        raise IreetuneError(
            f"{run_dir} was stopped before its specs were saved (last stage saved: "
            f"{stage or 'none'}): run the same tune-dispatch command again"
        )
    return stage, continued[stage]


def resume_run_folder(run: DispatchRun, records: dict[int, Any], info: dict[str, Any]) -> None:
    """Put the folder's saved state into a freshly opened run: its record, its reference
    program, the candidates already done (`restored`), the compile success rate."""
    run_dir = Path(info["run_dir"])
    run.real_input_search = searches_on_real_inputs(run)
    # A file written before the run's progress kept its last stage as `stage`: saved again
    # as progress.
    saved = {k: v for k, v in info.items() if k not in ("run_dir", "stage")}
    run.recorder = RunRecorder(run_dir, saved, records)
    run.run_progress = read_progress(run_dir, info)
    verify_dir = run_dir / "verify"
    run.reference = ReferenceSetup(verify_dir / "reference.mlir", verify_dir / "inputs.npz")
    run.notes = first_notes(run)
    for cid, record in records.items():
        if record.knobs is not None:
            configuration = run.configuration(record.knobs)
            run.recorder.compilation_infos[cid] = configuration.compilation_info
    if run.run_progress.last == "specs":
        run.restored = set(info.get("restored_from_database", ()))
    else:
        run.success_rate = compile_success_rate(run.recorder)
        # Timings already taken are kept: the measure stage takes them as earlier results.
        run.restored = {
            cid for cid, record in records.items() if cid and record.status in TIMED_STATUSES
        }
        for cid in run.restored:
            record = records[cid]
            if record.status is not CandidateStatus.MEASURED:
                # The checks run again: a verdict depends on the other contenders.
                run.recorder.records[cid] = dataclasses.replace(
                    record, status=CandidateStatus.MEASURED, outputs_match=None
                )


def resume_dispatch(
    run_dir: Path, executor: Executor | None = None, database_path: Path | None = None
) -> TuneResult:
    """Load the killed run saved in `run_dir` and run its stages after the last one saved, on
    `executor` when a flow hands in its own (else on the one its options choose), with the
    database the command line names (`database_path`; None: the default).

    The folder is data (flows/handoff/folder_trust.py): it chooses neither the database nor the
    input. The dispatch is loaded from the run's own copy of it (inputs/), not from the path
    its options name.
    """
    import uuid

    from ireetune.flows.dispatch.budget import record_budget, resume_budget
    from ireetune.flows.dispatch.recording import DatabaseRecording, learn_from_round
    from ireetune.flows.dispatch.run_options import read_run_options
    from ireetune.flows.dispatch.start import marked_failed, open_run
    from ireetune.flows.dispatch.state import save_run
    from ireetune.flows.handoff.finish import read_run_record
    from ireetune.flows.sequence import named, run_sequence
    from ireetune.report.progress import StageProgress, progress_enabled
    from ireetune.targets import parse_target

    stored = read_run_options(run_dir)
    info, records = read_run_record(run_dir)
    _, stages = _remaining_stages(run_dir, info)
    own_input = run_dir / "inputs" / "original_benchmark.mlir"
    if not own_input.is_file():
        raise IreetuneError(f"the run's copy of its dispatch is gone: {own_input}")
    # The copy holds the one dispatch the run tunes: no --dispatch picks it out of a model.
    options = dataclasses.replace(
        stored, input_path=own_input, dispatch=None, database_path=database_path
    )
    # The flags the run chose (its --flags, or the flag search's) are in results.json.
    global_flags = tuple(str(flag) for flag in info.get("global_flags", ()))
    target = parse_target(options.target, options.pipelines).with_global_flags(global_flags)
    with (
        nullcontext(executor) if executor is not None else open_executor(options.executor, options.ray)
    ) as run_executor, open_run(options, target, run_executor) as run:  # fmt: skip
        if run.database is not None:
            run.stored = run.database.lookup(run.result_key)
        resume_run_folder(run, records, {**info, "run_dir": str(run_dir)})
        resume_budget(run, info)
        with marked_failed(run_dir), StageProgress(progress_enabled(options.show_progress)) as progress:  # fmt: skip
            run.progress = progress
            run.recorder.info["outcome"] = "running"
            if run.database is not None:
                rows = DatabaseRecording(run.database, run.result_key, run.recorder, uuid.uuid4().hex, run.rule.name)  # fmt: skip
                run.recorder.on_update.append(rows)
            run_sequence(run, named(*stages), (record_budget, save_run, learn_from_round))
        assert run.result is not None
        return run.result
