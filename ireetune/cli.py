"""The `ireetune` command line: parse arguments, call the API, print results.

A user mistake (an IreetuneError, or a bad flag) becomes one line on stderr and exit status 2;
no traceback reaches the user for it.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import logging
import os
import signal
import sqlite3
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ireetune.commands import COMMAND_MODULES
from ireetune.core.child_process import stop_all_children
from ireetune.core.errors import IreetuneError
from ireetune.core.input_files import describe_path
from ireetune.core.scratch import private_temp_folder
from ireetune.database.schema import is_lock_error

EXIT_USER_ERROR = 2


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Show each option's default, unless its help already names it or there is none to show."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        help_text = action.help or ""
        default = action.default
        if (
            not action.option_strings
            or "default" in help_text
            # A switch (`--retune`, `--no-db`) says what it does; its default is its absence.
            or isinstance(action, argparse._StoreConstAction)
            or default is None
            or default is argparse.SUPPRESS
            or default in ("", [], ())
        ):
            return help_text
        return f"{help_text} (default: %(default)s)"


class _ArgumentParser(argparse.ArgumentParser):
    """An argument parser whose errors are IreetuneErrors (one line, exit 2), and whose help
    shows every option's default."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        command = self.prog.removeprefix("ireetune").strip()
        raise IreetuneError(f"{command}: {message}" if command else message)


def describe_version() -> str:
    """Name ireetune's version and the IREE packages it runs with (read without importing them)."""
    from importlib.metadata import PackageNotFoundError, version

    from ireetune.core.version import __version__

    packages = []
    for package in ("iree-base-compiler", "iree-base-runtime"):
        try:
            packages.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            packages.append(f"{package} not installed")
    return f"ireetune {__version__} ({', '.join(packages)})"


def build_parser() -> argparse.ArgumentParser:
    """Build the parser with every registered subcommand."""
    parser = _ArgumentParser(
        prog="ireetune", description="Autotune IREE dispatches into tuning specs."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log what each stage does")
    parser.add_argument("--version", action="version", version=describe_version())
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=_ArgumentParser)
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


# Options whose value is itself iree-compile flags: `--flags "--iree-opt-data-tiling"` would
# otherwise be read as an option without its value.
_FLAG_TEXT_OPTIONS = frozenset({"--flags", "--try-flags"})


def _attach_flag_text(argv: Sequence[str]) -> list[str]:
    """Rewrite `--flags VALUE` as `--flags=VALUE` so that VALUE may start with dashes."""
    attached: list[str] = []
    words = iter(argv)
    for word in words:
        value = next(words, None) if word in _FLAG_TEXT_OPTIONS else None
        attached.append(word if value is None else f"{word}={value}")
    return attached


EXIT_TERMINATED = 128 + signal.SIGTERM


class _Terminated(BaseException):
    """SIGTERM arrived: unwind like Ctrl-C, so that every scratch folder is removed."""


def _raise_terminated(signal_number: int, frame: object) -> None:
    raise _Terminated


# How long after a swallowed SIGTERM it is sent again: long enough for the report hook, and the
# callback it reports on, to have returned.
REDELIVERY_DELAY_S = 0.05


def _redeliver_swallowed(unraisable: Any, previous: Callable[[Any], object]) -> None:
    """Deliver SIGTERM again when Python swallowed its exception: a signal that arrives inside
    a callback whose exceptions are only reported (the logging module's after-fork hook while a
    compile is spawned) raised `_Terminated` where it could not unwind, and the run went on.

    The signal is sent from a timer thread, a moment later: sent from here, its handler would
    run inside this hook, whose own exceptions Python swallows too."""
    if isinstance(unraisable.exc_value, _Terminated):
        resend = threading.Timer(REDELIVERY_DELAY_S, os.kill, (os.getpid(), signal.SIGTERM))
        resend.daemon = True
        resend.start()
        return
    previous(unraisable)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    # Only the main thread may set a handler (a test may call main from another one).
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous_handler = signal.signal(signal.SIGTERM, _raise_terminated) if in_main_thread else None
    previous_hook = sys.unraisablehook
    sys.unraisablehook = functools.partial(_redeliver_swallowed, previous=previous_hook)
    try:
        # Every run has a private temp folder, removed at its end (and by the next run where a
        # SIGKILL stopped this one): nothing it or its children write there is left behind.
        with private_temp_folder():
            return _run(argv)
    except _Terminated:
        # SIGTERM while the private temp folder was being made or removed (outside `_run`).
        stop_all_children()
        sys.stderr.write("ireetune: terminated\n")
        return EXIT_TERMINATED
    finally:
        sys.unraisablehook = previous_hook
        if previous_handler is not None:
            signal.signal(signal.SIGTERM, previous_handler)


def _run(argv: Sequence[str] | None) -> int:
    try:
        words = _attach_flag_text(sys.argv[1:] if argv is None else argv)
        arguments = build_parser().parse_args(words)
        logging.basicConfig(
            level=logging.INFO if arguments.verbose else logging.WARNING,
            format="%(levelname)s: %(message)s",
        )
        status: int = arguments.handler(arguments)
        return status
    except IreetuneError as error:
        # One line, whatever the message carries (a runtime's error text spans several).
        message = str(error)
        if len(message.splitlines()) > 1:
            message = " ".join(line.strip() for line in message.splitlines() if line.strip())
        # A file name that is not UTF-8 is shown with its bytes escaped, wherever it comes from.
        message = describe_path(message)
        sys.stderr.write(f"ireetune: error: {message}\n")
        return EXIT_USER_ERROR
    except sqlite3.OperationalError as error:
        # Another process held the tuning database past the busy timeout while this one ran
        # (opening it says so with its path, database/schema.py).
        if not is_lock_error(error):
            raise
        sys.stderr.write(
            "ireetune: error: the tuning database is locked (busy) by another process; "
            "try again when it is done\n"
        )
        return EXIT_USER_ERROR
    except BrokenPipeError:
        # The reader went away (for example `| head`); nothing more to say to it.
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        # Children run in their own process groups, out of the terminal's reach: stop them.
        stop_all_children()
        sys.stderr.write("ireetune: interrupted\n")
        return 130
    except _Terminated:
        stop_all_children()
        sys.stderr.write("ireetune: terminated\n")
        return EXIT_TERMINATED


if __name__ == "__main__":
    sys.exit(main())
