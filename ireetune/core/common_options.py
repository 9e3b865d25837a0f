"""The options several commands declare alike (`tune-dispatch`, `tune`, `profile`): one field
factory each (core/options.py), so that a flag's default, type and help are written once.

This module imports nothing heavy, as core/options.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ireetune.core.arguments import (
    TARGET_HELP,
    device_list,
    flag_text,
    positive_int,
    positive_seconds,
    seed,
    user_path,
)
from ireetune.core.options import option


def target_option(default: Any = "cpu") -> Any:
    """`--target`: what to compile for (default: this host's CPU; `dataclasses.MISSING`: the
    command needs it given)."""
    return option(default, flag="--target", help=f"what to compile for: {TARGET_HELP}")


def output_dir_option() -> Any:
    """`--output-dir`: the folder the run folder is made in."""
    return option(
        Path("ireetune_runs"), flag="--output-dir", type=user_path, help="parent of the run folder"
    )


def devices_option(help: str) -> Any:
    """`--devices`: the comma-separated runtime devices a command times on (none given: the
    target's or the manifest's, as `help` says)."""
    return option((), flag="--devices", type=device_list, help=help)


def jobs_option(default: int | None = 0, help: str = "parallel compiles (default: cores)") -> Any:
    """`--jobs`: parallel compiles (0, the default: one compile per core; `continue` takes None,
    the run's)."""
    return option(default, flag="--jobs", type=positive_int, help=help)


def num_candidates_option(default: int, help: str) -> Any:
    """`--num-candidates`: candidate configurations tried per dispatch (at least 1)."""
    return option(default, flag="--num-candidates", type=positive_int, help=help)


def rounds_option(default: int, help: str) -> Any:
    """`--rounds`: interleaved timing rounds (at least 1)."""
    return option(default, flag="--rounds", type=positive_int, help=help)


def device_option(help: str) -> Any:
    """`--device`: the one runtime device a command times on (None, the default: as `help`
    says)."""
    return option(None, flag="--device", help=help)


def search_flags_option(default: bool, help: str) -> Any:
    """Whether a run first searches the target's global flags: off by default behind
    `--search-flags` (tune-dispatch), on by default behind `--no-flag-search` (tune)."""
    if default:
        return option(True, flag="--no-flag-search", action="store_false", help=help)
    return option(False, flag="--search-flags", action="store_true", help=help)


def seed_option(help: str = "seed of the candidate sampling (same seed, same run)") -> Any:
    """`--seed`: the seed of everything random in a run."""
    return option(0, flag="--seed", type=seed, help=help)


def time_budget_option(help: str) -> Any:
    """`--time-budget`: seconds a run may spend (None, the default: no limit); the run's task
    scheduler shares them (core/budget.py)."""
    return option(None, flag="--time-budget", type=positive_seconds, help=help)


def repetitions_option(per: str) -> Any:
    """`--repetitions`: timed repetitions of each thing measured (`per`: what that is)."""
    return option(5, flag="--repetitions", type=positive_int, help=f"timed repetitions per {per}")


def compile_timeout_option() -> Any:
    """`--compile-timeout`: seconds one compile may take."""
    return option(
        120.0, flag="--compile-timeout", type=positive_seconds, help="seconds per compile"
    )


def show_progress_option() -> Any:
    """`--progress/--no-progress`: progress bars (None, the default: when stderr is a terminal)."""
    return option(
        None, flag="--progress", action="boolean_optional",
        help="show progress bars on stderr (default: when stderr is a terminal)",
    )  # fmt: skip


def database_path_option() -> Any:
    """`--db`: the tuning database file (None, the default: $IREETUNE_DB or the user's cache)."""
    return option(
        None, flag="--db", type=user_path,
        help="tuning database file (default: $IREETUNE_DB, else ~/.cache/ireetune/tuning.sqlite)",
    )  # fmt: skip


def use_database_option() -> Any:
    """`--no-db`: neither read nor write the database."""
    return option(
        True, flag="--no-db", action="store_false", help="neither read nor write the database"
    )


def retune_option(what: str) -> Any:
    """`--retune`: tune `what` even if the database holds a result."""
    return option(
        False, flag="--retune", action="store_true",
        help=f"tune {what}even if a stored result exists",
    )  # fmt: skip


def extra_flags_option(example: str) -> Any:
    """`--flags`: global iree-compile flags for every compile (`example`: one such flag)."""
    return option(
        (), flag="--flags", type=flag_text,
        help=f'extra global iree-compile flags for every compile, e.g. "{example}"',
    )  # fmt: skip
