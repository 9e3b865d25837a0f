"""`ireetune resume RUN_DIR`: continue a killed tune-dispatch run from its folder."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from ireetune.commands.shared import Subparsers, add_command, announce_html_report, run_dir_option


@dataclass(frozen=True)
class ResumeOptions:
    """What `ireetune resume` is asked to do."""

    run_dir: Path = run_dir_option(
        "the tune-dispatch run folder (holds run_options.json and results.json)"
    )


def register(subparsers: Subparsers) -> None:
    add_command(
        subparsers,
        "resume",
        "continue a killed tune-dispatch run from its folder",
        "Load a tune-dispatch run that was killed or interrupted from its folder (its options "
        "and every candidate's record, saved after each stage) and run the stages after the "
        "last one saved: what was compiled is not compiled again, timings taken are kept.",
        ResumeOptions,
        run,
    )


def run(options: ResumeOptions) -> int:
    from ireetune.errors import IreetuneError
    from ireetune.handoff.resume import resume_dispatch
    from ireetune.model_run.local_state import MODEL_RUN_NAME
    from ireetune.run_dir import check_run_folder

    check_run_folder(options.run_dir)
    if (options.run_dir / MODEL_RUN_NAME).is_file():
        raise IreetuneError(
            f"{options.run_dir} is a model run (`ireetune tune`): continue it with "
            f"`ireetune continue {options.run_dir}`"
        )
    result = resume_dispatch(options.run_dir)
    sys.stdout.write(result.summary)
    sys.stdout.write(f"run folder: {result.run_dir}\n")
    if result.best_spec_path is not None:
        sys.stdout.write(f"best spec: {result.best_spec_path}\n")
    announce_html_report(result.run_dir)
    return 0
