"""The `ireetune` command line: parse arguments, call the API, print results.

A user mistake (an IreetuneError) becomes one line on stderr and exit status 2; no traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from ireetune.errors import IreetuneError

EXIT_USER_ERROR = 2


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise IreetuneError(message)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _add_tune_dispatch(subparsers: argparse._SubParsersAction[_ArgumentParser]) -> None:
    parser = subparsers.add_parser("tune-dispatch", help="tune one dispatch and write its spec")
    parser.add_argument("input", type=Path, help="a *_benchmark.mlir dispatch dump or a model .mlir")
    parser.add_argument("--target", default="cpu", help="cpu | cuda:sm_80 | rocm:gfx942 (default cpu)")
    parser.add_argument("--num-candidates", type=_positive_int, default=32)
    parser.add_argument("--dispatch", help="for a model: the dispatch to tune, by name or index")
    parser.add_argument("--output-dir", type=Path, default=Path("ireetune_runs"), help="parent of the run folder")
    parser.add_argument("--jobs", type=_positive_int, default=None, help="parallel compiles (default: cores)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--devices", default="", help="comma-separated runtime devices (default: the target's)")
    parser.add_argument("--repetitions", type=_positive_int, default=5)
    parser.add_argument("--compile-timeout", type=float, default=120.0, help="seconds per compile")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None)


def build_parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(prog="ireetune", description="Autotune IREE dispatches into tuning specs.")
    parser.add_argument("-v", "--verbose", action="store_true")
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=_ArgumentParser)
    _add_tune_dispatch(subparsers)
    return parser


def _run_tune_dispatch(arguments: argparse.Namespace) -> int:
    from ireetune.dispatch_tuner import TuneOptions, tune_dispatch
    from ireetune.report.summary import render_summary

    options = TuneOptions(
        input_path=arguments.input,
        target=arguments.target,
        num_candidates=arguments.num_candidates,
        dispatch=arguments.dispatch,
        output_dir=arguments.output_dir,
        jobs=arguments.jobs or 0,
        seed=arguments.seed,
        devices=tuple(d for d in arguments.devices.split(",") if d),
        repetitions=arguments.repetitions,
        compile_timeout_s=arguments.compile_timeout,
        show_progress=arguments.progress,
    )
    result = tune_dispatch(options)
    summary = render_summary(
        result.problem.signature, options.target, result.records, result.baseline_ms,
        result.compile_success_rate, result.best, result.notes,
    )
    (result.run_dir / "summary.txt").write_text(summary)
    sys.stdout.write(summary)
    sys.stdout.write(f"run folder: {result.run_dir}\n")
    if result.best_spec_path is not None:
        sys.stdout.write(f"best spec: {result.best_spec_path}\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
        arguments = parser.parse_args(argv)
        logging.basicConfig(
            level=logging.INFO if arguments.verbose else logging.WARNING,
            format="%(levelname)s: %(message)s",
        )
        if arguments.command == "tune-dispatch":
            return _run_tune_dispatch(arguments)
        raise IreetuneError(f"unknown command {arguments.command}")
    except IreetuneError as error:
        sys.stderr.write(f"ireetune: error: {error}\n")
        return EXIT_USER_ERROR
    except BrokenPipeError:
        # The reader went away (for example `| head`); nothing more to say to it.
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        sys.stderr.write("ireetune: interrupted\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
