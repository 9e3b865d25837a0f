"""The report across runs: what the tuning database says per problem, target and compiler.

It reads the database only through `TuningDatabase.all_results()`, so it never changes it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ireetune.core.output_paths import write_output
from ireetune.core.records import CandidateStatus
from ireetune.database.store import StoredResult, TuningDatabase
from ireetune.report.html_page import Plot, build_plot, render_page
from ireetune.report.plots import plot_speedup_bars


@dataclass(frozen=True)
class ProblemSummary:
    """One problem on one target, device and compiler: how often tuned, and its best result."""

    signature: str
    target: str
    device: str
    compiler_version: str
    sessions: int
    results: int
    verified: int
    best_speedup: float | None


@dataclass(frozen=True)
class GroupSummary:
    """Problems grouped by a target or a compiler version: how much tuning gave them."""

    name: str
    problems: int
    improved: int
    geomean_speedup: float


@dataclass(frozen=True)
class DatabaseSummary:
    problems: tuple[ProblemSummary, ...]
    by_target: tuple[GroupSummary, ...]
    by_compiler: tuple[GroupSummary, ...]


def short_target(target: str) -> str:
    """Drop the executable-target hash from a stored target name (`cpu#b57d1d88` -> `cpu`)."""
    return target.split("#")[0]


def _group(name: str, problems: Sequence[ProblemSummary]) -> GroupSummary:
    # A problem without a verified win keeps the default: it counts as 1x, as it runs.
    speedups = [max(1.0, p.best_speedup or 1.0) for p in problems]
    return GroupSummary(
        name=name,
        problems=len(problems),
        improved=sum(1 for s in speedups if s > 1.0),
        geomean_speedup=math.exp(sum(math.log(s) for s in speedups) / len(speedups)),
    )


def summarize_results(results: Iterable[StoredResult]) -> DatabaseSummary:
    """Summarize stored results per problem, then per target and per compiler version."""
    grouped: dict[tuple[str, str, str, str], list[StoredResult]] = defaultdict(list)
    for result in results:
        key = result.key
        grouped[(key.signature, key.target, key.device, key.compiler_version)].append(result)
    problems = []
    for (signature, target, device, compiler), rows in sorted(grouped.items()):
        verified = [
            r.speedup
            for r in rows
            if r.status == CandidateStatus.VERIFIED.value and r.speedup is not None
        ]
        problems.append(
            ProblemSummary(
                signature=signature,
                target=target,
                device=device,
                compiler_version=compiler,
                sessions=len({r.session for r in rows}),
                results=len(rows),
                verified=len(verified),
                best_speedup=max(verified) if verified else None,
            )
        )
    by_target: dict[str, list[ProblemSummary]] = defaultdict(list)
    by_compiler: dict[str, list[ProblemSummary]] = defaultdict(list)
    for problem in problems:
        by_target[f"{short_target(problem.target)} on {problem.device}"].append(problem)
        by_compiler[problem.compiler_version].append(problem)
    return DatabaseSummary(
        problems=tuple(problems),
        by_target=tuple(_group(name, rows) for name, rows in sorted(by_target.items())),
        by_compiler=tuple(_group(name, rows) for name, rows in sorted(by_compiler.items())),
    )


def printable_text(text: str) -> str:
    """Show stored text on one line of a terminal: control characters (a newline, a terminal
    escape) that an imported row could hold are written as escapes (`\\x1b`)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _speedup_text(speedup: float | None) -> str:
    return "no verified result" if speedup is None else f"{speedup:.3f}x"


def render_summary_text(summary: DatabaseSummary) -> str:
    """Write the summary as plain text: the problems, then the targets and compiler versions."""
    if not summary.problems:
        return "the database is empty\n"
    lines = ["best verified speedup per problem:"]
    lines.extend(
        f"  {p.signature}  {short_target(p.target)}  {p.device}  {p.compiler_version}: "
        f"{_speedup_text(p.best_speedup)} ({p.sessions} run(s), {p.verified} of {p.results} "
        "results verified)"
        for p in summary.problems
    )
    for title, groups in (
        ("per target", summary.by_target),
        ("per compiler version", summary.by_compiler),
    ):
        lines.append(f"{title} (geometric mean; a problem without a win counts as 1x):")
        lines.extend(
            f"  {g.name}: {g.geomean_speedup:.3f}x over {g.problems} problem(s), "
            f"{g.improved} improved"
            for g in groups
        )
    return "".join(printable_text(line) + "\n" for line in lines)


@dataclass(frozen=True)
class ProblemRow:
    signature: str
    target: str
    device: str
    compiler_version: str
    runs: str
    verified: str
    best: str


@dataclass(frozen=True)
class GroupRow:
    name: str
    problems: str
    improved: str
    geomean_speedup: str


@dataclass(frozen=True)
class DatabasePage:
    """The database report as its template shows it (`templates/database.html`)."""

    title: str
    subtitle: str
    best_speedups: Plot
    problems: tuple[ProblemRow, ...]
    by_target: tuple[GroupRow, ...]
    by_compiler: tuple[GroupRow, ...]


def _group_rows(groups: Sequence[GroupSummary]) -> tuple[GroupRow, ...]:
    return tuple(
        GroupRow(g.name, str(g.problems), str(g.improved), f"{g.geomean_speedup:.3f}×")
        for g in groups
    )


def build_database_page(summary: DatabaseSummary, database_name: str) -> DatabasePage:
    """Lay out the summary for its page, with a bar plot of the best speedups."""
    with_speedup = [p for p in summary.problems if p.best_speedup is not None]
    figure = plot_speedup_bars(
        [f"{p.signature} ({p.compiler_version})" for p in with_speedup],
        [p.best_speedup or 1.0 for p in with_speedup],
        [f"{short_target(p.target)} on {p.device}" for p in with_speedup],
    )
    return DatabasePage(
        title="ireetune: tuning database",
        subtitle=f"database {database_name}",
        best_speedups=build_plot(
            figure,
            "The best verified result of each problem, coloured by target and device.",
            "No problem has a verified result yet.",
        ),
        problems=tuple(
            ProblemRow(
                signature=p.signature,
                target=short_target(p.target),
                device=p.device,
                compiler_version=p.compiler_version,
                runs=str(p.sessions),
                verified=f"{p.verified} / {p.results}",
                best=_speedup_text(p.best_speedup),
            )
            for p in summary.problems
        ),
        by_target=_group_rows(summary.by_target),
        by_compiler=_group_rows(summary.by_compiler),
    )


def report_database(database: TuningDatabase, database_path: Path, output: Path | None) -> str:
    """Summarize the database; write the HTML page to `output` when given; return the text."""
    summary = summarize_results(database.all_results())
    if output is not None:
        page = build_database_page(summary, str(database_path))
        write_output(output, render_page("database.html", page))
    return render_summary_text(summary) + (f"html report: {output}\n" if output else "")
