"""`ireetune tune MODEL`: tune a whole model into one linked spec."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ireetune.commands.arguments import (
    TARGET_HELP,
    add_executor_arguments,
    device_list,
    fraction,
    parse_executor,
    positive_int,
    positive_seconds,
    seed,
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "tune",
        help="tune a whole model (.mlir or .onnx) into one spec",
        description="Tune a whole model: find its hot dispatches, tune each, and keep only the "
        "configurations that speed the whole model up, linked into one spec.",
    )
    parser.add_argument(
        "model",
        type=Path,
        help="the model: .mlir (anything iree-compile takes) or .onnx, with static shapes",
    )
    parser.add_argument("--target", default="cpu", help=f"what to compile for: {TARGET_HELP}")
    parser.add_argument(
        "--input",
        action="append",
        default=[],
        help="one model input as SHAPExTYPE[=VALUE|=@file.npy], e.g. 1x3x224x224xf32, once per "
        "input in order (default: random inputs from the model's signature)",
    )
    parser.add_argument(
        "--coverage", type=fraction, default=0.9, help="share of model time to cover, in (0, 1]"
    )
    parser.add_argument(
        "--max-dispatches", type=positive_int, default=8, help="most dispatches to tune"
    )
    parser.add_argument(
        "--num-candidates", type=positive_int, default=24, help="candidates per dispatch tuned"
    )
    parser.add_argument(
        "--candidates-per-dispatch",
        type=positive_int,
        default=3,
        help="best candidates per dispatch kept for model-level selection",
    )
    parser.add_argument(
        "--time-budget",
        type=positive_seconds,
        default=None,
        help="seconds for the whole run (default: no limit)",
    )
    parser.add_argument(
        "--with-default-specs", action="store_true", help="link IREE's shipped specs after ours"
    )
    parser.add_argument(
        "--rounds", type=positive_int, default=5, help="interleaved model timing rounds"
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
        "--db",
        type=Path,
        default=None,
        help="tuning database file (default: $IREETUNE_DB, else ~/.cache/ireetune/tuning.sqlite)",
    )
    parser.add_argument("--no-db", action="store_true", help="neither read nor write the database")
    parser.add_argument(
        "--retune", action="store_true", help="tune dispatches even if a stored result exists"
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show progress bars on stderr (default: when stderr is a terminal)",
    )
    parser.add_argument(
        "--devices",
        type=device_list,
        default="",
        help="comma-separated runtime devices: the model is timed on the first, each dispatch's "
        "candidates on all (default: the target's: local-task, cuda://0, hip://0)",
    )
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
    parser.add_argument(
        "--stop-after", choices=["compile"], default=None,
        help="split the run for a GPU host without the compiler: compile here and write a run "
        "folder; then `ireetune device-step RUN` there and `ireetune continue RUN` here, until "
        "the report (docs/split_flow.md)",
    )  # fmt: skip
    parser.add_argument(
        "--externalize-weights", action="store_true",
        help="with --stop-after compile and an ONNX model: keep the weights in one parameter "
        "archive (.irpa) that every model binary reads at run time, so that the binaries sent "
        "to the device host are small",
    )  # fmt: skip
    add_executor_arguments(parser)
    parser.set_defaults(handler=run)


def run(arguments: argparse.Namespace) -> int:
    from ireetune.flags.check import parse_flag_text
    from ireetune.model_tuner import ModelTuneOptions, tune_model
    from ireetune.report.html_report import try_write_html_report
    from ireetune.run_dir import check_database_path, check_output_dir

    check_output_dir(arguments.output_dir)
    if not arguments.no_db:
        check_database_path(arguments.db)

    executor, ray = parse_executor(arguments)
    options = ModelTuneOptions(
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
        devices=arguments.devices,
        search_flags=not arguments.no_flag_search,
        max_flag_sets=arguments.max_flag_sets,
        flag_sets=tuple(parse_flag_text(text) for text in arguments.try_flags),
        flag_threshold=arguments.flag_threshold,
        externalize_weights=arguments.externalize_weights,
        executor=executor,
        ray=ray,
    )
    if arguments.externalize_weights and arguments.stop_after != "compile":
        from ireetune.errors import IreetuneError

        raise IreetuneError("--externalize-weights applies only with --stop-after compile")
    if arguments.stop_after == "compile":
        from ireetune.errors import IreetuneError
        from ireetune.model.split_flow import describe_status, prepare_split_run

        if arguments.time_budget is not None or arguments.try_flags:
            raise IreetuneError(
                "--time-budget and --try-flags do not apply with --stop-after compile (the "
                "split flow has no flag phase; give flags with --flags)"
            )
        # The compile half compiles with the chosen executor (`continue` runs on this host).
        status = prepare_split_run(options)
        sys.stdout.write(describe_status(status))
        return 0
    result = tune_model(options)
    sys.stdout.write((result.run_dir / "report.txt").read_text())
    sys.stdout.write(f"run folder: {result.run_dir}\n")
    report_path = try_write_html_report(result.run_dir)
    if report_path is not None:
        sys.stdout.write(f"html report: {report_path}\n")
    return 0
