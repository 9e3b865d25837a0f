"""The HTML report of a run folder: one self-contained page, verdict first, plots inline as SVG.

The page loads nothing: no script, no stylesheet, no font, no image from anywhere else, so it
opens the same offline, from a mail attachment or from a CI artifact. Each kind of run has a typed
view built here (what the page says, formatted) and a template that holds its markup
(`report/templates/`, rendered by `report/html_page.py`, which escapes every value).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ireetune.core.candidate import format_knobs
from ireetune.core.output_paths import write_output
from ireetune.report.deployment import describe_headline, describe_part
from ireetune.report.html_page import Chip, Plot, build_chip, build_plot, render_page
from ireetune.report.plots import (
    MAX_CANDIDATE_ROWS,
    KnobPoint,
    compute_model_shares,
    plot_candidate_times,
    plot_convergence,
    plot_knob_effects,
    plot_model_shares,
    plot_profile_gflops,
)
from ireetune.report.run_view import (
    CandidateView,
    Decision,
    DispatchRunView,
    ModelDispatchView,
    ModelRunView,
    ProfileRunView,
    RunView,
    read_run,
)

logger = logging.getLogger(__name__)

# The model flow's note on a dispatch it skipped because its share cannot clear the model rule
# (model/gate.py, above this layer: the text is repeated here, as the dropped-spec note is).
SMALL_SHARE_NOTE = "not tuned: too small a share of the model"

REPORT_NAME = "report.html"


@dataclass(frozen=True)
class SpecLine:
    """Whether the run wrote a spec, where (empty: not shown) and why."""

    written: bool
    path: str
    why: str


@dataclass(frozen=True)
class Verdict:
    """The section that opens a page; `tone` is `good`, `neutral` or `bad`."""

    tone: str
    headline: str
    spec: SpecLine | None
    # The recorded decision, for its rule and its replay command.
    decision: Decision | None
    knobs: str
    notes: tuple[str, ...]
    # A model's deployment, part by part (flags, spec, runtime options, ONNX Runtime).
    parts: tuple[str, ...] = ()


@dataclass(frozen=True)
class CandidateRow:
    label: str
    status: Chip
    median: str
    spread: str
    speedup: str
    interval: str
    verdict: str
    knobs: str
    reason: str


@dataclass(frozen=True)
class SearchView:
    """What the search of one dispatch did: three plots and the table of its candidates."""

    convergence: Plot
    candidate_times: Plot
    knob_effects: Plot
    candidates: tuple[CandidateRow, ...]


@dataclass(frozen=True)
class DispatchPage:
    title: str
    subtitle: str
    verdict: Verdict
    problem: str
    target: str
    devices: str
    compiler_version: str
    baseline: str
    status_counts: tuple[tuple[Chip, int], ...]
    search: SearchView


@dataclass(frozen=True)
class UntunedRow:
    """The dispatches that kept the default for one reason: the reason with their names taken
    out (`NAME_MARK` where they stood; as written when one dispatch has it), their summed share,
    and each dispatch's name with the problem names its reason held."""

    reason: str
    share: str
    dispatches: tuple[str, ...]


@dataclass(frozen=True)
class ModelDispatchRow:
    name: str
    problem: str
    runs: str
    share: str
    default: str
    tuned: str
    spec_kept: str
    note: str


@dataclass(frozen=True)
class TuningRunSection:
    problem: str
    summary: str
    search: SearchView


@dataclass(frozen=True)
class ModelPage:
    title: str
    subtitle: str
    verdict: Verdict
    shares: Plot
    untuned: tuple[UntunedRow, ...]
    dispatches: tuple[ModelDispatchRow, ...]
    tuning_runs: tuple[TuningRunSection, ...]


@dataclass(frozen=True)
class ProfileRow:
    operation: str
    configuration: str
    verification: Chip
    runtime: str
    gflops: str
    peak: str
    vs_default: str
    vendor: str
    reason: str


@dataclass(frozen=True)
class ProfilePage:
    title: str
    subtitle: str
    verdict: Verdict
    gflops: Plot
    knob_effects: Plot
    rows: tuple[ProfileRow, ...]


def _format_ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.4g} ms"


def _format_ratio(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}×"


def _interval(low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return ""
    return f" (interval {low:.3f}×–{high:.3f}×)"


# How the run's decision was measured, as the verdict says it.
_BASIS_TEXT = {
    "dispatch": "decided on dispatch-level times",
    "real-input": "decided on real inputs, timed side by side with the default",
}


def _winner(run: DispatchRunView) -> CandidateView | None:
    winner = run.decision.winner if run.decision is not None else run.best_candidate
    return next((c for c in run.candidates if c.candidate_id == winner), None)


def build_dispatch_verdict(run: DispatchRunView) -> Verdict:
    decision = run.decision
    winner = _winner(run)
    speedup = decision.speedup if decision is not None else run.best_speedup
    low = decision.low if decision is not None else None
    high = decision.high if decision is not None else None
    if low is None and winner is not None:
        low, high = winner.speedup_low, winner.speedup_high
    if winner is not None and speedup is not None:
        basis = (
            f", {_BASIS_TEXT.get(decision.basis, 'decided on ' + decision.basis)}"
            if decision and decision.basis
            else ""
        )
        headline = (
            f"{speedup:.3f}× faster than the compiler's default{_interval(low, high)}: "
            f"candidate {winner.candidate_id}{basis}"
        )
        tone = "good" if speedup > 1.0 else "neutral"
    elif run.outcome == "failed":
        headline, tone = "The run failed before it found a winner", "bad"
    else:
        headline, tone = (
            "The compiler's default stays: no candidate beat it beyond the noise",
            "neutral",
        )
    spec = SpecLine(
        written=run.spec_written,
        path=str(run.run_dir / "best_spec.mlir") if run.spec_written else "",
        why=run.spec_why[:1].upper() + run.spec_why[1:],
    )
    return Verdict(
        tone=tone,
        headline=headline,
        spec=spec,
        decision=decision,
        knobs=format_knobs(winner.knobs) if winner is not None else "",
        notes=run.notes,
    )


def _candidate_row(candidate: CandidateView) -> CandidateRow:
    low, high = candidate.speedup_low, candidate.speedup_high
    status = candidate.status
    return CandidateRow(
        label="default" if candidate.is_baseline else str(candidate.candidate_id),
        status=build_chip(
            "default" if candidate.is_baseline and status in ("measured", "compiled") else status
        ),
        median=_format_ms(candidate.median_ms),
        spread="–" if candidate.spread is None else f"{candidate.spread:.0%}",
        speedup=_format_ratio(candidate.speedup),
        interval=f"{low:.3f}–{high:.3f}" if low is not None and high is not None else "–",
        verdict=candidate.verdict,
        knobs=format_knobs(candidate.knobs),
        reason=candidate.reason,
    )


def build_search_view(run: DispatchRunView) -> SearchView:
    """Draw the convergence, candidate-time and knob plots of one dispatch run; table it."""
    winner = run.decision.winner if run.decision is not None else run.best_candidate
    points = [
        KnobPoint(c.knobs, c.speedup, c.status)
        for c in run.candidates
        if not c.is_baseline and c.speedup is not None
    ]
    return SearchView(
        convergence=build_plot(
            plot_convergence(run.candidates, winner),
            "Each measured candidate's speedup over the default (dots, coloured by status; "
            "whiskers: its interval where recorded) and the best so far (line). A line still "
            "climbing at the right end says more candidates may help.",
            "No candidate was measured.",
        ),
        candidate_times=build_plot(
            plot_candidate_times(run.candidates, winner),
            "Median time per call; whiskers span the fastest to the slowest repetition. The "
            "dashed line is the default's median, the grey band its spread. At most the "
            f"{MAX_CANDIDATE_ROWS} fastest candidates are drawn; the table lists them all.",
            "No candidate has a time.",
        ),
        knob_effects=build_plot(
            plot_knob_effects(points, "speedup (x)"),
            "One panel per knob that varied: the speedup each measured candidate reached.",
            "No knob varied among the measured candidates.",
        ),
        candidates=tuple(_candidate_row(c) for c in run.candidates),
    )


def build_dispatch_page(run: DispatchRunView) -> DispatchPage:
    counts: dict[str, int] = {}
    for candidate in run.candidates:
        if not candidate.is_baseline:
            counts[candidate.status] = counts.get(candidate.status, 0) + 1
    return DispatchPage(
        title=f"ireetune: {run.problem}",
        subtitle=f"dispatch tuning run {run.run_dir}",
        verdict=build_dispatch_verdict(run),
        problem=run.problem,
        target=run.target,
        devices=", ".join(run.devices),
        compiler_version=run.compiler_version,
        baseline=_format_ms(run.baseline_ms),
        status_counts=tuple((build_chip(s), n) for s, n in counts.items()),
        search=build_search_view(run),
    )


def build_model_verdict(run: ModelRunView) -> Verdict:
    if run.tuned_spec is not None:
        spec = SpecLine(written=True, path=run.tuned_spec, why="")
    else:
        why = next((n for n in run.notes if "spec" in n), "no dispatch spec made the model faster")
        spec = SpecLine(written=False, path="", why=why)
    deployment = run.deployment
    parts: tuple[str, ...] = ()
    if deployment is not None:
        # The whole deployment first (flags, spec and runtime options together), then its parts.
        parts = tuple(describe_part(part) for part in deployment.parts)
        if deployment.onnxruntime is not None:
            parts += (f"ONNX Runtime: {deployment.onnxruntime.summary}",)
        headline = describe_headline(deployment)
        kept_faster = deployment.anything_kept and deployment.speedup.value > 1.0
        tone = "good" if kept_faster else "neutral"
    elif run.speedup is not None and run.tuned_spec is not None:
        headline = (
            f"The model runs {run.speedup:.3f}× faster with the tuned spec: "
            f"{_format_ms(run.default_ms)} → {_format_ms(run.tuned_ms)}"
        )
        if run.decision is not None:
            headline += _interval(run.decision.low, run.decision.high)
        tone = "good" if run.speedup > 1.0 else "neutral"
    else:
        headline = f"The model keeps the compiler's default ({_format_ms(run.default_ms)})"
        tone = "neutral"
    return Verdict(
        tone=tone,
        headline=headline,
        spec=spec,
        decision=run.decision,
        knobs="",
        notes=run.notes,
        parts=parts,
    )


def _untuned_reason(dispatch: ModelDispatchView, run: ModelRunView) -> str:
    """Say why a dispatch kept the compiler's default: unsupported, not selected, or its note."""
    if dispatch.problem.startswith("not tunable"):
        return dispatch.problem
    if dispatch.note.startswith(SMALL_SHARE_NOTE):
        return f"{SMALL_SHARE_NOTE}: tuning it could not clear the model rule"
    if dispatch.note.startswith("not selected:"):
        return dispatch.note
    if not dispatch.selected or dispatch.note == "not selected":
        return "not selected: below the coverage or past --max-dispatches"
    if dispatch.kept_spec is not None:
        return (
            "its spec was dropped: it slowed the linked model"
            if run.tuned_spec is not None or any(dispatch.name in n for n in run.notes)
            else "no tuned spec written: the linked spec did not make the model faster"
        )
    return dispatch.note or "not tuned"


def _tuning_run_section(run: DispatchRunView) -> TuningRunSection:
    best = (
        f"best {_format_ratio(run.best_speedup)} at dispatch level"
        if run.best_speedup is not None
        else "no candidate won at dispatch level"
    )
    return TuningRunSection(run.problem, f"{best}; {run.spec_why}", build_search_view(run))


# A word of a reason that names one problem: a problem's signature or a type with its shape
# (`mmt4d_1x64x48x16x16x1_f32_f32_f32`, `tensor<1x64xf32>`), or the dispatch's name.
_SHAPED_WORD = re.compile(r"[\w<>.]*\d+x\d+[\w<>.]*")
NAME_MARK = "…"


def group_untuned(dispatches: Sequence[ModelDispatchView], run: ModelRunView) -> list[UntunedRow]:
    """Group the dispatches that kept the default by their reason once the names in it (their
    problem's, their own) are taken out, largest share first: a reason that names its problem
    (a data-tiled matmul's) is one row for all the dispatches that give it."""
    groups: dict[str, list[tuple[ModelDispatchView, str]]] = {}
    for dispatch in dispatches:
        reason = _untuned_reason(dispatch, run)
        named = reason.replace(dispatch.name, NAME_MARK) if dispatch.name else reason
        groups.setdefault(_SHAPED_WORD.sub(NAME_MARK, named), []).append((dispatch, reason))
    ordered = sorted(groups.items(), key=lambda group: -sum(d.share for d, _ in group[1]))
    return [
        UntunedRow(
            members[0][1] if len(members) == 1 else pattern,
            f"{sum(d.share for d, _ in members):.1%}",
            tuple(" ".join([d.name, *_SHAPED_WORD.findall(reason)]) for d, reason in members),
        )
        for pattern, members in ordered
    ]


def build_model_page(run: ModelRunView) -> ModelPage:
    untuned = group_untuned([d for d in run.dispatches if not d.in_tuned_spec], run)
    return ModelPage(
        title=f"ireetune: {Path(run.model).name or run.run_dir.name}",
        subtitle=f"model tuning run {run.run_dir} (target {run.target})",
        verdict=build_model_verdict(run),
        shares=build_plot(
            plot_model_shares(compute_model_shares(run)),
            "Each dispatch's share of model time before tuning (profiled) and after (estimated "
            "from the kept candidates' dispatch-level times). Hatched: the compiler's default kept; "
            "grey: time outside any dispatch.",
            "The run has no dispatch profile.",
        ),
        untuned=tuple(untuned),
        dispatches=tuple(
            ModelDispatchRow(
                name=d.name,
                problem=d.problem,
                runs=str(d.invocations),
                share=f"{d.share:.1%}",
                default=_format_ms(d.default_ms),
                tuned=_format_ms(d.tuned_ms),
                spec_kept="yes" if d.in_tuned_spec else "no",
                note=d.note,
            )
            for d in run.dispatches
        ),
        tuning_runs=tuple(_tuning_run_section(r) for r in run.tuning_runs),
    )


def profile_check_status(verification: str) -> str:
    """Name a profiled dispatch's check as a candidate's status: `verified`, `wrong` (compared
    and different: the profiler's FAILED), `unverified` (not compared: "Not verified") or ""."""
    return {"SUCCESS": "verified", "FAILED": "wrong", "": ""}.get(verification, "unverified")


def build_profile_page(run: ProfileRunView) -> ProfilePage:
    operations = list(dict.fromkeys(r.operation for r in run.rows))
    wrong = [r for r in run.rows if profile_check_status(r.verification) == "wrong"]
    unverified = [r for r in run.rows if profile_check_status(r.verification) == "unverified"]
    best_lines = []
    for operation in operations:
        configs = [
            r
            for r in run.rows
            if r.operation == operation
            and r.configuration != "default"
            and r.speedup_vs_default is not None
            and r.verification in ("SUCCESS", "")
        ]
        if configs:
            best = max(configs, key=lambda r: r.speedup_vs_default or 0.0)
            best_lines.append(
                f"{operation}: best {best.configuration} "
                f"{_format_ratio(best.speedup_vs_default)} vs the default"
            )
    headline = (
        f"{len(operations)} shapes, {len(run.rows)} dispatches profiled"
        + (f"; {len(wrong)} gave wrong results" if wrong else "; every checked output was right")
        + (f"; {len(unverified)} not checked" if unverified else "")
    )
    points = [
        KnobPoint(r.knobs, r.speedup_vs_default, profile_check_status(r.verification) or "measured")
        for r in run.rows
        if r.configuration != "default" and r.speedup_vs_default is not None
    ]
    return ProfilePage(
        title="ireetune profile",
        subtitle=f"profiler run {run.run_dir} (target {run.target}, device {run.device})",
        verdict=Verdict(
            tone="bad" if wrong else "neutral",
            headline=headline,
            spec=None,
            decision=None,
            knobs="",
            notes=tuple(best_lines),
        ),
        gflops=build_plot(
            plot_profile_gflops(run.rows),
            "Squares: the compiler's default; dots: the configurations profiled; diamonds: the "
            "vendor library where it was timed; dashed: the peak where given (--peak-gflops).",
            "Nothing was profiled.",
        ),
        knob_effects=build_plot(
            plot_knob_effects(points, "speedup vs default (x)"),
            "One panel per knob that varied: the speedup over the default each configuration "
            "reached on its shape.",
            "No knob varied among the configurations profiled.",
        ),
        rows=tuple(
            ProfileRow(
                operation=r.operation,
                configuration=r.configuration,
                verification=build_chip(profile_check_status(r.verification) or "-"),
                runtime=_format_ms(r.runtime_ms),
                gflops="–" if r.gflops is None else f"{r.gflops:.1f}",
                peak="–" if r.peak_gflops is None else f"{r.peak_gflops:.0f}",
                vs_default=_format_ratio(r.speedup_vs_default),
                vendor=(
                    f"{r.vendor_gflops:.1f}"
                    if r.vendor_gflops is not None
                    else f"– {r.vendor_note}"
                ),
                reason=r.reason,
            )
            for r in run.rows
        ),
    )


def render_html_report(run: RunView) -> str:
    """Render any run's report page."""
    if isinstance(run, DispatchRunView):
        return render_page("dispatch.html", build_dispatch_page(run))
    if isinstance(run, ModelRunView):
        return render_page("model.html", build_model_page(run))
    return render_page("profile.html", build_profile_page(run))


def write_html_report(run_dir: Path, output: Path | None = None) -> Path:
    """Read `run_dir` and write its report (default `run_dir/report.html`); return the path."""
    path = output if output is not None else run_dir / REPORT_NAME
    write_output(path, render_html_report(read_run(run_dir)))
    return path


def try_write_html_report(run_dir: Path) -> Path | None:
    """Write the report at the end of a run; a failure to draw it is a warning, never an error.

    The tuning result is already on disk when this runs, so nothing the report does may turn a
    finished run into a failed one.
    """
    try:
        return write_html_report(run_dir)
    except Exception as error:  # Any failure here must leave the finished run standing.
        logger.warning("could not write the HTML report of %s: %s", run_dir, error)
        return None
