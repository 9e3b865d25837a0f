"""What a dispatch tuning run can be asked to do (`TuneOptions`), declared once.

Each field that is also a `tune-dispatch` option carries its flag and help (core/options.py),
and the command's parser is generated from them. This module imports nothing heavy, so that
building the parser never imports the compiler (the runtime-only device host builds it too).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from ireetune.core.arguments import (
    fraction,
    non_negative_int,
    non_negative_seconds,
    positive_int,
    positive_seconds,
    speedup_threshold,
    user_path,
)
from ireetune.core.common_options import (
    compile_timeout_option,
    database_path_option,
    devices_option,
    extra_flags_option,
    jobs_option,
    num_candidates_option,
    output_dir_option,
    repetitions_option,
    retune_option,
    search_flags_option,
    seed_option,
    show_progress_option,
    target_option,
    time_budget_option,
    use_database_option,
)
from ireetune.core.options import option, setting
from ireetune.executor import ExecutorKind, RaySettings
from ireetune.search.strategies import strategy_names


class StopAfter(enum.Enum):
    """Where `tune-dispatch --stop-after` ends a run."""

    COMPILE = "compile"


class References(enum.Enum):
    """Which reference programs (the output checks' binaries) a split run compiles, and when.

    LEADERS: none now; `continue` compiles those of the leaders the benchmarking side chose, and
    the benchmarking side checks their outputs in a second pass (each candidate is compiled once,
    a leader twice). ALL: every candidate's now, so one trip to the device host is enough.
    """

    LEADERS = "leaders"
    ALL = "all"


@dataclass(frozen=True)
class TuneOptions:
    """Everything a dispatch tuning run can be asked to do.

    The options come in the order `tune-dispatch --help` lists them; the fields after them are
    for the Python API and the flows that call `tune_dispatch` (the model tuner, benchmarks).
    """

    input_path: Path = option(
        flag="input", type=user_path,
        help="a *_benchmark.mlir dispatch dump (iree-compile "
        "--iree-hal-dump-executable-benchmarks-to) or a model .mlir with static shapes",
    )  # fmt: skip
    target: str = target_option()
    num_candidates: int = num_candidates_option(32, "candidate configurations to try")
    time_budget_s: float | None = time_budget_option(
        "seconds for the run: it measures its candidates in parts and starts none that could not "
        "end in time, with the leaders' confirmation and checks (default: no limit)"
    )
    dispatch: str | None = option(
        None, flag="--dispatch",
        help="for a model with several dispatches: the one to tune, by name or index "
        "(default: the only one; a model with several lists them)",
    )  # fmt: skip
    output_dir: Path = output_dir_option()
    jobs: int = jobs_option()
    seed: int = seed_option()
    devices: tuple[str, ...] = devices_option(
        "comma-separated runtime devices to time on (default: the target's: local-task for cpu, "
        "cuda://0 for cuda, hip://0 for rocm)"
    )
    repetitions: int = repetitions_option("candidate")
    compile_timeout_s: float = compile_timeout_option()
    confirm_rounds: int = option(
        5, flag="--confirm-rounds", type=non_negative_int,
        help="interleaved re-timing rounds of the leaders against the baseline (0 to skip)",
    )  # fmt: skip
    min_repetition_s: float = option(
        0.05, flag="--min-repetition-time", type=non_negative_seconds,
        help="seconds one timed repetition should last at least (sets the batch size)",
    )  # fmt: skip
    pipelines: tuple[str, ...] = option(
        (), flag="--pipeline", action="append", choices=(
            "TileAndFuse", "VectorDistribute", "BaseVectorize", "MatmulPromoteVectorize",
            "CooperativeMatrixVectorize",
        ),
        help="GPU targets: search only this codegen pipeline (TileAndFuse or VectorDistribute "
        "on CUDA and ROCm, the other three on Vulkan; repeatable; default: all)",
    )  # fmt: skip
    stop_after: StopAfter | None = option(
        None, flag="--stop-after", choices=StopAfter,
        help="compile: write a self-contained folder to measure with `ireetune measure`, then "
        "`ireetune continue` here (default: run every stage here)",
    )  # fmt: skip
    # With stop_after COMPILE: compile the reference programs of the leaders only, later (the
    # default: each candidate compiled once), or of every candidate now (one device trip).
    references: References = option(
        References.LEADERS, flag="--references", choices=References,
        help="with --stop-after compile: compile the output checks' reference programs of the "
        "leaders only, in `continue` after measuring (default; each candidate is compiled once, "
        "the device host checks outputs on a second call), or of every candidate now (one trip)",
    )  # fmt: skip
    # The search strategy, by name (ireetune/search/strategies/).
    order: str = option(
        "auto", flag="--order", choices=strategy_names(),
        help="which candidates to compile: the ranker's best (the learned cost model) when the database can "
        "teach one, else the heuristic's (auto, default); the ranker's, the heuristic's, or "
        "random ones (a baseline for the others)",
    )  # fmt: skip
    # With a ranker, measure in rounds and re-rank the rest of the pool between them.
    online: bool = option(
        True, flag="--online", action="boolean_optional",
        help="with a ranker, measure in rounds and re-rank the rest between them "
        "(default: on)",
    )  # fmt: skip
    show_progress: bool | None = show_progress_option()
    database_path: Path | None = database_path_option()
    use_database: bool = use_database_option()
    retune: bool = retune_option("")
    min_benchmark_timeout_s: float = option(
        10.0, flag="--benchmark-timeout", type=positive_seconds,
        help="seconds allowed for loading one candidate (runs are stopped at 5x the baseline's "
        "time)",
    )  # fmt: skip
    # Measure candidates while the rest compile (None: where the device is not the host's CPU).
    overlap: bool | None = option(
        None, flag="--overlap", action="boolean_optional",
        help="measure candidates while the rest still compile (default: on for GPU devices, off "
        "on the host's CPU, where compiles would take the cores being measured)",
    )  # fmt: skip
    # The first pass's batch as a share of the baseline's; processes that JIT ahead (None: by
    # device, see CampaignSettings.for_device).
    screen_fraction: float | None = option(
        None, flag="--screen-fraction", type=fraction,
        help="first pass: time batches of this share of the baseline's batch; the leaders' "
        "confirmation always uses the full batch (default: 1 on the CPU, 0.25 on GPUs)",
    )  # fmt: skip
    prewarm: int | None = option(
        None, flag="--prewarm", type=non_negative_int,
        help="processes that load (JIT) the next candidates while one is measured "
        "(default: up to 4 on GPUs, half the cores at most; 0 on the CPU)",
    )  # fmt: skip
    # Global iree-compile flags for every compile (`--flags`; the model tuner's flag winner).
    extra_flags: tuple[str, ...] = extra_flags_option("--iree-opt-data-tiling")
    # Search the target's flag space first (`--search-flags`): on the model when the input is
    # one, else on the dispatch benchmark; the winner joins `extra_flags`.
    search_flags: bool = search_flags_option(
        False,
        "first search the target's global flags (on the model, or on the dispatch benchmark "
        "itself) and tune under the winner",
    )
    hopeless_factor: float = setting(5.0, type=speedup_threshold)
    verify_top: int = setting(3, type=non_negative_int)
    confirm_top: int = setting(4, type=non_negative_int)
    # Confirm only leaders whose first pass reached this speedup (campaign.CampaignSettings).
    confirm_above: float = setting(0.0, type=speedup_threshold)
    model_level_rounds: int = setting(7, type=positive_int)
    threshold: float = setting(1.02, type=speedup_threshold)
    # Search and decide on the dispatch benchmark, batched, where the target decides on real
    # inputs (the CPU); the contenders' outputs are still checked on real inputs. The model flow
    # sets it: its dumped benchmarks are zeroed and run back to back, as the model runs them,
    # and the whole model decides. Not on the command line: a benchmark dumped by hand holds an
    # uninitialised buffer (denormals on the CPU).
    decide_on_dispatch_benchmark: bool = False
    # Where compiles and measurements run (`--executor`, core/arguments.py): this host, or a
    # Ray cluster.
    executor: ExecutorKind = ExecutorKind.LOCAL
    ray: RaySettings = RaySettings()
