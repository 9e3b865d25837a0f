"""The state file of a model run (`model_run.json`), in either mode: its one declaration and its
one reader (state_restore.py writes the run to it and rebuilds the run from it).

A run is saved when it starts and after every phase (a split run also after every sub-step: each
dispatch folder compiled, each round trip). `ireetune continue RUN` reads the file as untrusted
data: the format first, then every field, every path inside the folder. Declared once:

    format, mode          `ireetune-model-run/3`; `in-process` or `split`
    progress              where the run stands (flows/sequence.py `RunProgress`): the first
                          phases of the flow finished, and the round trip a split run waits for
    options, elapsed_s    the options the run was started with; this host's seconds so far
    model                 the model's own MLIR in the folder, its hash (and the model file's, in
                          process), the entry function, inputs, compile timeout
    notes, dispatch_notes the run's notes and each dispatch's note
    finalists             in process, once judged: the flag phase's finalists with the tuned
                          dispatches (flows/model/flag_finalists.py)

Besides, an in-process run keeps at the top what each phase leaves the later ones (the default
binaries and times, the flag search, the split import's speedup when the run switched to it,
each tuned dispatch's candidates, the specs accepted, the final check; the hot set is
profile.json, read back), and a split run its round trips in the `split` section, updated in
place as each sub-step finishes.

A file of `ireetune-model-run/2` (an in-process run, before split runs shared the file: this
layout without `split`) is read as this one, and so is a file of this version written before
`progress` (its `phases_done`, and the split section's `stage`, read as the run's progress).
A split run's earlier file (`split.json`, `ireetune-split-run/1`) is refused in one line: it is
finished by the ireetune that started it.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ireetune.core.errors import IreetuneError
from ireetune.core.fields import Milliseconds, NonNegativeInt, Seconds, bounded_as
from ireetune.core.options import check_option_numbers, value_type_of
from ireetune.database.run_files import (
    MAX_CANDIDATE_ID,
    FileModel,
    InsidePath,
    RunFileError,
    check_format,
    read_json_file,
    read_model_file,
    validate_record,
)
from ireetune.decision.stats import SpeedupEstimate
from ireetune.flags.check import check_flag_form
from ireetune.flags.trials import FlagTrial
from ireetune.flows.dispatch.options import TuneOptions
from ireetune.flows.handoff.model_folder import ProfileResultsFile, hash_file
from ireetune.flows.model.options import ModelTuneOptions
from ireetune.flows.model.options_file import ModelOptionsFile, options_of
from ireetune.flows.sequence import PROGRESS_KEY, RunProgress
from ireetune.model.hot import DispatchProfile, HotSet

MODEL_RUN_NAME = "model_run.json"
MODEL_RUN_FORMAT = "ireetune-model-run/3"
# The in-process layout before the split mode shared the file: read as this one.
_IN_PROCESS_FORMAT_2 = "ireetune-model-run/2"
# The split mode's own file before it shared model_run.json: refused by name.
OLD_SPLIT_NAME = "split.json"
PROFILE_NAME = "profile.json"

Count = Annotated[int, Field(ge=0, le=MAX_CANDIDATE_ID)]


class Mode(enum.StrEnum):
    """Where a model run measures."""

    IN_PROCESS = "in-process"
    SPLIT = "split"


class Phase(enum.StrEnum):
    """The phases of the model flow, in the order they run."""

    PREPARE = "prepare"
    FLAGS = "flags"
    PROFILE = "profile"
    DISPATCHES = "dispatches"
    VARIANTS = "variants"
    DECIDE = "decide"
    REPORT = "report"


PHASES = tuple(Phase)


class SplitStage(enum.StrEnum):
    """Where a split run stands between its hosts."""

    PREPARING = "preparing"
    AWAITING_DEVICE = "awaiting-device"
    DONE = "done"


class ModelFile(FileModel):
    """The model under tuning, as the prepare phase left it."""

    # The model file's hash ("" in a split run: its compile host checks only its own copy).
    source_sha256: str = ""
    # "" when the model file itself is the MLIR tuned (an .mlir model was not copied before).
    mlir: InsidePath = ""
    mlir_sha256: str
    function: str
    inputs: InsidePath = "inputs.npz"
    # In process: the default's outputs and the device it was timed on.
    default_outputs: InsidePath = ""
    device: str = ""
    # Split: the model's external weights, sent to the device with it.
    parameters: tuple[InsidePath, ...] = ()
    compile_timeout_s: Annotated[
        Seconds, bounded_as(value_type_of(TuneOptions, "compile_timeout_s"))
    ] = 1200.0


# --- In process ------------------------------------------------------------------------------


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


class FinalistFile(FileModel):
    """One flag set judged with the tuned dispatches (flows/model/flag_finalists.py): its trial,
    its verdict (`reference`, `kept`, `beaten`, `rejected`, `dropped` or `skipped`) and why, its
    speedup over the reference, and how many of the spec's matchers landed under it."""

    trial: Count
    verdict: str
    reason: str = ""
    estimate: SpeedupEstimate | None = None
    landed: Count | None = None
    matchers: Count | None = None


class FinalistsFile(FileModel):
    """The flag phase's finalists judged with the tuned dispatches: the report's line, the flag
    phase's winner and the trial whose flags the run keeps (the flag search's winner from then
    on), each finalist's row."""

    line: str
    flag_winner: Count
    kept: Count
    finalists: tuple[FinalistFile, ...] = ()


# --- Split -----------------------------------------------------------------------------------


class StateFile(BaseModel):
    """A part of the split section: typed and strict as a FileModel, but updated in place by the
    flow (each sub-step records what it left as it finishes)."""

    model_config = ConfigDict(strict=True, extra="ignore")


class SplitDispatchFile(StateFile):
    index: NonNegativeInt
    name: str
    benchmark: InsidePath
    vmfb: InsidePath
    problem: str
    tunable: bool
    invocations: NonNegativeInt
    flops: NonNegativeInt
    bytes: NonNegativeInt = 0
    # Absent in files written before kin (model/kin.py) were grouped.
    kin: str | None = None


class SplitTimingFile(StateFile):
    phase: str
    host: str
    seconds: Seconds


class SplitVariantFile(StateFile):
    label: str
    specs: list[InsidePath]
    # The hot dispatch each spec tunes, in the same order (absent in files written before it).
    dispatches: list[str] = []
    spec: InsidePath
    status: str
    reason: str = ""
    outputs_match: bool | None = None
    confirmed: bool = False
    speedup: float | None = None
    speedup_low: float | None = None
    speedup_high: float | None = None
    verdict: str = ""
    why: str = ""
    first_speedup: float | None = None

    @model_validator(mode="after")
    def _check_dispatches(self) -> SplitVariantFile:
        if self.dispatches and len(self.dispatches) != len(self.specs):
            raise ValueError(
                f"names {len(self.dispatches)} dispatches for its {len(self.specs)} specs, not one per spec"
            )
        return self


class SplitFlagsFile(StateFile):
    """The flag phase of a split run, sub-step by sub-step: the sets compiled and sorted by
    hash (`trials`), the round trip that timed them (`round_trip`, 0 before), the verdict
    (`decided`, the winner's trial id or None: the defaults stay)."""

    searched: bool
    why: str = ""
    trials: list[FlagTrial] = []
    round_trip: NonNegativeInt = 0
    decided: bool = False
    winner: NonNegativeInt | None = None
    notes: list[str] = []


class SplitSection(StateFile):
    """A split run's round trips (how many it started) and what each finished sub-step left."""

    round_trip: NonNegativeInt = 0
    devices: list[str]
    done_steps: list[str] = []
    # Dispatch problem -> its benchmark folder ("" when it could not be compiled).
    folders: dict[str, InsidePath] = {}
    dispatches: list[SplitDispatchFile] = []
    device_manifest_sha256: str | None = None
    timings: list[SplitTimingFile] = []
    profile: ProfileResultsFile | None = None
    folder_outcomes: dict[str, str] = {}
    variants: list[SplitVariantFile] = []
    winner: str | None = None
    rule: str = ""
    flags: SplitFlagsFile

    def host_seconds(self, host: str) -> float:
        """Return the seconds the run's phases spent on `host` ("compile" or "device")."""
        return sum(t.seconds for t in self.timings if t.host == host)


# Where an in-process run puts its import with the grouped convolutions split, its binary and
# outputs (flows/model/import_choice.py; removed when it is not kept).
SPLIT_DIR = "import_split"


# --- The file --------------------------------------------------------------------------------


class ModelRunFile(FileModel):
    """model_run.json: the phases done and what each left for the later ones."""

    FORMAT: ClassVar[str] = MODEL_RUN_FORMAT

    format: str
    mode: Mode
    progress: RunProgress
    options: ModelOptionsFile
    elapsed_s: Seconds = 0.0
    model: ModelFile | None = None
    notes: tuple[str, ...] = ()
    dispatch_notes: dict[str, str] = {}
    # In process (see the module's docstring).
    original_vmfb: InsidePath = ""
    original_ms: Milliseconds = 0.0
    # The prepare phase's measure of the model's costs (`ModelCosts`); 0 in a file written
    # before they were measured.
    compile_s: Seconds = 0.0
    load_s: Seconds = 0.0
    default_vmfb: InsidePath = ""
    default_ms: Milliseconds = 0.0
    flag_search: FlagPhaseFile | None = None
    # The split import's speedup when the flag phase's end switched to it (import_choice.py).
    import_split: SpeedupEstimate | None = None
    dispatches_done: tuple[str, ...] = ()
    dispatches: dict[str, TunedDispatchFile] = {}
    accepted: dict[str, InsidePath] = {}
    final: FinalFile | None = None
    # Done once the decide phase judged the flag phase's finalists (absent in older files).
    finalists: FinalistsFile | None = None
    # Split.
    split: SplitSection | None = None

    @property
    def phases_done(self) -> tuple[Phase, ...]:
        """The phases of the flow finished, in order."""
        return PHASES[: len(self.progress.done)]

    @property
    def split_stage(self) -> SplitStage:
        """Where the run stands between its hosts, from its progress."""
        if self.phases_done == PHASES:
            return SplitStage.DONE
        return SplitStage.PREPARING if self.progress.pause is None else SplitStage.AWAITING_DEVICE

    @model_validator(mode="after")
    def _check_phases(self) -> ModelRunFile:
        check_option_numbers(self.options, "options")
        if self.progress.done != PHASES[: len(self.progress.done)]:
            raise ValueError("progress.done must name the first phases of the flow, in order")
        if (self.split is None) != (self.mode is Mode.IN_PROCESS):
            raise ValueError("a split run, and only a split run, must hold its split section")
        if self.progress.pause is not None and self.split is None:
            raise ValueError("only a split run waits for the device host")
        if Phase.PREPARE in self.phases_done and self.model is None:
            raise ValueError("a run past its prepare phase must hold its model")
        if self.import_split is not None and not (
            self.model is not None and Path(self.model.mlir).parts[:1] == (SPLIT_DIR,)
        ):
            # The report and the ONNX Runtime comparison would look for a split import's files.
            raise ValueError(f"import_split is set, but the model's MLIR is not in {SPLIT_DIR}/")
        if self.mode is Mode.IN_PROCESS:
            if Phase.PREPARE in self.phases_done and not (self.original_vmfb and self.default_vmfb):
                raise ValueError("a run past its prepare phase must hold its binaries")
            if Phase.DECIDE in self.phases_done and self.final is None:
                raise ValueError("a run past its decide phase must hold its final check")
        search = self.flag_search
        winner = search.winner_trial if search is not None else None
        if search is not None and winner is not None and winner >= len(search.trials):
            raise ValueError("flag_search.winner_trial names no trial")
        judged = self.finalists
        count = len(search.trials) if search is not None else 0
        if judged is not None and any(
            trial >= count for trial in (judged.kept, *(f.trial for f in judged.finalists))
        ):
            raise ValueError("finalists name a trial the flag search does not hold")
        return self

    def run_options(
        self, jobs: int | None = None, database_path: Path | None = None
    ) -> ModelTuneOptions:
        """Return the run's options as the flow takes them (`jobs`, when given, replaces the
        run's parallel compiles; the database is the command line's, `database_path`, None for
        the default: a folder does not choose it)."""
        return options_of(self.options, jobs or self.options.jobs, database_path)


class ProfileDispatchFile(FileModel):
    name: str
    benchmark: InsidePath
    problem: str
    tunable: bool
    invocations: Count
    dispatch_ms: Milliseconds | None
    selected: bool
    # Absent in files written before kin (model/kin.py) were grouped.
    kin: str | None = None
    # Absent (0: not known) in files written before the hot set weighed dispatches by their
    # headroom (model/headroom.py).
    flops: NonNegativeInt = 0
    bytes: NonNegativeInt = 0


class ProfileFile(FileModel):
    """profile.json, as `ireetune continue` reads it back: the hot set."""

    FORMAT: ClassVar[str] = "ireetune-model-profile/1"

    model_ms: Milliseconds
    explained_ms: Milliseconds
    covered_ms: Milliseconds
    dispatches: tuple[ProfileDispatchFile, ...]


# --- Reading ---------------------------------------------------------------------------------


def read_run_file(run_dir: Path) -> ModelRunFile:
    """Read a model run's file: the format first (a file of format 2 is read as this one; a
    split run's split.json, or another version, is refused in one line), then every field."""
    path = run_dir / MODEL_RUN_NAME
    if not run_dir.is_dir():
        raise IreetuneError(f"run folder not found: {run_dir}")
    if not path.is_file() and (run_dir / OLD_SPLIT_NAME).is_file():
        old = read_json_file(run_dir / OLD_SPLIT_NAME)
        found = old.get("format") if isinstance(old, dict) else None
        raise IreetuneError(
            f"{run_dir / OLD_SPLIT_NAME} is a split run of format {found}, written before split "
            f"runs kept {MODEL_RUN_NAME} ({MODEL_RUN_FORMAT}): finish it with the ireetune that "
            "started it, or start a new one with `ireetune tune MODEL --stop-after compile`"
        )
    if not path.is_file():
        raise IreetuneError(
            f"{run_dir} is not a model run folder (it holds no {MODEL_RUN_NAME}); start one "
            "with `ireetune tune MODEL`"
        )
    document = read_json_file(path)
    if isinstance(document, dict) and document.get("format") == _IN_PROCESS_FORMAT_2:
        document["format"] = MODEL_RUN_FORMAT
    if isinstance(document, dict) and PROGRESS_KEY not in document:
        _read_old_progress(document)
    check_format(path, document, MODEL_RUN_FORMAT, "file")
    stored = validate_record(path, ModelRunFile, document, run_dir)
    flags = stored.flag_search
    if flags is not None:
        for trial in flags.trials:
            check_flag_form(trial.flag_set.flags, f"{path}: flag_search")
        check_flag_form(flags.runtime_flags, f"{path}: flag_search.runtime_flags")
    check_flag_form(stored.options.extra_flags, f"{path}: options.extra_flags")
    return stored


def _read_old_progress(document: dict[str, Any]) -> None:
    """Put the progress of a file written before `progress` into it: its phases done, and the
    round trip a split run waits for when its split section's stage says it waits."""
    split, pause = document.get("split"), None
    if isinstance(split, dict) and split.pop("stage", None) == SplitStage.AWAITING_DEVICE:
        pause = {"round_trip": split.get("round_trip")}
    document[PROGRESS_KEY] = {"done": document.pop("phases_done", None), "pause": pause}


def read_model_run(run_dir: Path) -> ModelRunFile:
    """Read an in-process run's file; refuse in one line a run that cannot be continued:
    finished, stopped before its prepare phase was saved, or whose model changed."""
    path = run_dir / MODEL_RUN_NAME
    stored = read_run_file(run_dir)
    if stored.mode is Mode.SPLIT:
        raise IreetuneError(
            f"{run_dir} is a split model run: continue it with `ireetune continue` after its "
            "device step"
        )
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
    check_model_copy(run_dir, stored.model)
    return stored


def check_model_copy(run_dir: Path, model: ModelFile) -> None:
    """Refuse in one line a run whose copy of its model changed since the run started."""
    mlir = run_dir / model.mlir
    if not mlir.is_file() or hash_file(mlir) != model.mlir_sha256:
        raise IreetuneError(f"{mlir} changed since the run started; start a new run")


def read_run_mode(run_dir: Path) -> Mode | None:
    """Return the mode model_run.json names (None: no such file, or no mode this version
    knows); the file is read in full by `read_run_file`."""
    path = run_dir / MODEL_RUN_NAME
    if not path.is_file():
        return None
    try:
        document = read_json_file(path)
    except RunFileError:
        return None
    mode = document.get("mode") if isinstance(document, dict) else None
    return Mode(mode) if mode in set(Mode) else None


def read_hot_set(run_dir: Path) -> HotSet:
    """Read the hot set back from profile.json (its benchmarks inside the run folder)."""
    path = run_dir / PROFILE_NAME
    stored = read_model_file(path, ProfileFile, run_dir)
    ranked = tuple(
        DispatchProfile(
            d.name,
            run_dir / d.benchmark,
            d.problem,
            d.tunable,
            d.dispatch_ms,
            d.invocations,
            d.kin,
            d.flops,
            d.bytes,
        )  # fmt: skip
        for d in stored.dispatches
    )
    selected = tuple(p for p, d in zip(ranked, stored.dispatches, strict=True) if d.selected)
    return HotSet(ranked, selected, stored.model_ms, stored.explained_ms, stored.covered_ms)
