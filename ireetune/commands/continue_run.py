"""`ireetune continue RUN`: continue any run folder on the compile host, whatever stopped it.

The folder says what it is (flows/continue_folder.py): a killed tune-dispatch run is resumed
after its last saved stage (as `resume`), a dispatch folder the device host measured is finished
(as `finish`), a model run goes on at the phase after the last one saved, a split one at the
compile host's next step.
"""

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
from ireetune.core.arguments import positive_int
from ireetune.core.options import option


@dataclass(frozen=True)
class ContinueOptions:
    """What `ireetune continue` is asked to do."""

    run_dir: Path = run_dir_option(
        "the run folder (of tune or tune-dispatch; killed, or back from the device host)"
    )
    # None: the parallel compiles the run was started with.
    jobs: int | None = option(
        None, flag="--jobs", type=positive_int, help="parallel compiles (default: the run's)"
    )
    # A folder is data (flows/handoff/folder_trust.py): what it may not choose, the person gives again.
    extra_flags: tuple[str, ...] = given_flags_option()
    database_path: Path | None = given_database_option()


def register(subparsers: Subparsers) -> None:
    add_command(
        subparsers,
        "continue",
        "continue any run folder: killed, or back from the device host",
        "Continue a run from its folder, whatever kind it is. A `ireetune tune-dispatch` run "
        "that was killed or interrupted runs the stages after the last one saved (as `ireetune "
        "resume`). A folder of `tune-dispatch --stop-after compile` that `ireetune measure` "
        "measured on the device host is finished: the verified winner is picked and its spec "
        "written (as `ireetune finish`). A `ireetune tune MODEL` run that was killed or "
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
    from ireetune.commands.finish import finish_folder
    from ireetune.commands.resume import resume_folder
    from ireetune.core.errors import IreetuneError
    from ireetune.core.run_dir import check_database_path, check_run_folder
    from ireetune.flows.continue_folder import FolderKind, check_measured, read_folder_kind
    from ireetune.flows.handoff.folder_trust import GivenAgain, check_folder_trust
    from ireetune.flows.model.tuner import continue_model_folder

    check_run_folder(options.run_dir)
    kind = read_folder_kind(options.run_dir)
    given = GivenAgain(options.extra_flags, options.database_path)
    if kind is FolderKind.DISPATCH_RUN:
        return resume_folder(options.run_dir, given, "continue")
    if kind is FolderKind.DISPATCH_FOLDER:
        if given != GivenAgain():
            raise IreetuneError(
                f"{options.run_dir} is a dispatch folder compiled with --stop-after compile: it "
                "is finished with the flags it was compiled with and no database (leave out "
                "--flags and --db)"
            )
        check_folder_trust(options.run_dir, "finish")
        check_measured(options.run_dir)
        return finish_folder(options.run_dir, ("measure", "continue"))
    check_folder_trust(options.run_dir, "continue", given)
    if options.database_path is not None:
        check_database_path(options.database_path)
    sys.stdout.write(continue_model_folder(options.run_dir, options.jobs, options.database_path))
    return 0
