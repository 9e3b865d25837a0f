"""Continue a dispatch run from its folder: load the saved run, run the stages that remain.

A run stopped after compiling (`tune-dispatch --stop-after compile`, flows/handoff/export.py) is
carried on by the commands below, each the same call: read the run back from its folder as
untrusted data, then hand it through its remaining stages with `run_stages`, the sequencer of
the in-process flow (flows/dispatch/state.py).

    from      command            stages                                  saved
    measure   benchmark-folder   measure, check (runtime only)           benchmark_results.json,
                                                                             after each stage
    references finish            compile the deferred reference          verify/references.json
                                 programs and stop (the device host
                                 checks them next); where none wait,
                                 go on as `decide`
    decide    (finish_run)       fold the results in, decide             results.json, summary.txt
    replay    replay             measure the winner against the default  nothing

`decide` is the in-process flow's own decide stage (flows/dispatch/decide.py). A folder written
by another version of ireetune is read when its files' formats are this version's, else refused
in one line naming the format found (run_files.check_format).

Nothing here imports the compiler at module level: `measure` and `replay` run on a host with
only the runtime; each branch imports its stages when it runs.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ireetune.flows.dispatch.state import run_stages

if TYPE_CHECKING:
    from ireetune.decision.stats import SpeedupEstimate
    from ireetune.report.result import TuneResult


class ContinueAt(enum.Enum):
    """The stage a run folder is continued at."""

    MEASURE = "measure"
    REFERENCES = "references"
    DECIDE = "decide"
    REPLAY = "replay"


@dataclass(frozen=True)
class ContinueSettings:
    """What the continuing command adds to the saved run: the devices to measure on
    (`benchmark-folder`), the candidate and the rounds to replay (`replay`)."""

    devices: tuple[str, ...] = ()
    candidate: int | None = None
    rounds: int = 7
    repetitions: int = 5
    device: str | None = None


@dataclass(frozen=True)
class ContinuedRun:
    """What the remaining stages produced: the results file, the verdict or the replay."""

    results_path: Path | None = None
    result: TuneResult | None = None
    references: tuple[int, ...] = ()
    replayed: tuple[int, SpeedupEstimate] | None = None


def continue_run(
    run_dir: Path, from_stage: ContinueAt, settings: ContinueSettings | None = None
) -> ContinuedRun:
    """Load the run saved in `run_dir` and run its stages from `from_stage` on."""
    settings = settings or ContinueSettings()
    if from_stage is ContinueAt.MEASURE:
        from ireetune.flows.handoff.benchmark_folder import (
            check_folder_stage,
            load_measure_run,
            measure_folder_stage,
            save_folder_results,
        )

        measure_run = load_measure_run(run_dir, settings.devices)
        run_stages(measure_run, (measure_folder_stage, check_folder_stage), (save_folder_results,))
        return ContinuedRun(results_path=measure_run.results_path)
    if from_stage in (ContinueAt.REFERENCES, ContinueAt.DECIDE):
        from ireetune.flows.dispatch.decide import decide_stage
        from ireetune.flows.handoff.finish import fold_stage, load_finish_run
        from ireetune.flows.handoff.references import references_stage

        finish_run = load_finish_run(run_dir)
        if from_stage is ContinueAt.REFERENCES:
            run_stages(finish_run, (references_stage,), ())
            if finish_run.compiled_references:
                return ContinuedRun(references=tuple(finish_run.compiled_references))
        # Nothing is written before the verdict: a folder refused on the way is left as it was.
        run_stages(finish_run, (fold_stage, decide_stage), ())
        return ContinuedRun(result=finish_run.result)
    from ireetune.report.replay import load_replay_run, replay_stage

    replay_run = load_replay_run(run_dir, settings.candidate, settings.device)
    replay_run.rounds, replay_run.repetitions = settings.rounds, settings.repetitions
    run_stages(replay_run, (replay_stage,), ())
    assert replay_run.estimate is not None
    return ContinuedRun(replayed=(replay_run.candidate_id, replay_run.estimate))
