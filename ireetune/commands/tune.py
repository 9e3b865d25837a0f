"""`ireetune tune MODEL`: tune a whole model into one linked spec."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ireetune.commands.arguments import positive_int


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("tune", help="tune a whole model (.mlir or .onnx) into one spec")
    parser.add_argument(
        "model", type=Path, help="a model .mlir (anything iree-compile takes) or .onnx"
    )
    parser.add_argument("--target", default="cpu")
    parser.add_argument(
        "--input", action="append", default=[], help="SHAPExTYPE[=VALUE|=@file.npy], once per input"
    )
    parser.add_argument(
        "--coverage", type=float, default=0.9, help="share of model time to cover (default 0.9)"
    )
    parser.add_argument("--max-dispatches", type=positive_int, default=8)
    parser.add_argument(
        "--num-candidates", type=positive_int, default=24, help="candidates per dispatch tuned"
    )
    parser.add_argument(
        "--candidates-per-dispatch",
        type=positive_int,
        default=3,
        help="kept for model-level selection",
    )
    parser.add_argument("--time-budget", type=float, default=None, help="seconds for the whole run")
    parser.add_argument(
        "--with-default-specs", action="store_true", help="link IREE's shipped specs after ours"
    )
    parser.add_argument(
        "--rounds", type=positive_int, default=5, help="interleaved model timing rounds"
    )
    parser.add_argument("--output-dir", type=Path, default=Path("ireetune_runs"))
    parser.add_argument("--jobs", type=positive_int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--db", type=Path, default=None)
    parser.add_argument("--no-db", action="store_true")
    parser.add_argument("--retune", action="store_true")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None)
    parser.set_defaults(handler=run)


def run(arguments: argparse.Namespace) -> int:
    from ireetune.model_tuner import ModelTuneOptions, tune_model
    from ireetune.report.html_report import try_write_html_report

    result = tune_model(
        ModelTuneOptions(
            model_path=arguments.model,
            target=arguments.target,
            inputs=tuple(arguments.input),
            coverage=arguments.coverage,
            max_dispatches=arguments.max_dispatches,
            num_candidates=arguments.num_candidates,
            candidates_per_dispatch=arguments.candidates_per_dispatch,
            time_budget_s=arguments.time_budget,
            with_default_specs=arguments.with_default_specs,
            output_dir=arguments.output_dir,
            rounds=arguments.rounds,
            seed=arguments.seed,
            jobs=arguments.jobs or 0,
            database_path=arguments.db,
            use_database=not arguments.no_db,
            retune=arguments.retune,
            show_progress=arguments.progress,
        )
    )
    sys.stdout.write((result.run_dir / "report.txt").read_text())
    sys.stdout.write(f"run folder: {result.run_dir}\n")
    report_path = try_write_html_report(result.run_dir)
    if report_path is not None:
        sys.stdout.write(f"html report: {report_path}\n")
    return 0
