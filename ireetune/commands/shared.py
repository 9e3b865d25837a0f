"""What several subcommands share: a command generated from its options dataclass, the run folder
and device list options, the tuning commands' options and the line naming the HTML report.

Nothing imported here at module level may import the IREE compiler or z3: the runtime-only
command (`measure`) uses this module.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from ireetune.core import common_options
from ireetune.core.arguments import flag_text, user_path
from ireetune.core.options import add_options, option, options_from_arguments
from ireetune.executor import add_executor_arguments, parse_executor

if TYPE_CHECKING:
    from ireetune.flows.dispatch.options import TuneOptions
    from ireetune.flows.model.options import ModelTuneOptions

TuningOptions = TypeVar("TuningOptions", "TuneOptions", "ModelTuneOptions")
OptionsT = TypeVar("OptionsT")
# A string: argparse's action class takes no subscript at run time.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def add_options_parser(
    subparsers: Subparsers, name: str, summary: str, description: str | None, options_class: type
) -> argparse.ArgumentParser:
    """Add a subcommand whose arguments are generated from the option fields of `options_class`."""
    parser = subparsers.add_parser(name, help=summary, description=description)
    add_options(parser, options_class)
    return parser


def add_command(
    subparsers: Subparsers,
    name: str,
    summary: str,
    description: str | None,
    options_class: type[OptionsT],
    handler: Callable[[OptionsT], int],
) -> argparse.ArgumentParser:
    """Add a subcommand declared by `options_class` whose `handler` takes those options, built
    from the parsed arguments."""
    parser = add_options_parser(subparsers, name, summary, description, options_class)

    def handle(arguments: argparse.Namespace) -> int:
        return handler(options_from_arguments(options_class, arguments))

    parser.set_defaults(handler=handle)
    return parser


def run_dir_option(help: str) -> Any:
    """`run_dir`: the run folder a command works in (positional; `help` says which run's)."""
    return option(flag="run_dir", type=user_path, help=help)


def devices_option(more_help: str = "") -> Any:
    """`--devices`: the runtime devices a runtime-only command measures on."""
    return common_options.devices_option(
        "comma-separated runtime devices, e.g. cuda://0,cuda://1 (default: the manifest's)"
        + more_help
    )


def given_flags_option() -> Any:
    """`--flags` of `continue`, `resume` and `replay`: the run's own flags beyond the flag
    search's, given again (a run folder is data and may not choose them,
    flows/handoff/folder_trust.py)."""
    return option(
        (), flag="--flags", type=flag_text,
        help="the --flags the run was tuned with, given again: a run folder's flags outside "
        "the flag search's options are used only when repeated here",
    )  # fmt: skip


def given_database_option() -> Any:
    """`--db` of `continue` and `resume`: the database the run was tuned with, given again."""
    return option(
        None, flag="--db", type=user_path,
        help="the tuning database (default: $IREETUNE_DB, else ~/.cache/ireetune/tuning.sqlite); "
        "a run tuned with --db continues with the same --db: a run folder does not choose it",
    )  # fmt: skip


def add_tuning_command(
    subparsers: Subparsers,
    name: str,
    summary: str,
    description: str,
    options_class: type[TuningOptions],
    handler: Callable[[TuningOptions, argparse.Namespace], int],
) -> argparse.ArgumentParser:
    """Add a tuning subcommand: its option fields and the executor's arguments; its `handler`
    takes the options `read_tuning_options` builds (and the parsed arguments, for a flag of the
    command's own)."""
    parser = add_options_parser(subparsers, name, summary, description, options_class)
    add_executor_arguments(parser)

    def handle(arguments: argparse.Namespace) -> int:
        return handler(read_tuning_options(options_class, arguments), arguments)

    parser.set_defaults(handler=handle)
    return parser


def read_tuning_options(
    options_class: type[TuningOptions], arguments: argparse.Namespace
) -> TuningOptions:
    """Build a tuning command's options, with its executor, and check its output folder and
    database before any work."""
    executor, ray = parse_executor(arguments)
    options = options_from_arguments(options_class, arguments, executor=executor, ray=ray)
    check_before_work(options)
    return options


def check_before_work(options: TuningOptions) -> None:
    """Refuse, before any work, what a tuning run's options can not do: an output folder or a
    database that can not be written, and, for a dispatch compiled for another host (`--stop-after
    compile`), flags its folder may not carry (`continue` takes only the flag search's), and a
    dispatch run's time budget where it can not be kept. The
    command line and the Python API both check here."""
    from ireetune.core.errors import IreetuneError
    from ireetune.core.run_dir import check_database_path, check_output_dir
    from ireetune.flows.dispatch.options import TuneOptions
    from ireetune.flows.handoff.folder_flags import check_folder_flags

    check_output_dir(options.output_dir)
    if options.use_database:
        check_database_path(options.database_path)
    if isinstance(options, TuneOptions) and options.stop_after is not None:
        check_folder_flags(options.extra_flags, "--flags with --stop-after compile")
    if isinstance(options, TuneOptions) and options.time_budget_s is not None:
        if options.stop_after is not None:
            raise IreetuneError(
                "--time-budget does not apply with --stop-after compile (the run's time is spent "
                "on two hosts, between which it waits)"
            )
        if options.search_flags:
            raise IreetuneError(
                "--time-budget does not apply with --search-flags yet (the dispatch flag search "
                "keeps no budget): search the flags in a run of their own, or give no budget"
            )


def announce_html_report(run_dir: Path) -> None:
    """Write a run folder's HTML report and name it on stdout (nothing when it cannot be drawn)."""
    from ireetune.report.html_report import try_write_html_report

    report_path = try_write_html_report(run_dir)
    if report_path is not None:
        sys.stdout.write(f"html report: {report_path}\n")
