"""Read a finished run folder back into typed records for the HTML report.

Three kinds of folders exist: a dispatch run (`results.json`), a model run (`report.json` and
`profile.json`, with one dispatch run per tuned problem under `tuning/`) and a profiler run
(`profile_results.csv` beside `manifest.json`). Every field is read with a default, because the
files are written by several versions of ireetune (the run-level `decision` and the per-candidate
speedup interval are newer than the rest) and a run stopped half way leaves fields out.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ireetune.core.errors import IreetuneError
from ireetune.core.input_files import check_input_folder
from ireetune.core.records import (
    MODEL_PROFILE_FORMAT,
    MODEL_REPORT_FORMAT,
    RESULTS_FORMAT,
    DispatchOutcome,
)
from ireetune.database.run_files import check_format, read_json_object
from ireetune.database.store import as_number, as_text
from ireetune.report.deployment import Deployment, deployment_from_report

RESULTS_NAME = "results.json"
MODEL_REPORT_NAME = "report.json"
MODEL_PROFILE_NAME = "profile.json"
PROFILE_RESULTS_NAME = "profile_results.csv"
# The model tuner's note naming the specs it dropped from the linked spec, comma-separated.
DROPPED_NOTE = "dropped specs that slowed the linked model:"


@dataclass(frozen=True)
class Decision:
    """How the run chose its winner: the rule, the speedup and its interval, how to replay it."""

    rule: str
    winner: int | None
    speedup: float | None
    low: float | None
    high: float | None
    basis: str
    replay: str


@dataclass(frozen=True)
class CandidateView:
    """One candidate as the report shows it. Candidate 0 is the compiler's default."""

    candidate_id: int
    status: str
    knobs: tuple[tuple[str, int | str], ...]
    reason: str
    median_ms: float | None
    min_ms: float | None
    max_ms: float | None
    spread: float | None
    speedup: float | None
    speedup_low: float | None
    speedup_high: float | None
    verdict: str

    @property
    def is_baseline(self) -> bool:
        return self.candidate_id == 0


@dataclass(frozen=True)
class DispatchRunView:
    """A dispatch tuning run: its facts, its decision (when recorded) and every candidate."""

    run_dir: Path
    problem: str
    target: str
    devices: tuple[str, ...]
    compiler_version: str
    outcome: str
    baseline_ms: float | None
    best_candidate: int | None
    best_speedup: float | None
    decision: Decision | None
    spec_written: bool
    spec_why: str
    notes: tuple[str, ...]
    candidates: tuple[CandidateView, ...]


@dataclass(frozen=True)
class ModelDispatchView(DispatchOutcome):
    """One dispatch of a model: its time before tuning, the tuned candidate's, and what happened
    (the run's outcome), and whether the selection kept it."""

    selected: bool
    # Whether the dispatch's spec is in the model's final tuned spec: kept in selection, not
    # dropped afterwards as harmful, and a tuned spec written at all.
    in_tuned_spec: bool


@dataclass(frozen=True)
class ModelRunView:
    """A whole-model run: model times, the hot-set profile and the dispatch runs it made."""

    run_dir: Path
    model: str
    target: str
    default_ms: float | None
    tuned_ms: float | None
    speedup: float | None
    tuned_spec: str | None
    decision: Decision | None
    notes: tuple[str, ...]
    model_ms: float | None
    explained_ms: float | None
    dispatches: tuple[ModelDispatchView, ...]
    tuning_runs: tuple[DispatchRunView, ...]
    # The whole deployment (flags, spec, runtime options) against the default and ONNX Runtime.
    deployment: Deployment | None = None


@dataclass(frozen=True)
class ProfileRowView:
    """One profiled dispatch: a shape under one configuration."""

    dispatch: str
    operation: str
    configuration: str
    knobs: tuple[tuple[str, int | str], ...]
    status: str
    verification: str
    runtime_ms: float | None
    gflops: float | None
    peak_gflops: float | None
    speedup_vs_default: float | None
    vendor_library: str
    vendor_gflops: float | None
    vendor_note: str
    reason: str


@dataclass(frozen=True)
class ProfileRunView:
    run_dir: Path
    target: str
    device: str
    rows: tuple[ProfileRowView, ...]


RunView = DispatchRunView | ModelRunView | ProfileRunView


def read_run(run_dir: Path) -> RunView:
    """Read any kind of run folder, told by the files it holds."""
    check_input_folder(run_dir, "run folder")
    if not run_dir.is_dir():
        raise IreetuneError(f"{run_dir} is not a folder")
    if (run_dir / MODEL_REPORT_NAME).is_file():
        return read_model_run(run_dir)
    if (run_dir / RESULTS_NAME).is_file():
        return read_dispatch_run(run_dir)
    if (run_dir / PROFILE_RESULTS_NAME).is_file():
        return read_profile_run(run_dir)
    raise IreetuneError(
        f"{run_dir} holds no {RESULTS_NAME}, {MODEL_REPORT_NAME} or {PROFILE_RESULTS_NAME}: "
        "not a tune-dispatch, tune or profile run folder"
    )


def _load_json(path: Path, expected_format: str) -> dict[str, Any]:
    """Read a run's JSON file; one of another format version is refused in one line."""
    document = read_json_object(path)
    check_format(path, document, expected_format, "file", unversioned=True)
    return document


def _knobs(value: object) -> tuple[tuple[str, int | str], ...]:
    if not isinstance(value, Mapping):
        return ()
    return tuple(
        sorted((str(k), v if isinstance(v, int | str) else str(v)) for k, v in value.items())
    )


def parse_knob_text(text: str) -> tuple[tuple[str, int | str], ...]:
    """Parse `dist_m=64 vec_k=8` (the CSV form of knobs) back into pairs; ints where they parse."""
    pairs: list[tuple[str, int | str]] = []
    for item in text.split():
        name, separator, value = item.partition("=")
        if not separator:
            continue
        pairs.append((name, int(value) if value.lstrip("-").isdigit() else value))
    return tuple(sorted(pairs))


def read_decision(value: object) -> Decision | None:
    """Read the run-level `decision` object, or None when the run did not record one."""
    if not isinstance(value, Mapping):
        return None
    winner = value.get("winner")
    return Decision(
        rule=as_text(value.get("rule")),
        winner=winner if isinstance(winner, int) and not isinstance(winner, bool) else None,
        speedup=as_number(value.get("speedup")),
        low=as_number(value.get("low")),
        high=as_number(value.get("high")),
        basis=as_text(value.get("basis")),
        replay=as_text(value.get("replay")),
    )


def _candidate(entry: Mapping[str, Any]) -> CandidateView:
    identifier = entry.get("candidate_id")
    return CandidateView(
        candidate_id=identifier if isinstance(identifier, int) else -1,
        status=as_text(entry.get("status")) or "unknown",
        knobs=_knobs(entry.get("knobs")),
        reason=as_text(entry.get("reason")),
        median_ms=as_number(entry.get("median_ms")),
        min_ms=as_number(entry.get("min_ms")),
        max_ms=as_number(entry.get("max_ms")),
        spread=as_number(entry.get("spread")),
        speedup=as_number(entry.get("speedup")),
        speedup_low=as_number(entry.get("speedup_low")),
        speedup_high=as_number(entry.get("speedup_high")),
        verdict=as_text(entry.get("verdict")),
    )


def read_dispatch_run(run_dir: Path) -> DispatchRunView:
    """Read a dispatch run's `results.json`, old format or new."""
    info = _load_json(run_dir / RESULTS_NAME, RESULTS_FORMAT)
    raw_candidates = info.get("candidates")
    candidates = tuple(
        sorted(
            (_candidate(c) for c in raw_candidates or () if isinstance(c, Mapping)),
            key=lambda c: c.candidate_id,
        )
    )
    best = info.get("best_candidate")
    spec_exists = (run_dir / "best_spec.mlir").is_file()
    written = info.get("spec_written")
    notes = tuple(as_text(n) for n in info.get("notes") or () if n)
    why = as_text(info.get("why"))
    if not why:
        # Older runs do not say why; the outcome and the notes do.
        outcome = as_text(info.get("outcome"))
        why = (
            f"candidate {best} was verified and beat the default"
            if spec_exists and isinstance(best, int)
            else next((n for n in notes if "spec" in n), f"outcome: {outcome or 'unknown'}")
        )
    devices = info.get("devices")
    return DispatchRunView(
        run_dir=run_dir,
        problem=as_text(info.get("problem")) or run_dir.name,
        target=as_text(info.get("target")),
        devices=tuple(as_text(d) for d in devices) if isinstance(devices, list) else (),
        compiler_version=as_text(info.get("compiler_version")),
        outcome=as_text(info.get("outcome")) or "unknown",
        baseline_ms=as_number(info.get("baseline_ms")),
        best_candidate=best if isinstance(best, int) and not isinstance(best, bool) else None,
        best_speedup=as_number(info.get("best_speedup")),
        decision=read_decision(info.get("decision")),
        spec_written=written if isinstance(written, bool) else spec_exists,
        spec_why=why,
        notes=notes,
        candidates=candidates,
    )


def read_model_run(run_dir: Path) -> ModelRunView:
    """Read a model run's `report.json`, `profile.json` and the dispatch runs under `tuning/`."""
    report = _load_json(run_dir / MODEL_REPORT_NAME, MODEL_REPORT_FORMAT)
    profile = (
        _load_json(run_dir / MODEL_PROFILE_NAME, MODEL_PROFILE_FORMAT)
        if (run_dir / MODEL_PROFILE_NAME).is_file()
        else {}
    )
    selected = {
        as_text(p.get("name")): bool(p.get("selected"))
        for p in profile.get("dispatches") or ()
        if isinstance(p, Mapping)
    }
    notes = tuple(as_text(n) for n in report.get("notes") or () if n)
    dropped = {
        name.strip()
        for note in notes
        if note.startswith(DROPPED_NOTE)
        for name in note.removeprefix(DROPPED_NOTE).split(",")
    }
    tuned_spec = as_text(report.get("tuned_spec")) or None
    dispatches = tuple(
        ModelDispatchView(
            name=as_text(d.get("name")),
            problem=as_text(d.get("problem")),
            invocations=int(d.get("invocations") or 0),
            share=as_number(d.get("share")) or 0.0,
            default_ms=as_number(d.get("default_ms")),
            tuned_ms=as_number(d.get("tuned_ms")),
            kept_spec=as_text(d.get("kept_spec")) or None,
            selected=selected.get(as_text(d.get("name")), True),
            note=as_text(d.get("note")),
            in_tuned_spec=bool(
                tuned_spec and d.get("kept_spec") and as_text(d.get("name")) not in dropped
            ),
        )
        for d in report.get("dispatches") or ()
        if isinstance(d, Mapping)
    )
    tuning_dir = run_dir / "tuning"
    tuning_runs = (
        tuple(
            read_dispatch_run(folder)
            for folder in sorted(tuning_dir.iterdir())
            if (folder / RESULTS_NAME).is_file()
        )
        if tuning_dir.is_dir()
        else ()
    )
    return ModelRunView(
        run_dir=run_dir,
        model=as_text(report.get("model")),
        target=as_text(report.get("target")),
        default_ms=as_number(report.get("default_ms")),
        tuned_ms=as_number(report.get("tuned_ms")),
        speedup=as_number(report.get("speedup")),
        tuned_spec=tuned_spec,
        decision=read_decision(report.get("decision")),
        notes=notes,
        model_ms=as_number(profile.get("model_ms")),
        explained_ms=as_number(profile.get("explained_ms")),
        dispatches=dispatches,
        tuning_runs=tuning_runs,
        deployment=deployment_from_report(report),
    )


def _csv_number(text: str | None) -> float | None:
    try:
        return as_number(float(text)) if text else None
    except ValueError:
        return None


def read_profile_run(run_dir: Path) -> ProfileRunView:
    """Read a profiler run's `profile_results.csv` (the columns of DispatchResult)."""
    path = run_dir / PROFILE_RESULTS_NAME
    with path.open(newline="") as stream:
        raw_rows = list(csv.DictReader(stream))
    rows = []
    for row in raw_rows:
        runtime_ms = _csv_number(row.get("runtime_ms"))
        gflops = _csv_number(row.get("gflops"))
        peak_percent = _csv_number(row.get("peak_percent"))
        vendor_ms = _csv_number(row.get("vendor_ms"))
        # The CSV holds the vendor's time and our share of the peak; both become GFLOP/s here.
        vendor_gflops = (
            gflops * runtime_ms / vendor_ms if gflops and runtime_ms and vendor_ms else None
        )
        peak_gflops = gflops * 100.0 / peak_percent if gflops and peak_percent else None
        rows.append(
            ProfileRowView(
                dispatch=row.get("dispatch") or "",
                operation=row.get("operation") or "",
                configuration=row.get("configuration") or "",
                knobs=parse_knob_text(row.get("knobs") or ""),
                status=row.get("status") or "",
                verification=row.get("verification") or "",
                runtime_ms=runtime_ms,
                gflops=gflops,
                peak_gflops=peak_gflops,
                speedup_vs_default=_csv_number(row.get("speedup_vs_default")),
                vendor_library=row.get("vendor_library") or "",
                vendor_gflops=vendor_gflops,
                vendor_note=row.get("vendor_note") or "",
                reason=row.get("reason") or "",
            )
        )
    manifest = (
        read_json_object(run_dir / "manifest.json") if (run_dir / "manifest.json").is_file() else {}
    )
    return ProfileRunView(
        run_dir=run_dir,
        target=as_text(manifest.get("target")),
        device=as_text(manifest.get("device")),
        rows=tuple(rows),
    )
