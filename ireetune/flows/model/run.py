"""One model run: the state every phase of the model flow reads and writes, and its sequencer.

The model flow is one sequence of phases (`PHASES`): prepare, flags, profile, dispatches,
variants, decide, report. A mode says where measuring happens:

- `Mode.IN_PROCESS` (`ireetune tune MODEL`): every phase on this host, measuring as it goes
  (flows/model/local.py);
- `Mode.SPLIT` (`ireetune tune MODEL --stop-after compile`, then `ireetune continue`): this
  host compiles; a phase that needs the device writes the device step's manifest and the run
  pauses (a `Pause`) until `ireetune measure` has measured on the device host
  (flows/model/split.py).

The prepare and profile phases have one body for both modes, which measures here or pauses for
the device (flows/model/phases.py), the flag phase one entry (flag_phase.py); each mode gives
its own body of the others. The one sequencer of every run (flows/sequence.py)
runs them in order and saves the run after each one, in either mode to `model_run.json`
(flows/model/state.py), so that `ireetune continue` loads a stopped run and runs the phases
after the last one saved (`remaining_phases`; a split run runs them all again, each keeping the
sub-steps its file records as done). Both modes run every phase: the split mode's flag phase
times the search's seeds in one round trip (flows/model/flag_phase.py); what it leaves to the
in-process mode (the greedy steps past the seeds, the runtime options) its report says.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ireetune.core.budget import TaskScheduler
from ireetune.core.records import DispatchOutcome
from ireetune.decision.stats import SpeedupEstimate
from ireetune.flags.trials import FlagSearchResult
from ireetune.flows.model.state import (
    PHASES,
    FinalistsFile,
    Mode,
    ModelFile,
    Phase,
    SplitSection,
)
from ireetune.flows.sequence import Pause, RunProgress
from ireetune.report.progress import StageProgress

if TYPE_CHECKING:
    from ireetune.core.target import Target
    from ireetune.executor import Executor
    from ireetune.flags.trials import ModelFlagSearch
    from ireetune.flows.model.options import ModelTuneOptions
    from ireetune.model.final_check import FinalCheck
    from ireetune.model.hot import HotSet
    from ireetune.model.prepare import ModelUnderTuning
    from ireetune.model.variants import VariantVerdict


@dataclass(frozen=True)
class ModelTuneResult:
    run_dir: Path
    default_ms: float
    tuned_ms: float
    tuned_spec_path: Path | None
    dispatches: tuple[DispatchOutcome, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)
    # The final side-by-side check's paired speedup and interval (None without a tuned spec).
    # With flags tuned, default and tuned here both use them: this is the specs' contribution.
    estimate: SpeedupEstimate | None = None
    # Every global flag of the tuned model (the user's, then the flag phase's winner).
    flags: tuple[str, ...] = ()
    flag_search: FlagSearchResult | None = None
    tuned_flags_path: Path | None = None
    # The untouched default model against the tuned one (flags and spec), side by side.
    combined: SpeedupEstimate | None = None
    # The MLIR that was tuned (an ONNX model's import): what iree-compile takes.
    mlir_path: Path | None = None
    # The import with grouped convolutions split, kept by measurement (flows/model/import_choice
    # .py): its speedup over the model as given under the same flags; None: the model as given.
    import_estimate: SpeedupEstimate | None = None
    # The tuned model's binary when the run built it (`ModelTuningRun.tuned_binary`); None: the
    # untouched default with a spec, or nothing tuned.
    tuned_vmfb: Path | None = None

    @property
    def speedup(self) -> float:
        return self.default_ms / self.tuned_ms if self.tuned_ms else 1.0


@dataclass(frozen=True)
class ModelCosts:
    """What the prepare phase measured of the whole model, to plan the later phases within
    `--time-budget`: one compile of it, and what a timing session spends on it besides its
    calls (the process, loading the binary twice, the first call, the output files)."""

    compile_s: float = 0.0
    load_s: float = 0.0


@dataclass
class ModelTuningRun:
    """What one model run knows, handed from phase to phase.

    The first fields are fixed when the run starts; the prepare phase sets `model`; the rest
    grow as the phases go. A split run keeps its round trips in `state`, the split section of
    model_run.json (read back by `ireetune continue`), its model as the file records it in
    `model_file`, and the device step's latest results in `device_results`.
    """

    mode: Mode
    options: ModelTuneOptions
    target: Target
    run_dir: Path
    executor: Executor
    started: float = field(default_factory=time.monotonic)
    # The seconds this host spent on the run before `started` (a split run's earlier steps).
    elapsed_before_s: float = 0.0
    model: ModelUnderTuning | None = None
    notes: list[str] = field(default_factory=list)
    dispatch_notes: dict[str, str] = field(default_factory=dict)
    # Where the run stands (flows/sequence.py): the phases done, the round trip it waits for.
    run_progress: RunProgress = field(default_factory=RunProgress)
    # In process: the default model (the flag phase's winner once it has run) and its time, the
    # untouched one and its time.
    default_vmfb: Path | None = None
    original_vmfb: Path | None = None
    default_ms: float = 0.0
    original_ms: float = 0.0
    costs: ModelCosts = field(default_factory=ModelCosts)
    flag_request: ModelFlagSearch | None = None
    flag_search: FlagSearchResult | None = None
    # The split import's speedup over the model as given, when the run switched to it.
    import_estimate: SpeedupEstimate | None = None
    hot: HotSet | None = None
    # Each hot dispatch's kept candidate specs (best first), its verified winner, and per spec
    # (default ms, candidate ms) from the same tuning session of that dispatch.
    candidates: dict[str, list[Path]] = field(default_factory=dict)
    winners: dict[str, Path] = field(default_factory=dict)
    session_ms: dict[Path, tuple[float, float]] = field(default_factory=dict)
    # The hot dispatches the dispatch phase is done with (tuned or not, each with its note).
    dispatches_done: list[str] = field(default_factory=list)
    # The specs model-level selection accepted, and the model with all of them.
    accepted: dict[str, Path] = field(default_factory=dict)
    current_vmfb: Path | None = None
    # The flag phase's finalists judged with the tuned dispatches (the decide phase's first step).
    finalists: FinalistsFile | None = None
    final: FinalCheck | None = None
    result: ModelTuneResult | None = None
    # Split: the split section, the model's record, and what the device step returned.
    state: SplitSection | None = None
    model_file: ModelFile | None = None
    device_results: dict[str, Any] | None = None
    variant_verdict: VariantVerdict | None = None

    @property
    def under_tuning(self) -> ModelUnderTuning:
        assert self.model is not None, "the prepare phase sets the model"
        return self.model

    @property
    def split_state(self) -> SplitSection:
        assert self.state is not None, "a split run holds its state"
        return self.state

    @property
    def hot_set(self) -> HotSet:
        assert self.hot is not None, "the profile phase sets the hot set"
        return self.hot

    def budget_spent(self) -> bool:
        """Say whether the run's `--time-budget` is spent."""
        left = self.seconds_left()
        return left is not None and left < 0

    @property
    def scheduler(self) -> TaskScheduler:
        """The run's time budget and its shares (on the clock of `time.monotonic`)."""
        return TaskScheduler(self.options.time_budget_s, self.started)

    def seconds_left(self) -> float | None:
        """Return the seconds left of the run's `--time-budget` (None: no budget)."""
        return self.scheduler.seconds_left(time.monotonic())

    def tuned_binary(self, tuned_spec: Path | None) -> Path | None:
        """Return the tuned model's binary when the run builds it, which is when its default is
        not the untouched one (a flag set or the split import kept, in process): that default,
        or RUN/tuned.vmfb, its compile with `tuned_spec`. None otherwise: a spec alone is
        compiled on the untouched default by whoever needs the binary."""
        if self.default_vmfb is None or self.default_vmfb == self.original_vmfb:
            return None
        return self.default_vmfb if tuned_spec is None else self.run_dir / "tuned.vmfb"


PhaseBody = Callable[[ModelTuningRun], Pause | None]


def remaining_phases(
    run: ModelTuningRun, bodies: Mapping[Phase, PhaseBody]
) -> list[tuple[Phase, PhaseBody]]:
    """Return the mode's body of every phase not done yet (`run.run_progress`), in order, for the
    sequencer (flows/sequence.py), which saves the run after each and stops at the first that
    pauses for the device host; a split run's every phase (each keeps the sub-steps its run file
    records as done, and rebuilds what the later phases read). Each phase is a step of progress
    for an API call's callback (`model: flags`); no bar."""
    first = 0 if run.mode is Mode.SPLIT else len(run.run_progress.done)
    return [(phase, _as_progress_step(phase, bodies[phase])) for phase in PHASES[first:]]


def _as_progress_step(phase: Phase, body: PhaseBody) -> PhaseBody:
    """Wrap a phase's body so that it reports itself as one step of progress."""

    def step(run: ModelTuningRun) -> Pause | None:
        with StageProgress(False) as progress, progress.stage(f"model: {phase}", 1):
            return body(run)

    return step
