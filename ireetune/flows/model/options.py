"""What a whole-model tuning run can be asked to do (`ModelTuneOptions`), declared once.

Each field that is also a `tune` option carries its flag and help (core/options.py), and
the command's parser is generated from them. This module imports nothing heavy, so that building
the parser never imports the compiler.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ireetune.core.arguments import (
    fraction,
    positive_int,
    speedup_threshold,
    try_flag_text,
    user_path,
)
from ireetune.core.common_options import (
    database_path_option,
    devices_option,
    extra_flags_option,
    jobs_option,
    num_candidates_option,
    output_dir_option,
    retune_option,
    rounds_option,
    search_flags_option,
    seed_option,
    show_progress_option,
    target_option,
    time_budget_option,
    use_database_option,
)
from ireetune.core.options import option
from ireetune.decision.thresholds import MODEL_THRESHOLD
from ireetune.executor import ExecutorKind, RaySettings

# The share of the model's time the hot set covers when `--coverage` is not given and no time
# budget decides (`flows/model/phases.hot_coverage`).
DEFAULT_COVERAGE = 0.9


@dataclass(frozen=True)
class ModelTuneOptions:
    """Everything a whole-model tuning run can be asked to do.

    The options come in the order `tune --help` lists them; the fields after them are for the
    Python API (`--stop-after compile` is the command's: it runs the split flow instead).
    """

    model_path: Path = option(
        flag="model", type=user_path,
        help="the model: .mlir (anything iree-compile takes) or .onnx, with static shapes "
        "(or dynamic ones that --input fixes)",
    )  # fmt: skip
    target: str = target_option()
    inputs: tuple[str, ...] = option(
        (), flag="--input", action="append",
        help="one model input as SHAPExTYPE[=VALUE|=@file.npy], e.g. 1x3x224x224xf32 or "
        "16x32xsi8 (types as the model's signature spells them: f32, f16, bf16, i8...i64, "
        "si8...si64, ui8...ui64, i1), once per input in order; its sizes fix the model's dynamic "
        "ones (default: random inputs from the model's signature)",
    )  # fmt: skip
    function: str = option(
        "", flag="--function", metavar="NAME",
        help="the public function to tune, in a module of several (default: the only one)",
    )  # fmt: skip
    coverage: float | None = option(
        None, flag="--coverage", type=fraction,
        help=f"share of model time to cover, in (0, 1] (default: {DEFAULT_COVERAGE}; with "
        "--time-budget, 1: the budget decides which of the --max-dispatches are tuned)",
    )  # fmt: skip
    max_dispatches: int = option(
        8, flag="--max-dispatches", type=positive_int, help="most dispatches to tune"
    )
    num_candidates: int = num_candidates_option(24, "candidates per dispatch tuned")
    candidates_per_dispatch: int = option(
        3, flag="--candidates-per-dispatch", type=positive_int,
        help="best candidates per dispatch kept for model-level selection",
    )  # fmt: skip
    time_budget_s: float | None = time_budget_option(
        "seconds for the whole run (default: no limit)"
    )
    with_default_specs: bool = option(
        False, flag="--with-default-specs", action="store_true",
        help="link IREE's shipped specs after ours",
    )  # fmt: skip
    rounds: int = rounds_option(5, "interleaved model timing rounds")
    output_dir: Path = output_dir_option()
    jobs: int = jobs_option()
    seed: int = seed_option()
    database_path: Path | None = database_path_option()
    use_database: bool = use_database_option()
    retune: bool = retune_option("dispatches ")
    show_progress: bool | None = show_progress_option()
    # Runtime devices: the model is timed on the first; each dispatch's candidates on all.
    devices: tuple[str, ...] = devices_option(
        "comma-separated runtime devices: the model is timed on the first, each dispatch's "
        "candidates on all (default: the target's: local-task, cuda://0, hip://0)"
    )
    # Global iree-compile flags for every compile (the user's), and the flag phase's settings.
    extra_flags: tuple[str, ...] = extra_flags_option("--iree-opt-level=O3")
    search_flags: bool = search_flags_option(
        True, "skip the first phase (the search of the target's global compiler flags)"
    )
    max_flag_sets: int = option(
        48,
        flag="--max-flag-sets",
        type=positive_int,
        help="flag sets the flag phase compiles at most (the known-good ones first)",
    )
    # Flag sets to try instead of the target's flag space (`--try-flags`, repeatable).
    flag_sets: tuple[tuple[str, ...], ...] = option(
        (), flag="--try-flags", action="append", type=try_flag_text, metavar="FLAGS",
        help='a flag set for the flag phase to try instead of the target\'s (repeatable), e.g. '
        '"--iree-opt-data-tiling --iree-llvmcpu-enable-ukernels=mmt4d"',
    )  # fmt: skip
    # A flag set must make the model at least this much faster (its interval's lower bound).
    flag_threshold: float = option(
        MODEL_THRESHOLD, flag="--flag-threshold", type=speedup_threshold,
        help="a flag set is kept only if its speedup interval lies above this "
        f"(default {MODEL_THRESHOLD:g})",
    )  # fmt: skip
    # At the end of an ONNX model's run: the tuned model, the default and ONNX Runtime timed side
    # by side on this host (flows/model/deployment.py), when onnxruntime is installed.
    compare_onnxruntime: bool = option(
        True, flag="--no-onnxruntime", action="store_false",
        help="for an ONNX model, skip the final comparison with ONNX Runtime (made when "
        "onnxruntime is installed: the tuned model, the default and ONNX Runtime timed side by "
        "side, same inputs and threads, outputs checked)",
    )  # fmt: skip
    # An ONNX model's grouped convolutions as one convolution per group (frontend/onnx_groups.py):
    # always, never, or (None) in process where the split import times faster under the flags
    # kept (flows/model/import_choice.py).
    split_grouped_convs: bool | None = option(
        None, flag="--split-grouped-convs", action="boolean_optional",
        help="for an ONNX model, split each grouped convolution (more than one input channel a "
        "group) into one convolution per group before import, which IREE's CPU codegen runs far "
        "faster, and turn each strided convolution of at most 4 input channels into a "
        "space-to-depth and a stride-1 convolution; the tuned flags and spec are then for the "
        "run folder's import of the model "
        "(default: in process, the split import is compiled with the flag phase's winner, "
        "timed beside the model as given, and tuned from then on when faster, outputs equal; "
        "split across hosts, the model as given)",
    )  # fmt: skip
    # Split flow only: an ONNX model's weights go into one parameter archive beside the model,
    # which every binary reads at run time (small binaries to send to the device host).
    externalize_weights: bool = option(
        False, flag="--externalize-weights", action="store_true",
        help="with --stop-after compile and an ONNX model: keep the weights in one parameter "
        "archive (.irpa) that every model binary reads at run time, so that the binaries sent "
        "to the device host are small",
    )  # fmt: skip
    # Where compiles and measurements run (`--executor`, core/arguments.py): this host, or a
    # Ray cluster.
    executor: ExecutorKind = ExecutorKind.LOCAL
    ray: RaySettings = RaySettings()
