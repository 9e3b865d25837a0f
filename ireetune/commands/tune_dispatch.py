"""`ireetune tune-dispatch`: tune one dispatch and write its spec."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from ireetune.commands.arguments import (
    TARGET_HELP,
    add_executor_arguments,
    device_list,
    fraction,
    non_negative_int,
    non_negative_seconds,
    parse_executor,
    positive_int,
    positive_seconds,
    seed,
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "tune-dispatch",
        help="tune one dispatch and write its spec",
        description="Tune one dispatch: compile candidate configurations, time them against "
        "the default, verify the fastest and write the winner's tuning spec.",
    )
    parser.add_argument(
        "input",
        type=Path,
        help="a *_benchmark.mlir dispatch dump (iree-compile "
        "--iree-hal-dump-executable-benchmarks-to) or a model .mlir with static shapes",
    )
    parser.add_argument("--target", default="cpu", help=f"what to compile for: {TARGET_HELP}")
    parser.add_argument(
        "--num-candidates", type=positive_int, default=32, help="candidate configurations to try"
    )
    parser.add_argument(
        "--dispatch",
        help="for a model with several dispatches: the one to tune, by name or index "
        "(default: the only one; a model with several lists them)",
    )
    parser.add_argument(
        "--output-dir", type=Path, default=Path("ireetune_runs"), help="parent of the run folder"
    )
    parser.add_argument(
        "--jobs", type=positive_int, default=None, help="parallel compiles (default: cores)"
    )
    parser.add_argument(
        "--seed", type=seed, default=0, help="seed of the candidate sampling (same seed, same run)"
    )
    parser.add_argument(
        "--devices",
        type=device_list,
        default="",
        help="comma-separated runtime devices to time on (default: the target's: "
        "local-task for cpu, cuda://0 for cuda, hip://0 for rocm)",
    )
    parser.add_argument(
        "--repetitions", type=positive_int, default=5, help="timed repetitions per candidate"
    )
    parser.add_argument(
        "--compile-timeout", type=positive_seconds, default=120.0, help="seconds per compile"
    )
    parser.add_argument(
        "--confirm-rounds",
        type=non_negative_int,
        default=5,
        help="interleaved re-timing rounds of the leaders against the baseline (0 to skip)",
    )
    parser.add_argument(
        "--min-repetition-time",
        type=non_negative_seconds,
        default=0.05,
        help="seconds one timed repetition should last at least (sets the batch size)",
    )
    parser.add_argument(
        "--pipeline", action="append", default=[], choices=("TileAndFuse", "VectorDistribute"),
        help="GPU targets: search only this codegen pipeline (repeatable; default: all)",
    )  # fmt: skip
    parser.add_argument(
        "--stop-after", choices=("compile",),
        help="compile: write a self-contained folder to measure with `ireetune benchmark-folder` "
        "(default: run every stage here)",
    )  # fmt: skip
    parser.add_argument(
        "--references", choices=("leaders", "all"), default="leaders",
        help="with --stop-after compile: compile the output checks' reference programs of the "
        "leaders only, in `finish` after benchmarking (default; each candidate is compiled once, "
        "the device host checks outputs on a second call), or of every candidate now (one trip)",
    )  # fmt: skip
    parser.add_argument(
        "--order", choices=("auto", "learned", "heuristic", "random"), default="auto",
        help="which candidates to compile: the learned cost model's best when the database can "
        "teach one, else the heuristic's (auto, default); the model's, the heuristic's, or random "
        "ones (a baseline for the others)",
    )  # fmt: skip
    parser.add_argument(
        "--online", action=argparse.BooleanOptionalAction, default=True,
        help="with a learned model, measure in rounds and re-rank the rest between them "
        "(default: on)",
    )  # fmt: skip
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show progress bars on stderr (default: when stderr is a terminal)",
    )
    parser.add_argument(
        "--db",
        type=Path,
        default=None,
        help="tuning database file (default: $IREETUNE_DB, else ~/.cache/ireetune/tuning.sqlite)",
    )
    parser.add_argument("--no-db", action="store_true", help="neither read nor write the database")
    parser.add_argument("--retune", action="store_true", help="tune even if a stored result exists")
    parser.add_argument(
        "--benchmark-timeout",
        type=positive_seconds,
        default=10.0,
        help="seconds allowed for loading one candidate (runs are stopped at 5x the baseline's "
        "time)",
    )
    parser.add_argument(
        "--overlap", action=argparse.BooleanOptionalAction, default=None,
        help="measure candidates while the rest still compile (default: on for GPU devices, off "
        "on the host's CPU, where compiles would take the cores being measured)",
    )  # fmt: skip
    parser.add_argument(
        "--screen-fraction", type=fraction, default=None,
        help="first pass: time batches of this share of the baseline's batch; the leaders' "
        "confirmation always uses the full batch (default: 1 on the CPU, 0.25 on GPUs)",
    )  # fmt: skip
    parser.add_argument(
        "--prewarm", type=non_negative_int, default=None,
        help="processes that load (JIT) the next candidates while one is measured "
        "(default: up to 4 on GPUs, half the cores at most; 0 on the CPU)",
    )  # fmt: skip
    parser.add_argument(
        "--flags", default="",
        help='extra global iree-compile flags for every compile, e.g. "--iree-opt-data-tiling"',
    )  # fmt: skip
    parser.add_argument(
        "--search-flags", action="store_true",
        help="first search the target's global flags (on the model, or on the dispatch benchmark "
        "itself) and tune under the winner",
    )  # fmt: skip
    add_executor_arguments(parser)
    parser.set_defaults(handler=run)


def run(arguments: argparse.Namespace) -> int:
    from ireetune.dispatch_tuner import CandidateOrder, TuneOptions, tune_dispatch
    from ireetune.flags.check import parse_flag_text
    from ireetune.handoff.export import References, StopAfter
    from ireetune.handoff.folder_flags import check_folder_flags
    from ireetune.report.html_report import try_write_html_report
    from ireetune.run_dir import check_database_path, check_output_dir

    check_output_dir(arguments.output_dir)
    if not arguments.no_db:
        check_database_path(arguments.db)
    if arguments.stop_after:
        # `finish` compiles with the folder's flags and accepts only the flag search's.
        check_folder_flags(parse_flag_text(arguments.flags), "--flags with --stop-after compile")

    executor, ray = parse_executor(arguments)
    options = TuneOptions(
        input_path=arguments.input,
        target=arguments.target,
        num_candidates=arguments.num_candidates,
        dispatch=arguments.dispatch,
        output_dir=arguments.output_dir,
        jobs=arguments.jobs or 0,
        seed=arguments.seed,
        devices=arguments.devices,
        repetitions=arguments.repetitions,
        compile_timeout_s=arguments.compile_timeout,
        confirm_rounds=arguments.confirm_rounds,
        min_repetition_s=arguments.min_repetition_time,
        database_path=arguments.db,
        use_database=not arguments.no_db,
        retune=arguments.retune,
        min_benchmark_timeout_s=arguments.benchmark_timeout,
        show_progress=arguments.progress,
        pipelines=tuple(arguments.pipeline),
        order=CandidateOrder(arguments.order),
        online=arguments.online,
        stop_after=StopAfter(arguments.stop_after) if arguments.stop_after else None,
        extra_flags=parse_flag_text(arguments.flags),
        search_flags=arguments.search_flags,
        overlap=arguments.overlap,
        screen_fraction=arguments.screen_fraction,
        prewarm=arguments.prewarm,
        references=References(arguments.references),
        executor=executor,
        ray=ray,
    )
    result = tune_dispatch(options)
    if options.stop_after is StopAfter.COMPILE:
        sys.stdout.write(
            f"compiled {result.problem.signature} into {result.run_dir} "
            f"(compile success {result.compile_success_rate:.0%}); next:\n"
            f"  {shlex.join(['ireetune', 'benchmark-folder', str(result.run_dir)])}"
            "   (or python -m ireetune.cli benchmark-folder)\n"
            f"  {shlex.join(['ireetune', 'finish', str(result.run_dir)])}\n"
            + (
                "  then, for the leaders' output checks: benchmark-folder and finish once more\n"
                if options.references is References.LEADERS
                else ""
            )
        )
        for note in result.notes[:-1]:
            sys.stdout.write(f"note: {note}\n")
        return 0
    sys.stdout.write(result.summary)
    sys.stdout.write(f"run folder: {result.run_dir}\n")
    if result.best_spec_path is not None:
        sys.stdout.write(f"best spec: {result.best_spec_path}\n")
    flags_file = result.run_dir / "tuned_flags.txt"
    if flags_file.exists():
        sys.stdout.write(f"global flags (iree-compile @FILE): {flags_file}\n")
    report_path = try_write_html_report(result.run_dir)
    if report_path is not None:
        sys.stdout.write(f"html report: {report_path}\n")
    return 0
