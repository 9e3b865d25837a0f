"""`ireetune db list|show|export|import`: look at and move the tuning database's results."""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

from ireetune.errors import IreetuneError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("db", help="list, show, export and import stored results")
    parser.add_argument("--db", type=Path, default=None, help="database file (default: user cache)")
    actions = parser.add_subparsers(dest="db_command", required=True, parser_class=type(parser))
    actions.add_parser("list", help="one line per problem, target and device")
    show = actions.add_parser("show", help="every result of the problems whose name contains TEXT")
    show.add_argument("problem", help="problem signature or part of it, e.g. matmul_512x512x512")
    export = actions.add_parser(
        "export", help="the best config per problem as a spec, or all as CSV/JSON"
    )
    export.add_argument("--format", choices=("spec", "csv", "json"), default="spec")
    export.add_argument("--target", default=None, help="only this target (name as listed)")
    export.add_argument(
        "-o", "--output", type=Path, default=None, help="file to write (default: stdout)"
    )
    import_ = actions.add_parser(
        "import", help="add results from a JSON export or another database"
    )
    import_.add_argument("source", type=Path)
    report = actions.add_parser("report", help="best speedups per problem, target and compiler")
    report.add_argument("-o", "--output", type=Path, default=None, help="also write an HTML page")
    parser.set_defaults(handler=run)


def run(arguments: argparse.Namespace) -> int:
    from ireetune.database.store import TuningDatabase, default_database_path

    path = arguments.db or default_database_path()
    if arguments.db_command != "import" and not path.exists():
        raise IreetuneError(f"no database at {path}")
    with TuningDatabase(path) as database:
        if arguments.db_command == "list":
            return _list(database)
        if arguments.db_command == "show":
            return _show(database, arguments.problem)
        if arguments.db_command == "export":
            return _export(database, arguments.format, arguments.target, arguments.output)
        if arguments.db_command == "report":
            from ireetune.report.db_report import report_database

            sys.stdout.write(report_database(database, path, arguments.output))
            return 0
        return _import(database, arguments.source)


def _list(database: object) -> int:
    from ireetune.database.store import TuningDatabase

    assert isinstance(database, TuningDatabase)
    groups: dict[tuple[str, str, str, str], list[float | None]] = defaultdict(list)
    counts: dict[tuple[str, str, str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for result in database.all_results():
        group = (
            result.key.signature,
            result.key.target,
            result.key.device,
            result.key.compiler_version,
        )
        counts[group][result.status] += 1
        if result.status == "verified":
            groups[group].append(result.speedup)
    if not counts:
        sys.stdout.write("the database is empty\n")
        return 0
    for group in sorted(counts):
        speedups = [s for s in groups.get(group, []) if s is not None]
        best = f"best verified {max(speedups):.3f}x" if speedups else "no verified result"
        status_text = ", ".join(f"{k} {v}" for k, v in sorted(counts[group].items()))
        sys.stdout.write(f"{group[0]}  {group[1]}  {group[2]}  {group[3]}: {best}; {status_text}\n")
    return 0


def _show(database: object, problem: str) -> int:
    from ireetune.database.store import TuningDatabase

    assert isinstance(database, TuningDatabase)
    rows = [r for r in database.all_results() if problem in r.key.signature]
    if not rows:
        raise IreetuneError(f"no stored result for a problem matching '{problem}'")
    for r in rows:
        speedup = f"{r.speedup:.3f}x" if r.speedup is not None else "-"
        median = f"{r.median_ms:.4f} ms" if r.median_ms is not None else "-"
        sys.stdout.write(
            f"{r.key.signature}  {r.key.target}  {r.status:<20} {speedup:>8} {median:>12}  {r.config}"
            f"{'  (' + r.reason + ')' if r.reason else ''}\n"
        )
    return 0


def _export(database: object, output_format: str, target: str | None, output: Path | None) -> int:
    from ireetune.database.exchange import render_linked_spec, render_results_csv, results_to_json
    from ireetune.database.store import TuningDatabase

    assert isinstance(database, TuningDatabase)
    if output_format == "spec":
        best = [
            r
            for r in database.best_results()
            if target is None or r.key.target.split("#")[0] == target or r.key.target == target
        ]
        text = render_linked_spec(best)
    else:
        rows = [
            r
            for r in database.all_results()
            if target is None or r.key.target.split("#")[0] == target or r.key.target == target
        ]
        text = render_results_csv(rows) if output_format == "csv" else results_to_json(rows)
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text)
    return 0


def _import(database: object, source: Path) -> int:
    from ireetune.database.exchange import read_results_file
    from ireetune.database.store import TuningDatabase

    assert isinstance(database, TuningDatabase)
    results = read_results_file(source)
    added = database.import_results(results)
    sys.stdout.write(
        f"imported {added} of {len(results)} results ({len(results) - added} already present)\n"
    )
    return 0
