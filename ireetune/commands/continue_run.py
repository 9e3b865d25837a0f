"""`ireetune continue RUN`: the compile host's next step of a split model run."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from ireetune.commands.shared import Subparsers, add_command, run_dir_option
from ireetune.core.arguments import positive_int
from ireetune.core.options import option


@dataclass(frozen=True)
class ContinueOptions:
    """What `ireetune continue` is asked to do."""

    run_dir: Path = run_dir_option("the model run folder (holds split.json)")
    # None: the parallel compiles the run was started with.
    jobs: int | None = option(
        None, flag="--jobs", type=positive_int, help="parallel compiles (default: the run's)"
    )


def register(subparsers: Subparsers) -> None:
    add_command(
        subparsers,
        "continue",
        "do what is due next in a split model run (after a device step)",
        "Continue a split model run (`ireetune tune MODEL --stop-after compile`) on "
        "the compile host: read the device step's results and do what is due next (compile the "
        "candidates of dispatches found hot, build and compile model variants, or decide and "
        "write the tuned spec and the report). Also resumes a compile phase that was stopped.",
        ContinueOptions,
        run,
    )


def run(options: ContinueOptions) -> int:
    from ireetune.model_tuner import continue_split_run, describe_status
    from ireetune.run_dir import check_run_folder

    check_run_folder(options.run_dir)
    sys.stdout.write(describe_status(continue_split_run(options.run_dir, options.jobs)))
    return 0
