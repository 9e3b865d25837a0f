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
    parser.add_argument(
        "--flags", default="",
        help='extra global iree-compile flags for every compile, e.g. "--iree-opt-level=O3"',
    )  # fmt: skip
    parser.add_argument(
        "--no-flag-search", action="store_true",
        help="skip the first phase (the search of the target's global compiler flags)",
    )  # fmt: skip
    parser.add_argument(
        "--max-flag-sets", type=positive_int, default=24, help="flag sets the flag phase compiles"
    )
    parser.add_argument(
        "--try-flags", action="append", default=[], metavar="FLAGS",
        help='a flag set for the flag phase to try instead of the target\'s (repeatable), e.g. '
        '"--iree-opt-data-tiling --iree-llvmcpu-enable-ukernels=mmt4d"',
    )  # fmt: skip
    parser.add_argument(
        "--flag-threshold", type=float, default=1.01,
        help="a flag set is kept only if its speedup interval lies above this (default 1.01)",
    )  # fmt: skip
    parser.set_defaults(handler=run)


def run(arguments: argparse.Namespace) -> int:
    from ireetune.flags.check import parse_flag_text
    from ireetune.model_tuner import ModelTuneOptions, tune_model

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
            extra_flags=parse_flag_text(arguments.flags),
            search_flags=not arguments.no_flag_search,
            max_flag_sets=arguments.max_flag_sets,
            flag_sets=tuple(parse_flag_text(text) for text in arguments.try_flags),
            flag_threshold=arguments.flag_threshold,
        )
    )
    sys.stdout.write((result.run_dir / "report.txt").read_text())
    sys.stdout.write(f"run folder: {result.run_dir}\n")
    return 0
