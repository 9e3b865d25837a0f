"""`ireetune replay`: re-measure a run's winner against the default, side by side."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from ireetune.commands.shared import Subparsers, add_command, given_flags_option, run_dir_option
from ireetune.core.arguments import positive_int
from ireetune.core.common_options import device_option, rounds_option
from ireetune.core.options import option


@dataclass(frozen=True)
class ReplayOptions:
    """What `ireetune replay` is asked to do."""

    run_dir: Path = run_dir_option("a tune-dispatch run folder (one continued after `measure` too)")
    candidate: int | None = option(
        None, flag="--candidate", type=positive_int, help="candidate id (default: the winner)"
    )
    rounds: int = rounds_option(7, "interleaved rounds (default: 7)")
    repetitions: int = option(
        5, flag="--repetitions", type=positive_int, help="timings per round (default: 5)"
    )
    device: str | None = device_option("runtime device (default: the run's first)")
    # A folder is data (flows/handoff/folder_trust.py): its flags beyond the flag search's are given
    # again.
    extra_flags: tuple[str, ...] = given_flags_option()


def register(subparsers: Subparsers) -> None:
    add_command(
        subparsers,
        "replay",
        "re-measure a run's winner against the default, side by side",
        "Time the default and the run's winner (or --candidate N) interleaved in "
        "rounds, on the signal that decided the run, and print the speedup with its interval.",
        ReplayOptions,
        run,
    )


def run(options: ReplayOptions) -> int:
    from ireetune.flows.handoff.folder_trust import GivenAgain, check_folder_trust
    from ireetune.report.replay import load_replay_run, replay_stage

    check_folder_trust(options.run_dir, "replay", GivenAgain(options.extra_flags))
    # The run continued at one stage of its own: the winner against the default.
    replay_run = load_replay_run(options.run_dir, options.candidate, options.device)
    replay_run.rounds, replay_run.repetitions = options.rounds, options.repetitions
    replay_stage(replay_run)
    estimate = replay_run.estimate
    assert estimate is not None
    sys.stdout.write(
        f"candidate {replay_run.candidate_id} vs default, {estimate.rounds} rounds side by side on "
        f"{estimate.basis.value} timing: {estimate.baseline_ms:.4f} -> {estimate.candidate_ms:.4f} ms, "
        f"{estimate.describe()} (95% interval)\n"
    )
    return 0
