"""`ireetune resume RUN_DIR`: continue a killed tune-dispatch run from its folder."""

from __future__ import annotations

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

if TYPE_CHECKING:
    from ireetune.flows.handoff.folder_trust import GivenAgain


@dataclass(frozen=True)
class ResumeOptions:
    """What `ireetune resume` is asked to do."""

    run_dir: Path = run_dir_option(
        "the tune-dispatch run folder (holds run_options.json and results.json)"
    )
    # A folder is data (flows/handoff/folder_trust.py): what it may not choose, the person gives again.
    extra_flags: tuple[str, ...] = given_flags_option()
    database_path: Path | None = given_database_option()


def register(subparsers: Subparsers) -> None:
    add_command(
        subparsers,
        "resume",
        "continue a killed tune-dispatch run from its folder (`continue` does the same)",
        "Load a tune-dispatch run that was killed or interrupted from its folder (its options "
        "and every candidate's record, saved after each stage) and run the stages after the "
        "last one saved: what was compiled is not compiled again, timings taken are kept.",
        ResumeOptions,
        run,
    )


def run(options: ResumeOptions) -> int:
    from ireetune.core.errors import IreetuneError
    from ireetune.core.run_dir import check_run_folder
    from ireetune.flows.handoff.folder_trust import GivenAgain
    from ireetune.flows.model.local_state import MODEL_RUN_NAME

    check_run_folder(options.run_dir)
    if (options.run_dir / MODEL_RUN_NAME).is_file():
        raise IreetuneError(
            f"{options.run_dir} is a model run (`ireetune tune`): continue it with "
            f"`ireetune continue {options.run_dir}`"
        )
    given = GivenAgain(options.extra_flags, options.database_path)
    return resume_folder(options.run_dir, given, "resume")


def resume_folder(run_dir: Path, given: GivenAgain, command: str) -> int:
    """Resume a killed tune-dispatch run (`resume`, or `continue` on such a folder) and print
    its verdict."""
    from ireetune.core.run_dir import check_database_path
    from ireetune.flows.dispatch.resume import resume_dispatch
    from ireetune.flows.handoff.folder_trust import check_folder_trust

    check_folder_trust(run_dir, command, given)
    if given.database_path is not None:
        check_database_path(given.database_path)
    result = resume_dispatch(run_dir, database_path=given.database_path)
    sys.stdout.write(result.summary)
    sys.stdout.write(f"run folder: {result.run_dir}\n")
    if result.best_spec_path is not None:
        sys.stdout.write(f"best spec: {result.best_spec_path}\n")
    announce_html_report(result.run_dir)
    return 0
