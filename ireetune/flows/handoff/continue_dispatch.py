"""Continue a dispatch run from its folder: load the saved run, run the stages that remain.

A run stopped after compiling (`tune-dispatch --stop-after compile`, flows/handoff/export.py) is
carried on by the commands below, each the same call: read the run back from its folder as
untrusted data, then hand it through its remaining stages with `run_sequence`, the one
sequencer of every run (flows/sequence.py).

    from       command                   stages                          saved
    measure    measure (benchmark-folder) measure, check (runtime only)  benchmark_results.json,
                                                                             after each stage
    references continue (finish)         compile the deferred reference  verify/references.json
                                         programs and pause (the device
                                         host checks them next); where
                                         none wait, fold the results in  results.json, summary.txt
                                         and decide (as `finish_run`)
    replay     replay                    measure the winner against the  nothing
                                         default

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

from ireetune.flows.sequence import named, run_sequence

if TYPE_CHECKING:
    from ireetune.decision.stats import SpeedupEstimate
    from ireetune.report.result import TuneResult


class ContinueAt(enum.Enum):
    """The stage a run folder is continued at."""

    MEASURE = "measure"
    REFERENCES = "references"
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


def continue_dispatch_folder(
    run_dir: Path, from_stage: ContinueAt, settings: ContinueSettings | None = None
) -> ContinuedRun:
    """Load the dispatch run saved in `run_dir` and run its stages from `from_stage` on."""
    settings = settings or ContinueSettings()
    if from_stage is ContinueAt.MEASURE:
        from ireetune.flows.handoff.benchmark_folder import benchmark_folder

        return ContinuedRun(results_path=benchmark_folder(run_dir, settings.devices))
    if from_stage is ContinueAt.REFERENCES:
        from ireetune.flows.dispatch.decide import decide_stage
        from ireetune.flows.handoff.finish import fold_stage, load_finish_run
        from ireetune.flows.handoff.references import references_stage

        finish = load_finish_run(run_dir)
        stages = named(references_stage, fold_stage, decide_stage)
        # The references stage pauses the run where it compiled the leaders' reference programs
        # (the device host checks them next). Nothing is written before the verdict: a folder
        # refused on the way is left as it was.
        if run_sequence(finish, stages, ()) is not None:
            return ContinuedRun(references=tuple(finish.compiled_references))
        return ContinuedRun(result=finish.result)
    from ireetune.report.replay import load_replay_run, replay_stage

    replay_run = load_replay_run(run_dir, settings.candidate, settings.device)
    replay_run.rounds, replay_run.repetitions = settings.rounds, settings.repetitions
    run_sequence(replay_run, named(replay_stage), ())
    assert replay_run.estimate is not None
    return ContinuedRun(replayed=(replay_run.candidate_id, replay_run.estimate))
