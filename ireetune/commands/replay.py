"""`ireetune replay`: re-measure a run's winner against the default, side by side."""

from __future__ import annotations

import argparse
import sys

from ireetune.commands.shared import add_run_folder_command
from ireetune.core.arguments import positive_int


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_run_folder_command(
        subparsers,
        "replay",
        "re-measure a run's winner against the default, side by side",
        "Time the default and the run's winner (or --candidate N) interleaved in "
        "rounds, on the signal that decided the run, and print the speedup with its interval.",
        "a tune-dispatch or finish run folder",
    )
    parser.add_argument(
        "--candidate", type=positive_int, default=None, help="candidate id (default: the winner)"
    )
    parser.add_argument(
        "--rounds", type=positive_int, default=7, help="interleaved rounds (default: 7)"
    )
    parser.add_argument(
        "--repetitions", type=positive_int, default=5, help="timings per round (default: 5)"
    )
    parser.add_argument("--device", default=None, help="runtime device (default: the run's first)")
    parser.set_defaults(handler=run)


def run(arguments: argparse.Namespace) -> int:
    from ireetune.handoff.continue_run import ContinueAt, ContinueSettings, continue_run

    settings = ContinueSettings(
        candidate=arguments.candidate, rounds=arguments.rounds,
        repetitions=arguments.repetitions, device=arguments.device,
    )  # fmt: skip
    replayed = continue_run(arguments.run_dir, ContinueAt.REPLAY, settings).replayed
    assert replayed is not None
    candidate, estimate = replayed
    sys.stdout.write(
        f"candidate {candidate} vs default, {estimate.rounds} rounds side by side on "
        f"{estimate.basis.value} timing: {estimate.baseline_ms:.4f} -> {estimate.candidate_ms:.4f} ms, "
        f"{estimate.describe()} (95% interval)\n"
    )
    return 0
