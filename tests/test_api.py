"""The Python API (`ireetune.tune_dispatch`, `tune_model`, `profile`, `apply`) on real dispatches
and models: real iree-compile, local-task, the fast-run settings; each call's typed result and
the progress its callback received."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import ireetune
from ireetune.flows.model.run import PHASES
from ireetune.flows.model.tuner import ModelTuneResult
from ireetune.profiler.operations import OperationKind
from ireetune.profiler.pipeline import ProfileResult
from ireetune.profiler.shapes import SweepRequest
from ireetune.report.progress import ProgressEvent
from ireetune.report.result import TuneResult
from tests.conftest import FAST_RUN_OPTIONS, TEST_TARGET
from tests.spec_support import MIXED_MODEL, VALID_SPEC, write


def _stages(events: list[ProgressEvent]) -> list[str]:
    """Each stage's name once, in the order the stages started."""
    return list(dict.fromkeys(event.stage for event in events))


def _check_each_stage_starts_and_ends(events: list[ProgressEvent]) -> None:
    for stage in _stages(events):
        steps = [(event.completed, event.total) for event in events if event.stage == stage]
        total = steps[0][1]
        assert steps[0] == (0, total) and steps[-1] == (total, total), (stage, steps)


def test_import_ireetune_leaves_the_api_unloaded() -> None:
    # The API (and the compiler behind it) is imported on first use of one of its names.
    code = (
        "import sys, ireetune; print('ireetune.api' in sys.modules, "
        "ireetune.tune_dispatch.__module__, 'ireetune.api' in sys.modules)"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert completed.stdout == "False ireetune.api True\n"


def test_tune_dispatch(matmul_benchmark: Path, tmp_path: Path) -> None:
    events: list[ProgressEvent] = []
    result = ireetune.tune_dispatch(
        matmul_benchmark, target=TEST_TARGET, num_candidates=2, output_dir=str(tmp_path),
        use_database=False, show_progress=False, on_progress=events.append, **FAST_RUN_OPTIONS,
    )  # fmt: skip
    assert isinstance(result, TuneResult)
    assert (result.run_dir.parent, result.problem.signature) == (
        tmp_path,
        "matmul_64x128x96_f32_f32_f32",
    )
    # The baseline and the two candidates, each with its record; decided against the baseline.
    assert [record.candidate_id for record in result.records] == [0, 1, 2]
    assert result.baseline_ms > 0 and result.decision is not None
    assert _stages(events) == ["compiling", "benchmarking", "checking"]
    assert events[0] == ProgressEvent("compiling", 0, 3)
    _check_each_stage_starts_and_ends(events)


def test_tune_model(matmul_model: Path, tmp_path: Path) -> None:
    events: list[ProgressEvent] = []
    result = ireetune.tune_model(
        matmul_model, target=TEST_TARGET, num_candidates=2, max_dispatches=1,
        candidates_per_dispatch=1, rounds=2, search_flags=False, output_dir=tmp_path,
        use_database=False, show_progress=False, on_progress=events.append,
    )  # fmt: skip
    assert isinstance(result, ModelTuneResult)
    assert result.run_dir.parent == tmp_path and (result.run_dir / "report.txt").is_file()
    assert [outcome.name for outcome in result.dispatches] == ["main_dispatch_0"]
    assert result.default_ms > 0 and result.tuned_ms > 0
    # Every phase of the model flow, in order; a dispatch tuned in between adds its own stages.
    model_events = [event for event in events if event.stage.startswith("model: ")]
    assert model_events == [
        ProgressEvent(f"model: {phase}", completed, 1) for phase in PHASES for completed in (0, 1)
    ]
    _check_each_stage_starts_and_ends(events)


def test_profile(tmp_path: Path) -> None:
    events: list[ProgressEvent] = []
    request = SweepRequest(OperationKind.MATMUL, {"m": "32,48", "n": "16", "k": "8"})
    result = ireetune.profile(
        [request], target=TEST_TARGET, generated_dir=tmp_path / "generated", repetitions=2,
        vendor=False, show_progress=False, on_progress=events.append,
    )  # fmt: skip
    assert isinstance(result, ProfileResult)
    assert [(r.dispatch, r.status, r.verification) for r in result.results] == [
        ("matmul_32x16x8_f32t_f32t_f32t_default", "profiled", "SUCCESS"),
        ("matmul_48x16x8_f32t_f32t_f32t_default", "profiled", "SUCCESS"),
    ]
    assert (tmp_path / "generated" / "manifest.json").is_file()
    assert _stages(events) == ["generating dispatches", "compiling", "verifying", "profiling"]
    _check_each_stage_starts_and_ends(events)


def test_apply_a_spec_and_a_flags_file(tmp_path: Path) -> None:
    model = write(tmp_path, "model.mlir", MIXED_MODEL)
    spec = write(tmp_path, "spec.mlir", VALID_SPEC)
    flags_file = write(tmp_path, "tuned_flags.txt", "--iree-opt-strip-assertions\n")
    events: list[ProgressEvent] = []
    result = ireetune.apply(
        model, target="cpu", spec=spec, flags_file=flags_file, output=tmp_path / "model.vmfb",
        on_progress=events.append,
    )  # fmt: skip
    assert isinstance(result, ireetune.ApplyResult) and result.landed
    assert (result.output, result.flags) == (
        tmp_path / "model.vmfb",
        ("--iree-opt-strip-assertions",),
    )
    assert result.report is not None
    assert [(c.matcher, c.dispatch, c.landed) for c in result.report.checks] == [
        ("match_matmul_64x128x96", "main_dispatch_0", True)
    ]
    assert (tmp_path / "model.vmfb").stat().st_size > 0
    assert events == [ProgressEvent("compiling", 0, 1), ProgressEvent("compiling", 1, 1)]


def test_apply_flags_only_writes_the_binary_without_a_report(tmp_path: Path) -> None:
    model = write(tmp_path, "model.mlir", MIXED_MODEL)
    flags_file = write(tmp_path, "tuned_flags.txt", "--iree-opt-strip-assertions\n")
    result = ireetune.apply(
        model, target="cpu", flags_file=flags_file, output=tmp_path / "out" / "model.vmfb"
    )
    assert (result.output, result.report, result.landed) == (
        tmp_path / "out" / "model.vmfb",
        None,
        True,
    )
    assert (tmp_path / "out" / "model.vmfb").stat().st_size > 0


@pytest.mark.parametrize(
    ("call", "keywords", "message"),
    [
        (ireetune.tune_dispatch, {"num_candidates": 0}, "tune_dispatch.num_candidates must be at least 1, got 0"),
        (ireetune.tune_dispatch, {"order": "best"}, "tune_dispatch.order: 'best' is not one of auto, learned, heuristic, random"),
        (ireetune.tune_model, {"rounds": 100_001}, "tune_model.rounds must be at most 100000, got 100001"),
        (ireetune.tune_model, {"coverage": 1.5}, "tune_model.coverage must be more than 0 and at most 1, got 1.5"),
        (ireetune.profile, {"samples": -1}, "profile.samples must be at least 1, got -1"),
        (ireetune.apply, {"target": "cpu", "output": "x.vmfb", "compile_timeout": 0.0}, "apply.compile_timeout must be more than 0 seconds, got 0.0"),
        (ireetune.tune_dispatch, {"stop_after": "compile", "extra_flags": ["--iree-opt-strip-assertions"]}, "--flags with --stop-after compile: '--iree-opt-strip-assertions' is not a flag a run folder may carry (only the flag search's options, see `ireetune/targets/*/flags.py`)"),
        (ireetune.tune_dispatch, {"num_candidate": 3}, "tune_dispatch: no option named num_candidate (TuneOptions lists them)"),
        (ireetune.apply, {"spec": "spec.mlir"}, "apply: ApplyOptions.__init__() missing 2 required keyword-only arguments: 'target' and 'output'"),
    ],
)  # fmt: skip
def test_a_bad_option_is_one_clear_error_before_any_work(
    call: object, keywords: dict[str, object], message: str, tmp_path: Path
) -> None:
    arguments = () if call is ireetune.profile else (tmp_path / "absent.mlir",)
    with pytest.raises(ireetune.IreetuneError) as excinfo:
        call(*arguments, **keywords)  # type: ignore[operator]
    assert (str(excinfo.value), list(tmp_path.iterdir())) == (message, [])
