"""`ireetune db list|show|export|import`: look at and move the tuning database's results."""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from ireetune.core.arguments import user_path
from ireetune.core.errors import IreetuneError
from ireetune.core.output_paths import add_output_arguments, check_new_output, write_output

if TYPE_CHECKING:
    from ireetune.database.store import StoredResult, TuningDatabase

# The database file and the journal, write-ahead log and shared memory SQLite keeps beside it.
DATABASE_SUFFIXES = ("", "-journal", "-wal", "-shm")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("db", help="list, show, export and import stored results")
    database_help = "database file (default: $IREETUNE_DB, else the user cache)"
    parser.add_argument("--db", type=user_path, default=None, help=database_help)
    actions = parser.add_subparsers(dest="db_command", required=True, parser_class=type(parser))
    list_ = actions.add_parser("list", help="one line per problem, target and device")
    show = actions.add_parser("show", help="every result of the problems whose name contains TEXT")
    show.add_argument("problem", help="problem signature or part of it, e.g. matmul_512x512x512")
    export = actions.add_parser(
        "export", help="the best config per problem as a spec, or all as CSV/JSON"
    )
    export.add_argument(
        "--format",
        choices=("spec", "csv", "json"),
        default="spec",
        help="spec: one linked tuning spec of the winners; csv or json: every row (default: spec)",
    )
    export.add_argument("--target", default=None, help="only this target (name as listed)")
    add_output_arguments(export, "file to write (default: stdout)")
    import_ = actions.add_parser(
        "import", help="add results from a JSON export or another database"
    )
    import_.add_argument(
        "source", type=user_path, help="a JSON export or an ireetune database file"
    )
    report = actions.add_parser("report", help="best speedups per problem, target and compiler")
    add_output_arguments(report, "also write an HTML page")
    for action in (list_, show, export, import_, report):
        # After the action too (`ireetune db list --db FILE`), as every tuner takes it; SUPPRESS
        # keeps a `--db` given before the action when none follows it.
        action.add_argument("--db", type=user_path, default=argparse.SUPPRESS, help=database_help)
    parser.set_defaults(handler=run)


def run(arguments: argparse.Namespace) -> int:
    from ireetune.database.schema import check_database_file
    from ireetune.database.store import TuningDatabase, default_database_path

    path = arguments.db or default_database_path()
    if arguments.db_command in ("export", "report") and arguments.output is not None:
        # The database and the files SQLite keeps beside it are inputs, never outputs.
        database_files = [path.with_name(path.name + suffix) for suffix in DATABASE_SUFFIXES]
        check_new_output(arguments.output, arguments.force, database_files)
        if not arguments.output.parent.is_dir():
            raise IreetuneError(
                f"cannot write {arguments.output}: folder {arguments.output.parent} does not exist"
            )
    if arguments.db_command != "import" and not path.exists():
        raise IreetuneError(f"no database at {path}")
    check_database_file(path)
    if arguments.db_command == "import":
        # The source is read and checked in full before the database is created or touched.
        return _import(path, arguments.source)
    # Every other action only reads: the file is opened read-only and never created or changed.
    with TuningDatabase(path, read_only=True) as database:
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
    raise AssertionError(f"unknown db command {arguments.db_command}")


def _speedup_text(result: StoredResult) -> str:
    """Write a row's speedup with its interval: `1.234x [1.100-1.350]`, or `-`."""
    if result.speedup is None:
        return "-"
    text = f"{result.speedup:.3f}x"
    if result.speedup_low is not None and result.speedup_high is not None:
        text += f" [{result.speedup_low:.3f}-{result.speedup_high:.3f}]"
    return text


def _list(database: TuningDatabase) -> int:
    from ireetune.database.store import LOCAL_ORIGIN, deciding_speedup, is_local_winner
    from ireetune.report.db_report import printable_text

    winners: dict[tuple[str, str, str, str], StoredResult] = {}
    counts: dict[tuple[str, str, str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    imported: dict[tuple[str, str, str, str], int] = defaultdict(int)
    for result in database.all_results():
        group = (
            result.key.signature,
            result.key.target,
            result.key.device,
            result.key.compiler_version,
        )
        counts[group][result.status] += 1
        if not is_local_winner(result):
            imported[group] += result.origin != LOCAL_ORIGIN
        elif group not in winners or deciding_speedup(winners[group]) < deciding_speedup(result):
            winners[group] = result
    if not counts:
        sys.stdout.write("the database is empty\n")
        return 0
    for group in sorted(counts):
        winner = winners.get(group)
        best = f"winner {_speedup_text(winner)}" if winner else "no winner"
        status_text = ", ".join(f"{k} {v}" for k, v in sorted(counts[group].items()))
        origin_text = (
            f"; {imported[group]} imported (candidates to measure again)" if imported[group] else ""
        )
        sys.stdout.write(
            printable_text(f"{'  '.join(group)}: {best}; {status_text}{origin_text}") + "\n"
        )
    return 0


def _show(database: TuningDatabase, problem: str) -> int:
    from ireetune.report.db_report import printable_text

    rows = [r for r in database.all_results() if problem in r.key.signature]
    if not rows:
        raise IreetuneError(f"no stored result for a problem matching '{problem}'")
    for r in rows:
        median = f"{r.median_ms:.4f} ms" if r.median_ms is not None else "-"
        line = (
            f"{r.key.signature}  {r.key.target}  {r.status:<20} {r.verdict or '-':<8} "
            f"{_speedup_text(r):>24} {median:>12}  {r.config}  origin {r.origin}"
            f"{'  (' + r.reason + ')' if r.reason else ''}"
        )
        sys.stdout.write(printable_text(line) + "\n")
    return 0


def _export(
    database: TuningDatabase, output_format: str, target: str | None, output: Path | None
) -> int:
    from ireetune.database.exchange import render_results_csv, results_to_json
    from ireetune.spec.export import render_linked_spec

    results = database.best_results() if output_format == "spec" else database.all_results()
    rows = [
        r
        for r in results
        if target is None or r.key.target.split("#")[0] == target or r.key.target == target
    ]
    if output_format == "spec":
        text = render_linked_spec(rows)
    else:
        text = render_results_csv(rows) if output_format == "csv" else results_to_json(rows)
    if output is None:
        sys.stdout.write(text)
        return 0
    write_output(output, text)
    return 0


def _import(path: Path, source: Path) -> int:
    from ireetune.core.input_files import check_input_file
    from ireetune.database.exchange import read_results_file
    from ireetune.database.store import TuningDatabase

    check_input_file(source, "file to import")
    results = read_results_file(source)
    with TuningDatabase(path) as database:
        added = database.import_results(results)
    sys.stdout.write(
        f"imported {added} of {len(results)} results ({len(results) - added} already present); "
        "imported verdicts are candidates to measure again here, never reused as they are\n"
    )
    return 0
