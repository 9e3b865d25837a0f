"""The HTML report of a run folder: one self-contained page, verdict first, plots inline as SVG.

The page loads nothing: no script, no stylesheet, no font, no image from anywhere else, so it
opens the same offline, from a mail attachment or from a CI artifact.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path

from matplotlib.figure import Figure

from ireetune.output_paths import write_output
from ireetune.report.plots import (
    MAX_CANDIDATE_ROWS,
    KnobPoint,
    compute_model_shares,
    plot_candidate_times,
    plot_convergence,
    plot_knob_effects,
    plot_model_shares,
    plot_profile_gflops,
    render_svg,
    status_colour,
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

REPORT_NAME = "report.html"

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto;
       max-width: 1100px; padding: 0 1em; color: #222; line-height: 1.4; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; }
h2 { font-size: 1.2em; border-bottom: 1px solid #ddd; padding-bottom: 0.2em; margin-top: 1.8em; }
h3 { font-size: 1.05em; margin-top: 1.4em; }
.subtitle { color: #666; margin-top: 0; }
.verdict { border-left: 6px solid #999; background: #f6f6f6; padding: 0.8em 1.2em; }
.verdict.good { border-color: #1a9850; } .verdict.neutral { border-color: #999; }
.verdict.bad { border-color: #d73027; }
.headline { font-size: 1.35em; font-weight: 600; margin: 0 0 0.4em 0; }
pre { background: #272822; color: #f8f8f2; padding: 0.6em 0.8em; overflow-x: auto;
      border-radius: 4px; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border-bottom: 1px solid #e4e4e4; padding: 0.25em 0.6em; text-align: left;
         vertical-align: top; }
th { background: #f0f0f0; white-space: nowrap; }
td:last-child { overflow-wrap: anywhere; min-width: 12em; } td.number { text-align: right; font-variant-numeric: tabular-nums;
                                        white-space: nowrap; }
.chip { display: inline-block; padding: 0 0.5em; border-radius: 0.8em; color: white;
        font-size: 0.85em; white-space: nowrap; }
figure.plot { margin: 0.8em 0; } figure.plot svg { max-width: 100%; height: auto; }
figcaption { color: #555; font-size: 0.85em; }
.empty { color: #777; font-style: italic; }
"""


def escape_html(value: object) -> str:
    return html.escape(str(value), quote=True)


def _format_ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.4g} ms"


def _format_ratio(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}×"


def render_figure(svg: str | None, caption: str, empty: str) -> str:
    if svg is None:
        return f'<p class="empty">{escape_html(empty)}</p>'
    return f'<figure class="plot">{svg}<figcaption>{escape_html(caption)}</figcaption></figure>'


def figure_svg(figure: Figure | None) -> str | None:
    return None if figure is None else render_svg(figure)


def _chip(status: str) -> str:

    colour = status_colour(status)
    return f'<span class="chip" style="background:{colour}">{escape_html(status)}</span>'


def render_table(header: Sequence[str], rows: Iterable[Sequence[str]], numeric: set[int]) -> str:
    """Write a table; cells are already HTML (escaped by the caller)."""
    head = "".join(f"<th>{escape_html(h)}</th>" for h in header)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="number">{cell}</td>' if index in numeric else f"<td>{cell}</td>"
            for index, cell in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_page(title: str, subtitle: str, sections: Sequence[str]) -> str:
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        # Forbid every load from elsewhere: the page must be complete in itself.
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; img-src data:\">"
        f"<title>{escape_html(title)}</title><style>{_STYLE}</style></head><body>"
        f'<h1>{escape_html(title)}</h1><p class="subtitle">{escape_html(subtitle)}</p>'
        + "".join(sections)
        + "</body></html>\n"
    )


def _interval(low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return ""
    return f" (interval {low:.3f}×–{high:.3f}×)"


def _decision_lines(decision: Decision | None) -> list[str]:
    if decision is None:
        return []
    lines = []
    if decision.rule:
        lines.append(f"<p>Rule: {escape_html(decision.rule)}</p>")
    if decision.replay:
        lines.append(f"<p>Replay the decision:</p><pre>{escape_html(decision.replay)}</pre>")
    return lines


# How the run's decision was measured, as the verdict says it.
_BASIS_TEXT = {
    "dispatch": "decided on dispatch-level times",
    "real-input": "decided on real inputs, timed side by side with the default",
}


def _winner(run: DispatchRunView) -> CandidateView | None:
    winner = run.decision.winner if run.decision is not None else run.best_candidate
    return next((c for c in run.candidates if c.candidate_id == winner), None)


def _dispatch_verdict(run: DispatchRunView) -> str:
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
            ("neutral"),
        )
    spec = (
        f"Spec written: <b>yes</b> ({escape_html(run.run_dir / 'best_spec.mlir')}). "
        if run.spec_written
        else "Spec written: <b>no</b>. "
    ) + escape_html(run.spec_why[:1].upper() + run.spec_why[1:])
    parts = [f'<p class="headline">{escape_html(headline)}</p>', f"<p>{spec}</p>"]
    parts.extend(_decision_lines(decision))
    if winner is not None and winner.knobs:
        knobs = " ".join(f"{k}={v}" for k, v in winner.knobs)
        parts.append(f"<p>Winning knobs: <code>{escape_html(knobs)}</code></p>")
    if run.notes:
        parts.append("<ul>" + "".join(f"<li>{escape_html(n)}</li>" for n in run.notes) + "</ul>")
    return f'<section class="verdict {tone}">{"".join(parts)}</section>'


def _candidate_table(candidates: Sequence[CandidateView]) -> str:
    rows = [
        [
            "default" if c.is_baseline else str(c.candidate_id),
            _chip(
                "default" if c.is_baseline and c.status in ("measured", "compiled") else c.status
            ),
            escape_html(_format_ms(c.median_ms)),
            escape_html("–" if c.spread is None else f"{c.spread:.0%}"),
            escape_html(_format_ratio(c.speedup)),
            escape_html(
                f"{c.speedup_low:.3f}–{c.speedup_high:.3f}"
                if c.speedup_low is not None and c.speedup_high is not None
                else "–"
            ),
            escape_html(c.verdict),
            f"<code>{escape_html(' '.join(f'{k}={v}' for k, v in c.knobs))}</code>",
            escape_html(c.reason),
        ]
        for c in candidates
    ]
    return render_table(
        ["id", "status", "median", "spread", "speedup", "interval", "verdict", "knobs", "reason"],
        rows,
        {2, 3, 4, 5},
    )


def _dispatch_sections(run: DispatchRunView, heading_level: int = 2) -> list[str]:
    """Write the convergence, candidate-time and knob sections of one dispatch run."""

    tag = f"h{heading_level}"
    winner = run.decision.winner if run.decision is not None else run.best_candidate
    points = [
        KnobPoint(c.knobs, c.speedup, c.status)
        for c in run.candidates
        if not c.is_baseline and c.speedup is not None
    ]
    return [
        f"<{tag}>Is the search converging?</{tag}>",
        render_figure(
            figure_svg(plot_convergence(run.candidates, winner)),
            "Each measured candidate's speedup over the default (dots, coloured by status; "
            "whiskers: its interval where recorded) and the best so far (line). A line still "
            "climbing at the right end says more candidates may help.",
            "No candidate was measured.",
        ),
        f"<{tag}>Every candidate against the default</{tag}>",
        render_figure(
            figure_svg(plot_candidate_times(run.candidates, winner)),
            "Median time per call; whiskers span the fastest to the slowest repetition. The "
            "dashed line is the default's median, the grey band its spread. At most the "
            f"{MAX_CANDIDATE_ROWS} fastest candidates are drawn; the table lists them all.",
            "No candidate has a time.",
        ),
        f"<{tag}>What the search learned: knobs against speedup</{tag}>",
        render_figure(
            figure_svg(plot_knob_effects(points, "speedup (x)")),
            "One panel per knob that varied: the speedup each measured candidate reached.",
            "No knob varied among the measured candidates.",
        ),
        f"<{tag}>Candidates</{tag}>",
        _candidate_table(run.candidates),
    ]


def render_dispatch_report(run: DispatchRunView) -> str:
    counts: dict[str, int] = {}
    for candidate in run.candidates:
        if not candidate.is_baseline:
            counts[candidate.status] = counts.get(candidate.status, 0) + 1
    facts = render_table(
        ["problem", "target", "devices", "compiler", "default", "candidates"],
        [
            [
                escape_html(run.problem),
                escape_html(run.target),
                escape_html(", ".join(run.devices)),
                escape_html(run.compiler_version),
                escape_html(_format_ms(run.baseline_ms)),
                " ".join(f"{_chip(s)} {n}" for s, n in counts.items()),
            ]
        ],
        set(),
    )
    return render_page(
        f"ireetune: {run.problem}",
        f"dispatch tuning run {run.run_dir}",
        [_dispatch_verdict(run), "<h2>The run</h2>", facts, *_dispatch_sections(run)],
    )


def _model_verdict(run: ModelRunView) -> str:
    if run.speedup is not None and run.tuned_spec is not None:
        headline = (
            f"The model runs {run.speedup:.3f}× faster with the tuned spec: "
            f"{_format_ms(run.default_ms)} → {_format_ms(run.tuned_ms)}"
        )
        if run.decision is not None:
            headline += _interval(run.decision.low, run.decision.high)
        tone = "good" if run.speedup > 1.0 else "neutral"
        spec = f"Spec written: <b>yes</b> ({escape_html(run.tuned_spec)})."
    else:
        headline = f"The model keeps the compiler's default ({_format_ms(run.default_ms)})"
        tone = "neutral"
        spec = "Spec written: <b>no</b>. " + escape_html(
            next((n for n in run.notes if "spec" in n), "no dispatch spec made the model faster")
        )
    parts = [f'<p class="headline">{escape_html(headline)}</p>', f"<p>{spec}</p>"]
    parts.extend(_decision_lines(run.decision))
    if run.notes:
        parts.append("<ul>" + "".join(f"<li>{escape_html(n)}</li>" for n in run.notes) + "</ul>")
    return f'<section class="verdict {tone}">{"".join(parts)}</section>'


def _untuned_reason(dispatch: ModelDispatchView, run: ModelRunView) -> str:
    """Say why a dispatch kept the compiler's default: unsupported, not selected, or its note."""
    if dispatch.problem.startswith("not tunable"):
        return dispatch.problem
    if not dispatch.selected or dispatch.note == "not selected":
        return "not selected: below the coverage or past --max-dispatches"
    if dispatch.kept_spec is not None:
        return (
            "its spec was dropped: it slowed the linked model"
            if run.tuned_spec is not None or any(dispatch.name in n for n in run.notes)
            else "no tuned spec written: the linked spec did not make the model faster"
        )
    return dispatch.note or "not tuned"


def render_model_report(run: ModelRunView) -> str:

    untuned: dict[str, float] = {}
    for dispatch in run.dispatches:
        if not dispatch.in_tuned_spec:
            reason = _untuned_reason(dispatch, run)
            untuned[reason] = untuned.get(reason, 0.0) + dispatch.share
    dispatch_rows = [
        [
            escape_html(d.name),
            escape_html(d.problem),
            str(d.invocations),
            f"{d.share:.1%}",
            escape_html(_format_ms(d.default_ms)),
            escape_html(_format_ms(d.tuned_ms)),
            "yes" if d.in_tuned_spec else "no",
            escape_html(d.note),
        ]
        for d in run.dispatches
    ]
    sections = [
        _model_verdict(run),
        "<h2>Where the model's time goes</h2>",
        render_figure(
            figure_svg(plot_model_shares(compute_model_shares(run))),
            "Each dispatch's share of model time before tuning (profiled) and after (estimated "
            "from the kept candidates' dispatch-level times). Hatched: the compiler's default kept; "
            "grey: time outside any dispatch.",
            "The run has no dispatch profile.",
        ),
        "<h3>Time left to the compiler's default, by reason</h3>",
        render_table(
            ["reason", "share of model time"],
            [[escape_html(r), f"{s:.1%}"] for r, s in sorted(untuned.items(), key=lambda i: -i[1])],
            {1},
        )
        if untuned
        else '<p class="empty">Every dispatch got a spec.</p>',
        "<h3>Dispatches</h3>",
        render_table(
            ["dispatch", "problem", "runs", "share", "default", "tuned", "spec kept", "note"],
            dispatch_rows,
            {2, 3, 4, 5},
        ),
    ]
    for tuning_run in run.tuning_runs:
        sections.append(f"<h2>Tuning {escape_html(tuning_run.problem)}</h2>")
        best = (
            f"best {_format_ratio(tuning_run.best_speedup)} at dispatch level"
            if tuning_run.best_speedup is not None
            else "no candidate won at dispatch level"
        )
        sections.append(f"<p>{escape_html(best)}; {escape_html(tuning_run.spec_why)}</p>")
        sections.extend(_dispatch_sections(tuning_run, heading_level=3))
    return render_page(
        f"ireetune: {Path(run.model).name or run.run_dir.name}",
        f"model tuning run {run.run_dir} (target {run.target})",
        sections,
    )


def render_profile_report(run: ProfileRunView) -> str:

    operations = list(dict.fromkeys(r.operation for r in run.rows))
    wrong = [r for r in run.rows if r.verification not in ("SUCCESS", "")]
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
                f"<li>{escape_html(operation)}: best {escape_html(best.configuration)} "
                f"{escape_html(_format_ratio(best.speedup_vs_default))} vs the default</li>"
            )
    headline = f"{len(operations)} shapes, {len(run.rows)} dispatches profiled" + (
        f"; {len(wrong)} gave wrong results" if wrong else "; every checked output was right"
    )
    verdict = (
        f'<section class="verdict {"bad" if wrong else "neutral"}">'
        f'<p class="headline">{escape_html(headline)}</p>'
        + (f"<ul>{''.join(best_lines)}</ul>" if best_lines else "")
        + "</section>"
    )
    points = [
        KnobPoint(
            r.knobs, r.speedup_vs_default, "verified" if r.verification == "SUCCESS" else "wrong"
        )
        for r in run.rows
        if r.configuration != "default" and r.speedup_vs_default is not None
    ]
    rows = [
        [
            escape_html(r.operation),
            escape_html(r.configuration),
            _chip("verified" if r.verification == "SUCCESS" else r.verification.lower() or "-"),
            escape_html(_format_ms(r.runtime_ms)),
            escape_html("–" if r.gflops is None else f"{r.gflops:.1f}"),
            escape_html("–" if r.peak_gflops is None else f"{r.peak_gflops:.0f}"),
            escape_html(_format_ratio(r.speedup_vs_default)),
            escape_html(
                f"{r.vendor_gflops:.1f}" if r.vendor_gflops is not None else f"– {r.vendor_note}"
            ),
            escape_html(r.reason),
        ]
        for r in run.rows
    ]
    sections = [
        verdict,
        "<h2>GFLOP/s per shape and configuration</h2>",
        render_figure(
            figure_svg(plot_profile_gflops(run.rows)),
            "Squares: the compiler's default; dots: the configurations profiled; diamonds: the "
            "vendor library where it was timed; dashed: the peak where given (--peak-gflops).",
            "Nothing was profiled.",
        ),
        "<h2>What the configurations show: knobs against speedup</h2>",
        render_figure(
            figure_svg(plot_knob_effects(points, "speedup vs default (x)")),
            "One panel per knob that varied: the speedup over the default each configuration "
            "reached on its shape.",
            "No knob varied among the configurations profiled.",
        ),
        "<h2>Dispatches</h2>",
        render_table(
            [
                "operation",
                "configuration",
                "verification",
                "runtime",
                "GFLOP/s",
                "peak",
                "vs default",
                "vendor GFLOP/s",
                "reason",
            ],
            rows,
            {3, 4, 5, 6},
        ),
    ]
    return render_page(
        "ireetune profile",
        f"profiler run {run.run_dir} (target {run.target}, device {run.device})",
        sections,
    )


def render_html_report(run: RunView) -> str:
    """Render any run's report page."""
    if isinstance(run, DispatchRunView):
        return render_dispatch_report(run)
    if isinstance(run, ModelRunView):
        return render_model_report(run)
    return render_profile_report(run)


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
