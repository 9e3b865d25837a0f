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
    comma_list,
    positive_float,
    positive_int,
    user_path,
)
from ireetune.core.common_options import (
    compile_timeout_option,
    device_option,
    jobs_option,
    repetitions_option,
    seed_option,
    show_progress_option,
    target_option,
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
    target: str = target_option()
    device: str | None = device_option(
        "runtime device, e.g. local-task, cuda://0 (default: the target's)"
    )
    generated_dir: Path = option(
        Path("generated"), flag="--generated-dir", type=user_path,
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
    repetitions: int = repetitions_option("dispatch")
    jobs: int = jobs_option()
    seed: int = seed_option("seed of the random inputs and of sampled configs")
    samples: int = option(
        DEFAULT_SAMPLES, flag="--samples", type=positive_int,
        help="output elements checked when a problem is too large to check whole",
    )  # fmt: skip
    peak_gflops: float | None = option(
        None, flag="--peak-gflops", type=positive_float,
        help="the device's peak, for Peak(%%) (default: a known peak for the device, if any)",
    )  # fmt: skip
    compile_timeout_s: float = compile_timeout_option()
    show_progress: bool | None = show_progress_option()
    # From `--configs` (the command parses it after checking its outputs against its files).
    configs: ConfigRequest = ConfigRequest(0, ())
    min_repetition_s: float = 0.02
    benchmark_timeout_s: float = 120.0
