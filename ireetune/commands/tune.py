"""`ireetune tune MODEL`: tune a whole model into one linked spec."""

from __future__ import annotations

import argparse
import sys

from ireetune.commands.shared import Subparsers, add_tuning_command, announce_html_report
from ireetune.flows.model.options import ModelTuneOptions


def register(subparsers: Subparsers) -> None:
    parser = add_tuning_command(
        subparsers,
        "tune",
        "tune a whole model (.mlir or .onnx) into one spec",
        "Tune a whole model: find its hot dispatches, tune each, and keep only the "
        "configurations that speed the whole model up, linked into one spec.",
        ModelTuneOptions,
        run,
    )
    # The command's own: it runs the model flow split between hosts (flows/model/split.py).
    parser.add_argument(
        "--stop-after", choices=["compile"], default=None,
        help="split the run for a GPU host without the compiler: compile here and write a run "
        "folder; then `ireetune measure RUN` there and `ireetune continue RUN` here, until "
        "the report (docs/split_flow.md)",
    )  # fmt: skip


def run(options: ModelTuneOptions, arguments: argparse.Namespace) -> int:
    from ireetune.flows.model.tuner import tune_model

    if options.externalize_weights and arguments.stop_after != "compile":
        from ireetune.core.errors import IreetuneError

        raise IreetuneError("--externalize-weights applies only with --stop-after compile")
    if arguments.stop_after == "compile":
        from ireetune.core.errors import IreetuneError
        from ireetune.flows.model.tuner import describe_status, prepare_split_run

        if options.time_budget_s is not None:
            raise IreetuneError(
                "--time-budget does not apply with --stop-after compile (a split run's time is "
                "spent on two hosts, between which it waits)"
            )
        # The compile half compiles with the chosen executor (`continue` runs on this host).
        status = prepare_split_run(options)
        sys.stdout.write(describe_status(status))
        return 0
    result = tune_model(options)
    sys.stdout.write((result.run_dir / "report.txt").read_text())
    sys.stdout.write(f"run folder: {result.run_dir}\n")
    announce_html_report(result.run_dir)
    return 0
