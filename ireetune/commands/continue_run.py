"""`ireetune continue RUN`: continue any run folder on the compile host, whatever stopped it.

The folder says what it is (flows/continue_folder.py): a killed tune-dispatch run is resumed
after its last saved stage, a dispatch folder the device host measured is finished, a model run
goes on at the phase after the last one saved, a split one at the compile host's next step.
`resume` and `finish`, the names the first two had, are kept as aliases for old scripts, each for
its kind of folder; what they print teaches `continue` and `measure`.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ireetune.commands.shared import (
    Subparsers,
    add_command,
    announce_html_report,
    given_database_option,
    given_flags_option,
    run_dir_option,
)
from ireetune.core.tools import path_argument

if TYPE_CHECKING:
    from ireetune.flows.handoff.folder_trust import GivenAgain
from ireetune.core.common_options import jobs_option


@dataclass(frozen=True)
class ContinueOptions:
    """What `ireetune continue` is asked to do."""

    run_dir: Path = run_dir_option(
        "the run folder (of tune or tune-dispatch; killed, or back from the device host)"
    )
    # None: the parallel compiles the run was started with.
    jobs: int | None = jobs_option(None, "parallel compiles (default: the run's)")
    # A folder is data (flows/handoff/folder_trust.py): what it may not choose, the person gives again.
    extra_flags: tuple[str, ...] = given_flags_option()
    database_path: Path | None = given_database_option()


@dataclass(frozen=True)
class ResumeOptions:
    """What `ireetune resume` is asked to do."""

    run_dir: Path = run_dir_option(
        "the tune-dispatch run folder (holds run_options.json and results.json)"
    )
    # A folder is data (flows/handoff/folder_trust.py): what it may not choose, the person gives again.
    extra_flags: tuple[str, ...] = given_flags_option()
    database_path: Path | None = given_database_option()


@dataclass(frozen=True)
class FinishOptions:
    """What `ireetune finish` is asked to do."""

    run_dir: Path = run_dir_option(
        "the run folder measured by `ireetune measure` (holds benchmark_results.json)"
    )


def register(subparsers: Subparsers) -> None:
    add_command(
        subparsers,
        "continue",
        "continue any run folder: killed, or back from the device host",
        "Continue a run from its folder, whatever kind it is. A `ireetune tune-dispatch` run "
        "that was killed or interrupted runs the stages after the last one saved. A folder of "
        "`tune-dispatch --stop-after compile` that `ireetune measure` measured on the device "
        "host is finished: the verified winner is picked and its spec written. A `ireetune "
        "tune MODEL` run that was killed or "
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
    # The names two kinds of continuing had, kept for old scripts.
    add_command(
        subparsers,
        "resume",
        "old name of `continue` for a killed tune-dispatch run, kept for old scripts",
        "Load a tune-dispatch run that was killed or interrupted from its folder (its options "
        "and every candidate's record, saved after each stage) and run the stages after the "
        "last one saved: what was compiled is not compiled again, timings taken are kept.",
        ResumeOptions,
        run_as_resume,
    )
    add_command(
        subparsers,
        "finish",
        "old name of `continue` for a measured dispatch folder, kept for old scripts",
        "Read the results `ireetune measure` wrote into a run folder, pick the fastest verified "
        "candidate, prove its configuration lands and write best_spec.mlir (as `ireetune "
        "continue` does).",
        FinishOptions,
        run_as_finish,
    )


def run(options: ContinueOptions) -> int:
    from ireetune.core.errors import IreetuneError
    from ireetune.core.run_dir import check_database_path, check_run_folder
    from ireetune.flows.continue_folder import FolderKind, check_measured, read_folder_kind
    from ireetune.flows.handoff.folder_trust import GivenAgain, check_folder_trust
    from ireetune.flows.model.tuner import continue_model_folder

    check_run_folder(options.run_dir)
    kind = read_folder_kind(options.run_dir)
    given = GivenAgain(options.extra_flags, options.database_path)
    if kind is FolderKind.DISPATCH_RUN:
        return resume_folder(options.run_dir, given)
    if kind is FolderKind.DISPATCH_FOLDER:
        if given != GivenAgain():
            raise IreetuneError(
                f"{options.run_dir} is a dispatch folder compiled with --stop-after compile: it "
                "is finished with the flags it was compiled with and no database (leave out "
                "--flags and --db)"
            )
        check_folder_trust(options.run_dir, "finish")
        check_measured(options.run_dir)
        return finish_folder(options.run_dir)
    check_folder_trust(options.run_dir, "continue", given)
    if options.database_path is not None:
        check_database_path(options.database_path)
    sys.stdout.write(continue_model_folder(options.run_dir, options.jobs, options.database_path))
    return 0


def run_as_resume(options: ResumeOptions) -> int:
    from ireetune.core.errors import IreetuneError
    from ireetune.core.run_dir import check_run_folder
    from ireetune.flows.handoff.folder_trust import GivenAgain
    from ireetune.flows.model.state import MODEL_RUN_NAME

    check_run_folder(options.run_dir)
    if (options.run_dir / MODEL_RUN_NAME).is_file():
        raise IreetuneError(
            f"{options.run_dir} is a model run (`ireetune tune`): continue it with "
            f"`ireetune continue {options.run_dir}`"
        )
    given = GivenAgain(options.extra_flags, options.database_path)
    return resume_folder(options.run_dir, given)


def resume_folder(run_dir: Path, given: GivenAgain) -> int:
    """Resume a killed tune-dispatch run (`resume`, or `continue` on such a folder) and print
    its verdict."""
    from ireetune.core.run_dir import check_database_path
    from ireetune.flows.dispatch.resume import resume_dispatch
    from ireetune.flows.handoff.folder_trust import check_folder_trust

    check_folder_trust(run_dir, "continue", given)
    if given.database_path is not None:
        check_database_path(given.database_path)
    result = resume_dispatch(run_dir, database_path=given.database_path)
    sys.stdout.write(result.summary)
    sys.stdout.write(f"run folder: {result.run_dir}\n")
    if result.best_spec_path is not None:
        sys.stdout.write(f"best spec: {result.best_spec_path}\n")
    announce_html_report(result.run_dir)
    return 0


def run_as_finish(options: FinishOptions) -> int:
    from ireetune.core.run_dir import check_run_folder
    from ireetune.flows.handoff.folder_trust import check_folder_trust

    check_run_folder(options.run_dir)
    check_folder_trust(options.run_dir, "finish")
    return finish_folder(options.run_dir)


def finish_folder(run_dir: Path) -> int:
    """Finish a measured dispatch folder (`finish`, or `continue` on such a folder) and print
    the verdict, or, where the leaders' reference programs were compiled now, the next two
    commands (the device host's, then this host's)."""
    from ireetune.flows.handoff.references import finish_measured_folder

    finished = finish_measured_folder(run_dir)
    if finished.compiled_references:
        # The folder deferred its reference programs: the leaders' are compiled now.
        sys.stdout.write(
            f"compiled the reference programs of candidates {', '.join(map(str, finished.compiled_references))}; "
            f"check their outputs where the device is, then finish:\n"
            f"  {shlex.join(['ireetune', 'measure', path_argument(run_dir)])}\n"
            f"  {shlex.join(['ireetune', 'continue', path_argument(run_dir)])}\n"
        )
        return 0
    result = finished.result
    assert result is not None
    sys.stdout.write(result.summary)
    if result.best_spec_path is not None:
        sys.stdout.write(f"best spec: {result.best_spec_path}\n")
    announce_html_report(result.run_dir)
    return 0
