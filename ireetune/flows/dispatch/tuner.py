"""Tune one dispatch end to end: problem, space, specs, compile, benchmark, check, decide, spec.

This module only composes. It opens the run (flows/dispatch/start.py), hands it through its stages
(flows/dispatch/stages.py), each a function of the run, and registers what records beside them as
callbacks: the run saved after every stage, every record written to the database at once, the
online search's model updated after every early round (flows/dispatch/recording.py).

    flags            --flags checked, --search-flags searched   flows/dispatch/flag_phase.py
    generate         the space drawn and ordered; the database   flows/dispatch/start.py
    (reuse)          a stored winner under the same rule         flows/dispatch/reuse.py
    specs            spec/builder.py
    (rounds)         measure a round, the strategy learns, pick  flows/dispatch/stages.py
                     the next: an online search's, or a          search/climb.py
                     --time-budget's next part (climbing), each  flows/dispatch/budget.py
                     started only if it can end in time
    compile          compile/stage.py
    measure          benchmark/campaign.py, benchmark/outcomes.py
    check            outputs and real inputs, verify/stage.py
    decide           flows/dispatch/decide.py over decision/ (the one decide every flow calls)
    export           `--stop-after compile`: the folder another host benchmarks (handoff/);
                     `measure` there and `continue` here carry the run on
                     (flows/continue_folder.py)
"""

from __future__ import annotations

import uuid
from contextlib import nullcontext

from ireetune.core.errors import IreetuneError
from ireetune.core.run_dir import check_output_dir, create_run_dir
from ireetune.executor import Executor, open_executor
from ireetune.flows.dispatch.budget import (
    check_time_to_measure,
    read_clock,
    record_budget,
    start_budget,
)
from ireetune.flows.dispatch.decide import decide_stage
from ireetune.flows.dispatch.flag_phase import attach_flag_search, choose_global_flags
from ireetune.flows.dispatch.options import StopAfter, TuneOptions
from ireetune.flows.dispatch.recording import DatabaseRecording, learn_from_round
from ireetune.flows.dispatch.reuse import reuse_stored_winner
from ireetune.flows.dispatch.stages import (
    check_stage,
    compile_stage,
    measure_stage,
    round_stages,
    specs_stage,
)
from ireetune.flows.dispatch.start import (
    generate_stage,
    marked_failed,
    open_run,
    reusable_winner,
    start_run_folder,
)
from ireetune.flows.dispatch.state import DispatchRun, Stage, save_run
from ireetune.flows.handoff.export import export_stage
from ireetune.flows.sequence import named, run_sequence
from ireetune.report.progress import StageProgress, progress_enabled
from ireetune.report.result import TuneResult

__all__ = ["TuneOptions", "TuneResult", "dispatch_stages", "tune_dispatch"]


def tune_dispatch(options: TuneOptions, executor: Executor | None = None) -> TuneResult:
    """Tune one dispatch; see the module docstring for the stages.

    Compiles and measurements run on `executor` when a flow that runs several dispatches hands
    in its own; else on the one `options` choose, started for this run and closed after it.
    """
    started = read_clock()
    if options.num_candidates < 1:
        raise IreetuneError("--num-candidates must be at least 1")
    check_output_dir(options.output_dir)
    with (
        nullcontext(executor) if executor is not None else open_executor(options.executor, options.ray)
    ) as run_executor:  # fmt: skip
        target, flag_search = choose_global_flags(options, run_executor)
        with open_run(options, target, run_executor) as run:
            run_sequence(run, named(generate_stage), ())
            stored_winner = reusable_winner(run)
            if stored_winner is not None:
                run_dir = create_run_dir(options.output_dir, run.problem.signature)
                return reuse_stored_winner(run, stored_winner, run_dir)
            start_budget(run, started)
            check_time_to_measure(run)
            run_dir = create_run_dir(options.output_dir, run.problem.signature)
            with marked_failed(run_dir), StageProgress(progress_enabled(options.show_progress)) as progress:  # fmt: skip
                start_run_folder(run, run_dir)
                run.progress = progress
                if run.database is not None:
                    session = uuid.uuid4().hex
                    rows = DatabaseRecording(run.database, run.result_key, run.recorder, session, run.rule.name)  # fmt: skip
                    run.recorder.on_update.append(rows)
                callbacks = (record_budget, save_run, learn_from_round)
                run_sequence(run, named(*dispatch_stages(run)), callbacks)
            assert run.result is not None
            return attach_flag_search(run.result, flag_search)


def dispatch_stages(run: DispatchRun) -> tuple[Stage, ...]:
    """Return the stages a started run goes through, after generate."""
    if run.options.stop_after is StopAfter.COMPILE:
        return (specs_stage, compile_stage, export_stage)
    return (
        specs_stage, *round_stages(run.search), compile_stage, measure_stage,
        check_stage, decide_stage,
    )  # fmt: skip
