"""`ireetune tune-dispatch`: tune one dispatch and write its spec."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ireetune.commands.arguments import positive_int
from ireetune.handoff.export import StopAfter


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("tune-dispatch", help="tune one dispatch and write its spec")
    parser.add_argument(
        "input", type=Path, help="a *_benchmark.mlir dispatch dump or a model .mlir"
    )
    parser.add_argument(
        "--target", default="cpu", help="cpu | cuda:sm_80 | rocm:gfx942 (default cpu)"
    )
    parser.add_argument("--num-candidates", type=positive_int, default=32)
    parser.add_argument("--dispatch", help="for a model: the dispatch to tune, by name or index")
    parser.add_argument(
        "--output-dir", type=Path, default=Path("ireetune_runs"), help="parent of the run folder"
    )
    parser.add_argument(
        "--jobs", type=positive_int, default=None, help="parallel compiles (default: cores)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--devices", default="", help="comma-separated runtime devices (default: the target's)"
    )
    parser.add_argument("--repetitions", type=positive_int, default=5)
    parser.add_argument("--compile-timeout", type=float, default=120.0, help="seconds per compile")
    parser.add_argument(
        "--confirm-rounds",
        type=int,
        default=5,
        help="interleaved re-timing rounds of the leaders against the baseline (0 to skip)",
    )
    parser.add_argument(
        "--min-repetition-time",
        type=float,
        default=0.05,
        help="seconds one timed repetition should last at least (sets the batch size)",
    )
    parser.add_argument(
        "--pipeline", action="append", default=[], choices=("TileAndFuse", "VectorDistribute"),
        help="GPU targets: search only this codegen pipeline (repeatable; default: all)",
    )  # fmt: skip
    parser.add_argument(
        "--stop-after", choices=[stage.value for stage in StopAfter],
        help="compile: write a self-contained folder to measure with `ireetune benchmark-folder`",
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
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument(
        "--db", type=Path, default=None, help="tuning database (default: user cache)"
    )
    parser.add_argument("--no-db", action="store_true", help="neither read nor write the database")
    parser.add_argument("--retune", action="store_true", help="tune even if a stored result exists")
    parser.add_argument(
        "--benchmark-timeout",
        type=float,
        default=10.0,
        help="seconds allowed for loading one candidate, on top of 20x the baseline's run time",
    )
    parser.set_defaults(handler=run)


def run(arguments: argparse.Namespace) -> int:
    from ireetune.dispatch_tuner import CandidateOrder, TuneOptions, tune_dispatch

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
        confirm_rounds=max(0, arguments.confirm_rounds),
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
    )
    result = tune_dispatch(options)
    if options.stop_after is StopAfter.COMPILE:
        sys.stdout.write(
            f"compiled {result.problem.signature} into {result.run_dir} "
            f"(compile success {result.compile_success_rate:.0%}); next:\n"
            f"  ireetune benchmark-folder {result.run_dir}   (or python -m ireetune.benchmark.folder)\n"
            f"  ireetune finish {result.run_dir}\n"
        )
        return 0
    sys.stdout.write(result.summary)
    sys.stdout.write(f"run folder: {result.run_dir}\n")
    if result.best_spec_path is not None:
        sys.stdout.write(f"best spec: {result.best_spec_path}\n")
    return 0
