"""One dispatch run: the state every stage of a dispatch run reads and writes.

A stage (flows/dispatch/stages.py) takes the run, and at most the one or two values that are its
own, instead of the options, target, problem, run folder, recorder and executor one by one.
The one sequencer of every run (flows/sequence.py `run_sequence`) runs the stages in order and
calls its callbacks after every stage; `save_run`, the callback that rewrites results.json
(atomically, through the recorder), saves the run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar, overload

from ireetune.benchmark.campaign import CampaignSettings
from ireetune.core.budget import TaskScheduler
from ireetune.core.errors import IreetuneError
from ireetune.core.records import TIMED_STATUSES
from ireetune.core.target import SpaceRequest
from ireetune.database.run_files import FileModel, dump_record, validate_record
from ireetune.flows.sequence import PROGRESS_KEY, RunProgress

if TYPE_CHECKING:
    from pathlib import Path

    from iree.compiler import ir

    from ireetune.benchmark.campaign import CampaignResult
    from ireetune.core.candidate import Knobs
    from ireetune.core.records import CandidateRecord
    from ireetune.core.target import FamilySpace, OpConfiguration, Target
    from ireetune.database.store import ResultKey, StoredResult, TuningDatabase
    from ireetune.decision.rules import CandidateFacts, DecisionRule
    from ireetune.executor import Executor
    from ireetune.flows.dispatch.decide import RunOutline
    from ireetune.flows.dispatch.options import TuneOptions
    from ireetune.frontend.load import LoadedDispatch
    from ireetune.problem.family import Problem
    from ireetune.report.progress import StageProgress
    from ireetune.report.recorder import RunRecorder
    from ireetune.report.result import TuneResult
    from ireetune.search.strategy import Rounds
    from ireetune.verify.stage import ReferenceSetup


ValueT = TypeVar("ValueT")


class SetByStage(Generic[ValueT]):
    """A run's value that one stage sets and later stages read, kept in the run's field of the
    same name with a leading underscore (None until the stage sets it).

    Reading it before that stage ran is a defect of the stage order, so it is an assert that
    says what is missing, not an error for the user.
    """

    def __init__(self, unset: str) -> None:
        self.unset = unset
        self.field_name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.field_name = f"_{name}"

    @overload
    def __get__(self, run: None, owner: type) -> SetByStage[ValueT]: ...

    @overload
    def __get__(self, run: object, owner: type) -> ValueT: ...

    def __get__(self, run: object, owner: type) -> SetByStage[ValueT] | ValueT:
        if run is None:
            return self
        value: ValueT | None = getattr(run, self.field_name)
        assert value is not None, self.unset
        return value

    def __set__(self, run: object, value: ValueT) -> None:
        setattr(run, self.field_name, value)


@dataclass
class DispatchBudget:
    """A run's `--time-budget` as the run spends it (flows/dispatch/budget.py): its scheduler,
    when measuring began, how many candidates the parts started, whether the budget ended the
    run (the parts waiting are the run's rounds: search/climb.py), and the seconds one timing
    of a binary took in the last part's first pass (None before one was timed)."""

    scheduler: TaskScheduler
    measuring_since: float = 0.0
    started: int = 0
    ended: bool = False
    timing_s: float | None = None


@dataclass
class DispatchRun:
    """What one dispatch run knows, handed from stage to stage.

    The first fields are fixed when the run starts; `recorder`, `reference` and `progress` are
    set by the stage that makes them (the run folder's files, the reference program, the
    progress display), and `restored` and `notes` grow as the stages go.
    """

    executor: Executor
    options: TuneOptions
    target: Target
    context: ir.Context
    dispatch: LoadedDispatch
    devices: list[str]
    rule: DecisionRule
    database: TuningDatabase | None
    result_key: ResultKey
    stored: dict[str, StoredResult] = field(default_factory=dict)
    search: Rounds | None = None
    # Whether candidates are timed on real inputs (their binaries are reference programs).
    real_input_search: bool = False
    workers: int = 1
    notes: list[str] = field(default_factory=list)
    # The run's `--time-budget` (None: no limit).
    budget: DispatchBudget | None = None
    # What the stages hand on: the candidates to write specs for (generate); those measured
    # before the main campaign, found in the database or in an early round (specs, compile); a
    # campaign run while compiling (compile); the facts and the contenders (measure, check);
    # the run's result (decide, or export when the run stops after compiling).
    candidates: list[tuple[Knobs, float | None]] = field(default_factory=list)
    ordering: str = ""
    restored: set[int] = field(default_factory=set)
    overlapped: CampaignResult | None = None
    success_rate: float = 0.0
    facts: dict[int, CandidateFacts] = field(default_factory=dict)
    contenders: list[int] = field(default_factory=list)
    result: TuneResult | None = None
    # Where the run stands (flows/sequence.py), saved after every stage.
    run_progress: RunProgress = field(default_factory=RunProgress)
    _recorder: RunRecorder | None = None
    _reference: ReferenceSetup | None = None
    _progress: StageProgress | None = None

    @property
    def problem(self) -> Problem:
        return self.dispatch.problem

    @property
    def space(self) -> FamilySpace:
        return self.dispatch.space

    @property
    def request(self) -> SpaceRequest:
        """What the run asks of its space: its dispatch's problem, target and default."""
        dispatch = self.dispatch
        return SpaceRequest(
            dispatch.problem, dispatch.variant_target, dispatch.default_knobs, self.options.seed
        )

    def configuration(self, knobs: Knobs) -> OpConfiguration:
        """Render a candidate's configuration for the run's dispatch."""
        return self.space.configuration_for(self.request, knobs, self.context)

    recorder = SetByStage["RunRecorder"]("the run folder is not started yet")
    reference = SetByStage["ReferenceSetup"]("the reference program is not written yet")
    progress = SetByStage["StageProgress"]("the run's progress display is not open")

    @property
    def run_dir(self) -> Path:
        return self.recorder.run_dir

    @property
    def campaign_settings(self) -> CampaignSettings:
        return campaign_settings(self.options)

    def summarise(self) -> RunOutline:
        """Return what the summary names; a run none of whose candidates could be measured is
        marked failed and ends here."""
        recorder = self.recorder
        measurable = [
            r for r in recorder.records.values()
            if not r.is_baseline and r.status in TIMED_STATUSES
        ]  # fmt: skip
        if not measurable:
            recorder.info["outcome"] = "failed"
            recorder.info["notes"] = self.notes
            recorder.save()
            raise IreetuneError(
                f"no candidate could be measured; see {self.run_dir}/candidates.csv"
            )
        from ireetune.flows.dispatch.decide import RunOutline

        baseline_ms = recorder.records[0].median_ms or math.nan
        return RunOutline(self.problem, self.target.name, baseline_ms, self.success_rate)

    def prove_winner(self, best: CandidateRecord) -> None:
        """Prove the winner's configuration lands in the compiled dispatch (verify/landing.py)."""
        from ireetune.verify.landing import prove_config_landed

        assert best.knobs is not None
        run_dir, context = self.run_dir, self.context
        configuration = self.configuration(best.knobs)
        prove_config_landed(
            self.target, run_dir / "inputs" / "stripped_benchmark.mlir", run_dir / best.spec_path,
            configuration.compilation_info, run_dir / "verify" / "best_configuration", context,
            configuration.function_attributes,
        )  # fmt: skip


def campaign_settings(options: TuneOptions) -> CampaignSettings:
    """Return the benchmark settings a run's options ask for."""
    return CampaignSettings(
        repetitions=options.repetitions, min_repetition_s=options.min_repetition_s,
        hopeless_factor=options.hopeless_factor, confirm_top=options.confirm_top,
        confirm_rounds=options.confirm_rounds, confirm_above=options.confirm_above,
        min_timeout_s=options.min_benchmark_timeout_s,
        screen_fraction=options.screen_fraction, prewarm=options.prewarm,
    )  # fmt: skip


def searches_on_real_inputs(run: DispatchRun) -> bool:
    """Say whether candidates are timed on real inputs from the first pass (the reference
    program), so that the search is steered by the signal that decides: where the rule decides
    on real inputs, the problem's reference program carries configurations, and the run
    measures here (one stopped after compiling leaves its dispatch benchmarks to another host)."""
    return (
        run.rule.real_input_decides
        and run.problem.reference_carries_config
        and run.options.stop_after is None
    )


# Said by a run whose target decides on real inputs that was asked to decide on the benchmark.
DISPATCH_BENCHMARK_DECIDES = (
    "searched and decided on the dispatch benchmark, batched (launch amortised), as a model's "
    "profile times its dumped dispatches, not on real inputs; the contenders' outputs were "
    "checked on real inputs"
)


def first_notes(run: DispatchRun) -> list[str]:
    """Return the notes a run starts with: its space's, and which timing decides where the run
    was asked to decide on the dispatch benchmark and its target would on real inputs."""
    asked = run.target.traits.decides_at_model_level and not run.rule.real_input_decides
    return [*run.space.space_notes(), *([DISPATCH_BENCHMARK_DECIDES] if asked else [])]


# A stage reads the run and writes what it found into it; the one sequencer of every run
# (flows/sequence.py) runs them and, after each, its callbacks with the stage's name.
Stage = Callable[[DispatchRun], None]


def save_run(run: DispatchRun, stage: str) -> None:
    """Save the run after a stage: results.json (with the run's progress, which `ireetune
    continue` resumes from) and candidates.csv, rewritten atomically."""
    run.run_progress = run.run_progress.after(stage.removesuffix("_stage"))
    run.recorder.info[PROGRESS_KEY] = dump_record(RunProgress, run.run_progress)
    run.recorder.save()


class _SavedProgress(FileModel):
    """The part of results.json that says where the run stands."""

    progress: RunProgress


def read_progress(run_dir: Path, info: Mapping[str, object]) -> RunProgress:
    """Return where the run saved in `run_dir` stands, from its results.json (`info`): its
    `progress`, or in a file written before it, its last stage saved (`stage`), read as the
    one stage done."""
    if PROGRESS_KEY in info:
        saved = {PROGRESS_KEY: info[PROGRESS_KEY]}
        return validate_record(run_dir / "results.json", _SavedProgress, saved).progress
    stage = info.get("stage")
    return RunProgress((stage,) if isinstance(stage, str) else ())
