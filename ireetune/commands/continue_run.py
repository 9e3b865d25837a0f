"""`ireetune continue RUN`: continue a model run from its folder (a stopped in-process run at
the phase after the last one saved; a split run at the compile host's next step)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from ireetune.commands.shared import (
    Subparsers,
    add_command,
    given_database_option,
    given_flags_option,
    run_dir_option,
)
from ireetune.core.common_options import jobs_option


@dataclass(frozen=True)
class ContinueOptions:
    """What `ireetune continue` is asked to do."""

    run_dir: Path = run_dir_option(
        "the model run folder (holds model_run.json, or split.json for a split run)"
    )
    # None: the parallel compiles the run was started with.
    jobs: int | None = jobs_option(None, "parallel compiles (default: the run's)")
    # A folder is data (flows/handoff/folder_trust.py): what it may not choose, the person gives again.
    extra_flags: tuple[str, ...] = given_flags_option()
    database_path: Path | None = given_database_option()


def register(subparsers: Subparsers) -> None:
    add_command(
        subparsers,
        "continue",
        "continue a stopped model run, or a split one after a device step",
        "Continue a model run from its folder. A `ireetune tune MODEL` run that was killed or "
        "interrupted is loaded as its last saved phase left it and the phases after that one "
        "run, on the same target and options (a dispatch phase cut short goes on with the "
        "dispatches not tuned yet). A split model run (`ireetune tune MODEL --stop-after "
        "compile`) does on the compile host what is due next: read the device step's results, "
        "compile the candidates of dispatches found hot, build and compile model variants, or "
        "decide and write the tuned spec and the report; a compile phase that was stopped is "
        "resumed.",
        ContinueOptions,
        run,
    )


def run(options: ContinueOptions) -> int:
    from ireetune.core.run_dir import check_database_path, check_run_folder
    from ireetune.flows.handoff.folder_trust import GivenAgain, check_folder_trust
    from ireetune.flows.model.tuner import continue_run

    check_run_folder(options.run_dir)
    check_folder_trust(
        options.run_dir, "continue", GivenAgain(options.extra_flags, options.database_path)
    )
    if options.database_path is not None:
        check_database_path(options.database_path)
    sys.stdout.write(continue_run(options.run_dir, options.jobs, options.database_path))
    return 0
