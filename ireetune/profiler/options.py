"""What one `ireetune profile` run can be asked to do (`ProfileOptions`), declared once.

Each field that is also a `profile` option carries its flag and help (core/options.py), and
the command's parser is generated from them; the sweep's own flags (operations, dimensions,
types, layouts, problem and config files) and the output's stay with the command, which turns
them into operations. This module imports nothing heavy, so that building the parser never
imports the compiler or numpy.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from ireetune.core.arguments import (
    TARGET_HELP,
    comma_list,
    positive_float,
    positive_int,
    positive_seconds,
    seed,
)
from ireetune.core.options import option
from ireetune.profiler.configs import ConfigRequest

# Output elements checked when a problem is too large to check whole.
DEFAULT_SAMPLES = 4096


class Phase(enum.Enum):
    ALL = "all"
    COMPILE = "compile"
    RUN = "run"


@dataclass(frozen=True)
class ProfileOptions:
    """Everything one `ireetune profile` run can be asked to do.

    The options come in the order `profile --help` lists them (after the sweep's flags).
    """

    dispatch_patterns: tuple[str, ...] = option(
        (), flag="--dispatches", type=comma_list,
        help="comma-separated regexes selecting dispatches by name (default: all)",
    )  # fmt: skip
    target: str = option("cpu", flag="--target", help=f"what to compile for: {TARGET_HELP}")
    device: str | None = option(
        None, flag="--device",
        help="runtime device, e.g. local-task, cuda://0 (default: the target's)",
    )  # fmt: skip
    generated_dir: Path = option(
        Path("generated"), flag="--generated-dir", type=Path,
        help="the output tree (written by compile, read by run)",
    )  # fmt: skip
    phase: Phase = option(
        Phase.ALL, flag="--phase", choices=Phase,
        help="compile only, run (verify and profile) an already compiled tree, or both",
    )  # fmt: skip
    verify: bool = option(
        True, flag="--verify", action="boolean_optional",
        help="check every dispatch's outputs against a reference",
    )  # fmt: skip
    profile: bool = option(
        True, flag="--profile", action="boolean_optional", help="time every dispatch"
    )
    vendor: bool = option(
        True, flag="--vendor", action="boolean_optional",
        help="time the same problem with torch when it is importable",
    )  # fmt: skip
    repetitions: int = option(
        5, flag="--repetitions", type=positive_int, help="timed repetitions per dispatch"
    )
    # 0: one compile per core.
    jobs: int = option(
        0, flag="--jobs", type=positive_int, help="parallel compiles (default: cores)"
    )
    seed: int = option(
        0, flag="--seed", type=seed, help="seed of the random inputs and of sampled configs"
    )
    samples: int = option(
        DEFAULT_SAMPLES, flag="--samples", type=positive_int,
        help="output elements checked when a problem is too large to check whole",
    )  # fmt: skip
    peak_gflops: float | None = option(
        None, flag="--peak-gflops", type=positive_float,
        help="the device's peak, for Peak(%%) (default: a known peak for the device, if any)",
    )  # fmt: skip
    compile_timeout_s: float = option(
        120.0, flag="--compile-timeout", type=positive_seconds, help="seconds per compile"
    )
    show_progress: bool | None = option(
        None, flag="--progress", action="boolean_optional",
        help="show progress bars on stderr (default: when stderr is a terminal)",
    )  # fmt: skip
    # From `--configs` (the command parses it after checking its outputs against its files).
    configs: ConfigRequest = ConfigRequest(0, ())
    min_repetition_s: float = 0.02
    benchmark_timeout_s: float = 120.0
