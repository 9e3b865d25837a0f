"""The report's plots, drawn with Matplotlib and rendered to inline SVG text.

Each `plot_*` function takes typed records and returns a Figure, or None when there is nothing to
draw (the page then says so in words rather than showing an empty frame). Figures are made with
`matplotlib.figure.Figure` directly, never through pyplot, so no global state or GUI backend is
involved and a report can be drawn from any thread.
"""

from __future__ import annotations

import io
import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

import matplotlib
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from ireetune.report.run_view import CandidateView, ModelRunView, ProfileRowView

# One colour per candidate status, the same in every plot and in the tables' chips: greens for
# verified, blues for measured, reds and oranges for failures, magenta for wrong results and a pale
# magenta for results never compared (unverified).
STATUS_COLOURS = {
    "default": "#222222",
    "verified": "#1a9850",
    "measured": "#4575b4",
    "compiled": "#74add1",
    "generated": "#bdbdbd",
    "not-applied": "#969696",
    "duplicate": "#d9d9d9",
    "compile-failed": "#d73027",
    "compile-timed-out": "#f46d43",
    "benchmark-failed": "#a50026",
    "benchmark-timed-out": "#fdae61",
    "crashed": "#7f0000",
    "device-error": "#762a83",
    "unverified": "#c994c7",
    "wrong": "#e7298a",
}
OTHER_COLOUR = "#8c6d31"


def status_colour(status: str) -> str:
    return STATUS_COLOURS.get(status, OTHER_COLOUR)


def render_svg(figure: Figure) -> str:
    """Render a figure as an inline `<svg>` element (no XML prolog, text kept as text)."""
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        figure.savefig(buffer, format="svg", bbox_inches="tight")
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def _new_figure(width: float, height: float) -> Figure:
    return Figure(figsize=(width, height), layout="constrained")


def _status_handles(statuses: set[str]) -> list[Line2D]:
    """Return one legend dot per status, in the statuses' sorted order."""
    return [
        Line2D([], [], marker="o", linestyle="", color=status_colour(s), label=s)
        for s in sorted(statuses)
    ]


def _timed(candidates: Sequence[CandidateView]) -> list[CandidateView]:
    return [c for c in candidates if not c.is_baseline and c.median_ms is not None]


def plot_convergence(
    candidates: Sequence[CandidateView], winner: int | None = None
) -> Figure | None:
    """Plot each measured candidate's speedup and the best so far, in the order measured.

    The run's chosen winner (which need not be the fastest at dispatch level: a decision on real
    inputs can pick another) is ringed.
    """
    timed = [c for c in _timed(candidates) if c.speedup is not None]
    if not timed:
        return None
    figure = _new_figure(7.0, 3.0)
    axes = figure.add_subplot()
    positions = list(range(1, len(timed) + 1))
    speedups = [c.speedup or 0.0 for c in timed]
    best_so_far = [max(speedups[: i + 1]) for i in range(len(speedups))]
    axes.step(positions, best_so_far, where="post", color="#222222", label="best so far")
    for position, candidate, speedup in zip(positions, timed, speedups, strict=True):
        colour = status_colour(candidate.status)
        if candidate.speedup_low is not None and candidate.speedup_high is not None:
            axes.errorbar(
                [position],
                [speedup],
                yerr=[
                    [max(0.0, speedup - candidate.speedup_low)],
                    [max(0.0, candidate.speedup_high - speedup)],
                ],
                fmt="none",
                ecolor=colour,
                alpha=0.6,
            )
        axes.scatter([position], [speedup], color=colour, zorder=3, s=24)
        if candidate.candidate_id == winner:
            axes.scatter([position], [speedup], s=160, facecolors="none", edgecolors="#222222")
    axes.axhline(1.0, color="#999999", linestyle="--", linewidth=1, label="default")
    axes.set_xlabel("candidates measured (in the order tried)")
    axes.set_ylabel("speedup over default (x)")
    axes.set_xlim(0.5, len(timed) + 0.5)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    handles = [
        Line2D([], [], color="#222222", label="best so far"),
        Line2D([], [], color="#999999", linestyle="--", label="default"),
        *_status_handles({c.status for c in timed}),
    ]
    if winner is not None and any(c.candidate_id == winner for c in timed):
        handles.append(
            Line2D(
                [], [], marker="o", markersize=11, markerfacecolor="none", linestyle="",
                color="#222222", label=f"chosen: #{winner}",
            )
        )  # fmt: skip
    axes.legend(handles=handles, fontsize=8, loc="best")
    axes.grid(alpha=0.3)
    return figure


# The most candidates drawn one per row; past this the plot keeps the fastest (and the winner).
MAX_CANDIDATE_ROWS = 60


def plot_candidate_times(
    candidates: Sequence[CandidateView], winner: int | None = None
) -> Figure | None:
    """Plot every timed candidate's median (min to max as whiskers) against the default's."""
    timed = _timed(candidates)
    if not timed:
        return None
    if len(timed) > MAX_CANDIDATE_ROWS:
        fastest = sorted(timed, key=lambda c: c.median_ms or 0.0)[:MAX_CANDIDATE_ROWS]
        kept = {c.candidate_id for c in fastest} | {winner}
        timed = [c for c in timed if c.candidate_id in kept]
    baseline = next((c for c in candidates if c.is_baseline and c.median_ms is not None), None)
    figure = _new_figure(7.0, max(2.4, 0.6 + 0.24 * len(timed)))
    axes = figure.add_subplot()
    for row, candidate in enumerate(timed):
        median = candidate.median_ms or 0.0
        low = candidate.min_ms if candidate.min_ms is not None else median
        high = candidate.max_ms if candidate.max_ms is not None else median
        colour = status_colour(candidate.status)
        axes.errorbar(
            [median],
            [row],
            xerr=[[max(0.0, median - low)], [max(0.0, high - median)]],
            fmt="o",
            color=colour,
            ecolor=colour,
            capsize=2,
            markersize=5,
        )
    if baseline is not None and baseline.median_ms is not None:
        if baseline.min_ms is not None and baseline.max_ms is not None:
            axes.axvspan(baseline.min_ms, baseline.max_ms, color="#222222", alpha=0.08)
        axes.axvline(baseline.median_ms, color="#222222", linestyle="--", linewidth=1)
    axes.set_yticks(
        range(len(timed)),
        [f"#{c.candidate_id}" + (" (chosen)" if c.candidate_id == winner else "") for c in timed],
        fontsize=8,
    )
    axes.set_ylim(len(timed) - 0.5, -0.5)
    axes.set_xlabel("time per call (ms): median, whiskers from fastest to slowest repetition")
    axes.set_xlim(left=0)
    untimed: dict[str, int] = {}
    for candidate in candidates:
        if not candidate.is_baseline and candidate.median_ms is None:
            untimed[candidate.status] = untimed.get(candidate.status, 0) + 1
    handles: list[Line2D | Patch] = [
        Line2D([], [], color="#222222", linestyle="--", label="default (band: its spread)"),
        *_status_handles({c.status for c in timed}),
        *(
            Patch(color=status_colour(s), label=f"{s}: {n} without a time")
            for s, n in sorted(untimed.items())
        ),
    ]
    # Under the plot, where it can hide no candidate.
    figure.legend(handles=handles, fontsize=8, loc="outside lower center", ncols=3, frameon=False)
    axes.grid(axis="x", alpha=0.3)
    return figure


@dataclass(frozen=True)
class KnobPoint:
    """One measured configuration for the knob views: its knobs, a value and a status."""

    knobs: tuple[tuple[str, int | str], ...]
    value: float
    status: str


def plot_knob_effects(points: Sequence[KnobPoint], value_label: str) -> Figure | None:
    """Plot, per knob that took more than one value, the value each configuration reached."""
    names = sorted({name for point in points for name, _ in point.knobs})
    varied = [
        name
        for name in names
        if len({dict(point.knobs).get(name) for point in points if name in dict(point.knobs)}) > 1
    ]
    if not varied:
        return None
    columns = min(3, len(varied))
    rows = math.ceil(len(varied) / columns)
    figure = _new_figure(3.0 * columns, 2.4 * rows)
    for index, name in enumerate(varied):
        axes = figure.add_subplot(rows, columns, index + 1)
        values = [dict(p.knobs)[name] for p in points if name in dict(p.knobs)]
        numeric = all(isinstance(v, int) for v in values)
        categories = sorted({str(v) for v in values})
        for point in points:
            knob = dict(point.knobs).get(name)
            if knob is None:
                continue
            position = float(knob) if numeric else float(categories.index(str(knob)))
            axes.scatter(
                [position], [point.value], color=status_colour(point.status), s=18, alpha=0.8
            )
        if numeric and min(int(v) for v in values) > 0 and max(int(v) for v in values) >= 16:
            axes.set_xscale("log", base=2)
        if not numeric:
            axes.set_xticks(range(len(categories)), categories, fontsize=7)
        axes.set_title(name, fontsize=9)
        axes.tick_params(labelsize=7)
        axes.grid(alpha=0.3)
        if index % columns == 0:
            axes.set_ylabel(value_label, fontsize=8)
    return figure


_SEGMENT_COLOURS = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#e15759",
    "#76b7b2",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
)
_MAX_SEGMENTS = len(_SEGMENT_COLOURS)
OUTSIDE_LABEL = "outside dispatches (launches, copies)"
# The shares plot is drawn at the width the page shows it (7.5 in: 720 CSS px, under the page's
# 1100 px column), so its text keeps its size: 9 pt, 12 CSS px. A legend entry longer than the
# figure would widen the SVG and the page would shrink all of it (a not-tunable dispatch's reason
# runs to 400 characters, which left the legend 6 px high): entries are cut to a line that fits.
_SHARES_FONT_PT = 9
_LEGEND_CHARS = 80


@dataclass(frozen=True)
class ShareSegment:
    """One slice of a model's time: a dispatch (or a group of them) and its share."""

    label: str
    before: float
    after: float
    kept_default: bool


def compute_model_shares(run: ModelRunView) -> list[ShareSegment]:
    """Split model time into dispatches before and (estimated) after tuning, and the rest.

    Before tuning the shares are the profile's. After tuning a dispatch whose spec is in the final
    tuned spec takes its tuned dispatch-level time; the others keep theirs; time spent outside
    dispatches is unchanged.
    """
    model_ms = run.model_ms or 0.0
    explained_ms = run.explained_ms or 0.0
    outside_ms = max(0.0, model_ms - explained_ms)
    before_ms: list[float] = []
    after_ms: list[float] = []
    for dispatch in run.dispatches:
        default_total = (dispatch.default_ms or 0.0) * max(1, dispatch.invocations)
        before_ms.append(default_total)
        tuned = dispatch.in_tuned_spec and dispatch.tuned_ms is not None
        after_ms.append(
            (dispatch.tuned_ms or 0.0) * max(1, dispatch.invocations) if tuned else default_total
        )
    before_total = sum(before_ms) + outside_ms
    after_total = sum(after_ms) + outside_ms
    if before_total <= 0 or after_total <= 0:
        return []
    segments = [
        ShareSegment(
            label=f"{d.name} ({d.problem})" if d.problem else d.name,
            before=b / before_total,
            after=a / after_total,
            kept_default=not d.in_tuned_spec,
        )
        for d, b, a in zip(run.dispatches, before_ms, after_ms, strict=True)
    ]
    segments.sort(key=lambda s: -s.before)
    if len(segments) > _MAX_SEGMENTS - 1:
        rest = segments[_MAX_SEGMENTS - 2 :]
        segments = [
            *segments[: _MAX_SEGMENTS - 2],
            ShareSegment(
                f"{len(rest)} other dispatches",
                sum(s.before for s in rest),
                sum(s.after for s in rest),
                all(s.kept_default for s in rest),
            ),
        ]
    if outside_ms > 0:
        segments.append(
            ShareSegment(
                OUTSIDE_LABEL,
                outside_ms / before_total,
                outside_ms / after_total,
                kept_default=False,
            )
        )
    return segments


def plot_model_shares(segments: Sequence[ShareSegment]) -> Figure | None:
    """Plot model time as two stacked bars: each dispatch's share before and after tuning."""
    if not segments:
        return None
    figure = _new_figure(7.5, 2.2 + 0.22 * len(segments))
    axes = figure.add_subplot()
    rows = ["before tuning", "after tuning (estimated)"]
    left = [0.0, 0.0]
    for index, segment in enumerate(segments):
        outside = index == len(segments) - 1 and segment.label.startswith(OUTSIDE_LABEL)
        colour = "#bdbdbd" if outside else _SEGMENT_COLOURS[index % len(_SEGMENT_COLOURS)]
        widths = [segment.before, segment.after]
        axes.barh(
            rows,
            widths,
            left=left,
            color=colour,
            edgecolor="white",
            hatch="//" if segment.kept_default else "",
            label=textwrap.shorten(segment.label, _LEGEND_CHARS, placeholder=" …")
            + (" (default kept)" if segment.kept_default else ""),
        )
        for row, width in enumerate(widths):
            if width >= 0.06:
                axes.text(
                    left[row] + width / 2, row, f"{width:.0%}", ha="center", va="center",
                    fontsize=_SHARES_FONT_PT, bbox={"facecolor": "white", "edgecolor": "none", "pad": 1},
                )  # fmt: skip
        left = [left[0] + widths[0], left[1] + widths[1]]
    axes.set_xlim(0, 1)
    axes.invert_yaxis()
    axes.set_xlabel("share of model time", fontsize=_SHARES_FONT_PT)
    axes.tick_params(labelsize=_SHARES_FONT_PT)
    figure.legend(fontsize=_SHARES_FONT_PT, loc="outside lower left", ncols=1, frameon=False)
    return figure


def plot_profile_gflops(rows: Sequence[ProfileRowView]) -> Figure | None:
    """Plot GFLOP/s per shape: the default, every configuration, the vendor library, the peak."""
    measured = [r for r in rows if r.gflops is not None]
    if not measured:
        return None
    operations = list(dict.fromkeys(r.operation for r in measured))
    figure = _new_figure(max(6.0, 1.1 * len(operations) + 2.0), 3.6)
    axes = figure.add_subplot()
    handles: dict[str, Line2D] = {}
    for position, operation in enumerate(operations):
        shape_rows = [r for r in measured if r.operation == operation]
        configs = [r for r in shape_rows if r.configuration != "default"]
        for offset, row in enumerate(configs):
            shift = (offset - (len(configs) - 1) / 2) * 0.08
            # Only a comparison that found a difference is a wrong result ("Not verified" is not).
            colour = "#e7298a" if row.verification == "FAILED" else "#4575b4"
            label = "configuration" if colour == "#4575b4" else "configuration, wrong result"
            axes.scatter([position + shift], [row.gflops or 0.0], color=colour, s=18, alpha=0.8)
            handles[label] = Line2D([], [], marker="o", linestyle="", color=colour, label=label)
        for row in shape_rows:
            if row.configuration == "default":
                axes.scatter([position], [row.gflops or 0.0], marker="s", color="#222222", s=40)
                handles["default"] = Line2D(
                    [], [], marker="s", linestyle="", color="#222222", label="compiler default"
                )
            if row.vendor_gflops is not None:
                axes.scatter([position], [row.vendor_gflops], marker="D", color="#d73027", s=36)
                handles["vendor"] = Line2D(
                    [],
                    [],
                    marker="D",
                    linestyle="",
                    color="#d73027",
                    label=f"vendor library ({row.vendor_library})",
                )
    peaks = {r.peak_gflops for r in measured if r.peak_gflops is not None}
    if peaks:
        peak = max(peaks)
        axes.axhline(peak, color="#999999", linestyle="--", linewidth=1)
        handles["peak"] = Line2D(
            [], [], color="#999999", linestyle="--", label=f"peak ({peak:.0f} GFLOP/s)"
        )
    axes.set_xticks(range(len(operations)), operations, rotation=20, ha="right", fontsize=7)
    axes.set_ylabel("GFLOP/s")
    axes.set_ylim(bottom=0)
    axes.grid(axis="y", alpha=0.3)
    axes.legend(handles=list(handles.values()), fontsize=8, loc="best")
    return figure


def plot_speedup_bars(
    labels: Sequence[str], speedups: Sequence[float], groups: Sequence[str]
) -> Figure | None:
    """Plot one horizontal bar per label (a speedup), coloured by its group."""
    if not labels:
        return None
    assert len(labels) == len(speedups) == len(groups)
    figure = _new_figure(7.5, max(2.0, 0.6 + 0.26 * len(labels)))
    axes = figure.add_subplot()
    group_names = list(dict.fromkeys(groups))
    colours = {g: _SEGMENT_COLOURS[i % len(_SEGMENT_COLOURS)] for i, g in enumerate(group_names)}
    axes.barh(range(len(labels)), speedups, color=[colours[g] for g in groups])
    axes.axvline(1.0, color="#222222", linestyle="--", linewidth=1)
    axes.set_yticks(range(len(labels)), labels, fontsize=7)
    axes.invert_yaxis()
    axes.set_xlabel("best verified speedup over the default (x)")
    figure.legend(
        handles=[Patch(color=colours[g], label=g) for g in group_names],
        fontsize=7,
        loc="outside lower center",
        frameon=False,
    )
    axes.grid(axis="x", alpha=0.3)
    return figure
