"""`ireetune finish`: read a benchmarked folder back, pick the verified winner, write its spec."""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from ireetune.commands.shared import Subparsers, add_command, announce_html_report, run_dir_option
from ireetune.core.tools import path_argument


@dataclass(frozen=True)
class FinishOptions:
    """What `ireetune finish` is asked to do."""

    run_dir: Path = run_dir_option(
        "the run folder measured by `ireetune benchmark-folder` (holds benchmark_results.json)"
    )


def register(subparsers: Subparsers) -> None:
    add_command(
        subparsers,
        "finish",
        "pick the winner of a benchmarked folder and write its spec (`continue` does the same)",
        "Read the results `ireetune benchmark-folder` wrote into a run folder, pick "
        "the fastest verified candidate, prove its configuration lands and write best_spec.mlir.",
        FinishOptions,
        run,
    )


def run(options: FinishOptions) -> int:
    from ireetune.core.run_dir import check_run_folder
    from ireetune.flows.handoff.folder_trust import check_folder_trust

    check_run_folder(options.run_dir)
    check_folder_trust(options.run_dir, "finish")
    return finish_folder(options.run_dir, ("benchmark-folder", "finish"))


def finish_folder(run_dir: Path, verbs: tuple[str, str]) -> int:
    """Finish a measured dispatch folder (`finish`, or `continue` on such a folder) and print
    the verdict, or, where the leaders' reference programs were compiled now, the next two
    commands (`verbs`: the device host's, then this host's)."""
    from ireetune.flows.handoff.references import finish_measured_folder

    finished = finish_measured_folder(run_dir)
    if finished.compiled_references:
        # The folder deferred its reference programs: the leaders' are compiled now.
        sys.stdout.write(
            f"compiled the reference programs of candidates {', '.join(map(str, finished.compiled_references))}; "
            f"check their outputs where the device is, then finish:\n"
            f"  {shlex.join(['ireetune', verbs[0], path_argument(run_dir)])}\n"
            f"  {shlex.join(['ireetune', verbs[1], path_argument(run_dir)])}\n"
        )
        return 0
    result = finished.result
    assert result is not None
    sys.stdout.write(result.summary)
    if result.best_spec_path is not None:
        sys.stdout.write(f"best spec: {result.best_spec_path}\n")
    announce_html_report(result.run_dir)
    return 0
