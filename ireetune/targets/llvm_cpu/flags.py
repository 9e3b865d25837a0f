"""The llvm-cpu target's global compiler options and local-task runtime options, as data.

Read from `iree-compile --help-list-hidden` of IREE 3.13 (options matching llvmcpu,
dispatch-creation, global-opt, const-eval, data-tiling, ukernel, opt-) and kept when setting
them changed the binary of a small model on this project's AVX-512 machine (2026-11-25, with
and without data tiling: a convolution, matmul and softmax model; an attention-like model with
a transpose, a concat and a constant; a 512^3 matmul for the data-tiled tile options).
Defaults are the compiler's (`llvm::cl::init` in the 3.13 sources, and checked: each option
with a value for default compiles to the default's binary, tests/flags/test_flag_runtime.py); a
value equal to the default is never spelled. Left out: options that changed no probe's binary
(aggressive fusion and reshape movement, split reduction, fuse multi-use, matmul-producer
fusion blocking, multi-reduction fusion, collapse propagation, outer-dim concat,
sink-transpose-through-pad, edge reshape propagation, decompose-softmax
fusion, vector peeling off, vector-contract custom kernels, `--iree-dispatch-creation-data-tiling`
which equals `--iree-opt-data-tiling`), options that are not about speed (debug, sanitizers,
linking, target selection, numeric precision reduction), and those for other CPUs (SME, SVE,
RISC-V). Values that fail to compile on some CPUs (narrow vectors) are kept: a set that does
not compile is dropped by the search. Checked again on SqueezeNet under its kept flags
(channels-last, im2col, data tiling; 2026-11-29): aggressive fusion, padding fusion,
multi-use encoding fusion, binding optimisation off and mutable-binding aliasing each
change its binary but timed within noise of it (paired medians 0.98-1.01), outer-dim concat
changes nothing, and the `padding` encoding strategy made it 3.9x slower: still left out.

One preprocessing pipeline is an option of its own: convolutions to channels-last (added
2026-11-28 after the ONNX CNNs of bench/vs_onnxruntime.py, all NCHW: it changes SqueezeNet's
and MobileNet-v2's binaries under the data-tiled flags, and with it transpose propagation
through convolutions and aggressive transpose propagation, which change nothing alone, change
them again; hence their dependence on it). Its NCHWc form (`tiling-factor=8` or 16) fails to
compile a 3-channel image input, so it is not offered.

A model with NCHW depthwise convolutions or pools gets one more option, made for it: a
preprocessing transform spec that turns them channels-last too, in two forms (`window_layout.py`,
which says why), each tried with the channels-last pipeline and aggressive transpose propagation
as seeds of its own, alone and on the convolution seed (`with_channels_last_windows`).

`CPU_FLAG_SPACE.options` and `.combinations` are the fixed list the searches tried before the
space was searched; they seed the flag phase's search, which then changes `tuned` options one
at a time (`flags/strategy.py`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path

from ireetune.core.flag_space import FlagOption, FlagSpace, RuntimeOption, TunedOption
from ireetune.targets.llvm_cpu.window_layout import TRANSFORM_SPEC_FLAG, spec_flag

logger = logging.getLogger(__name__)

DATA_TILING = "--iree-opt-data-tiling"
_UKERNELS = "--iree-llvmcpu-enable-ukernels"
_DATA_TILING_OPS = "--iree-dispatch-creation-experimental-set-data-tiling-ops"
_IM2COL = "--iree-global-opt-use-im2col-for-convs"
_OPT_LEVEL = "--iree-opt-level"
_PREPROCESSING = "--iree-preprocessing-pass-pipeline"
# ONNX convolutions are NCHW; this preprocessing pass rewrites them (and what they feed) to
# channels-last, where the CPU's vectors run along the channels.
CHANNELS_LAST = "builtin.module(util.func(iree-preprocessing-convert-conv-to-channels-last))"

_EARLY_DATA_TILING = "--iree-global-opt-data-tiling"
_EARLY_MATERIALIZATION = "--iree-global-opt-enable-early-materialization"
# IREE 3.13's late data-tiling path (DATA_TILING) applies tuning specs to the still encoded
# matmul, then materialises it into an mmt4d without the spec's configuration. This runs codegen's
# materialisation on each executable before configuration instead, so that a spec reaches the
# mmt4d; without a spec the binaries stay byte-identical (docs/cpu_data_tiling_research.md, 0.3).
_PREPROCESS_EXECUTABLES = "--iree-hal-preprocess-executables-with"
MATERIALIZE_FIRST = (
    f"{_PREPROCESS_EXECUTABLES}=builtin.module(hal.executable.variant("
    "builtin.module(func.func(iree-codegen-materialize-device-encoding))))"
)

_WITH_DATA_TILING = ((DATA_TILING, "true"),)
_WITH_CHANNELS_LAST = ((_PREPROCESSING, CHANNELS_LAST),)
_AGGRESSIVE_TRANSPOSES = "--iree-opt-aggressively-propagate-transposes"

CPU_TUNED_OPTIONS = (
    TunedOption(DATA_TILING, ("true",), "false",
                "packs matmul operands into the target's register tile layout (matmuls become "
                "linalg.mmt4d between pack and unpack dispatches)"),
    TunedOption(_UKERNELS, ("mmt4d", "all", "none"), "default",
                "hand-written microkernels for mmt4d (and pack/unpack with `all`)"),
    TunedOption(_IM2COL, ("true",), "false",
                "rewrites convolutions as im2col plus matmul, so matmul codegen (and data "
                "tiling) applies to them"),
    TunedOption(_DATA_TILING_OPS, ("matmul,convolution",), "matmul,scaled_matmul",
                "extends data tiling to convolutions (experimental in IREE 3.13)",
                depends_on=_WITH_DATA_TILING, is_list=True),
    TunedOption("--iree-llvmcpu-matmul-tile-bytes", ("16384", "65536", "1048576"), "262144",
                "distribution tile of data-tiled matmuls, in bytes of operand",
                depends_on=_WITH_DATA_TILING),
    TunedOption("--iree-llvmcpu-matmul-tile-undercount-whole-matrix", ("0", "1"), "0.5",
                "how far past the tile bytes a data-tiled matmul may go to fit a whole matrix",
                depends_on=_WITH_DATA_TILING),
    TunedOption("--iree-llvmcpu-enable-inner-tiled", ("true",), "false",
                "lowers data-tiled matmuls to inner_tiled instead of linalg.mmt4d",
                depends_on=_WITH_DATA_TILING),
    TunedOption(_PREPROCESSING, (CHANNELS_LAST,), "",
                "a preprocessing pipeline: convolutions to channels-last (NHWC), the layout the "
                "CPU's convolution codegen vectorizes along the channels"),
    TunedOption("--iree-global-opt-propagate-transposes-through-conv", ("true",), "false",
                "moves the channels-last rewrite's transposes through the convolutions, so "
                "that consecutive convolutions stay channels-last",
                depends_on=_WITH_CHANNELS_LAST),
    TunedOption(_AGGRESSIVE_TRANSPOSES, ("true",), "false",
                "propagates those transposes into named ops even where they become generics",
                depends_on=_WITH_CHANNELS_LAST),
    TunedOption("--iree-global-opt-data-tiling", ("true",), "false",
                "data tiling from global optimization (the other of the two paths)"),
    TunedOption(_OPT_LEVEL, ("O1", "O2", "O3"), "O0",
                "the whole compilation's optimisation level (each pipeline's options follow it)"),
    TunedOption("--iree-opt-generalize-matmul", ("true",), "false",
                "named matmuls become linalg.generic, which fuses more"),
    TunedOption("--iree-dispatch-creation-enable-fuse-horizontal-contractions", ("true",),
                "false", "fuses contractions that share an operand into one dispatch"),
    TunedOption("--iree-global-opt-propagate-transposes", ("false",), "true",
                "moves transposes towards the edges to fuse them (on by default)"),
    TunedOption("--iree-opt-const-eval", ("false",), "true",
                "evaluates constant expressions at compile time (on by default)"),
    TunedOption("--iree-opt-const-expr-hoisting", ("false",), "true",
                "hoists constant expressions into initializers (on by default)"),
    TunedOption("--iree-llvmcpu-distribution-size", ("16", "32", "128"), "64",
                "default distribution tile size of codegen (workgroup tiles)"),
    TunedOption("--iree-llvmcpu-number-of-threads", ("1", "2", "4", "16"), "8",
                "threads codegen assumes at runtime when it sizes distribution tiles"),
    TunedOption("--iree-llvmcpu-disable-distribution", ("true",), "false",
                "one workgroup per dispatch: no thread distribution"),
    TunedOption("--iree-llvmcpu-target-vector-width-in-bytes", ("16", "32"), "0",
                "narrower vectors than the CPU's native width (0: native)"),
    TunedOption("--iree-llvmcpu-max-allowed-number-of-native-vectors", ("256", "1024"), "512",
                "how many native vectors one vector operation may span"),
    TunedOption("--iree-llvmcpu-vector-pproc-strategy", ("peel", "mask", "none"), "heuristic",
                "how vectorization handles shapes that are not a multiple of the vector"),
    TunedOption("--iree-llvmcpu-reassociate-fp-reductions", ("true",), "false",
                "reorders floating-point reductions (results may differ in the last bits)"),
    TunedOption("--iree-llvmcpu-use-fast-min-max-ops", ("true",), "false",
                "arith.minf/maxf instead of NaN-propagating minimumf/maximumf"),
    TunedOption("--iree-llvmcpu-loop-unrolling", ("true",), "false", "LLVM loop unrolling"),
    TunedOption("--iree-llvmcpu-loop-interleaving", ("true",), "false",
                "LLVM loop interleaving"),
    TunedOption("--iree-llvmcpu-loop-vectorization", ("true",), "false",
                "LLVM loop vectorization"),
    TunedOption("--iree-llvmcpu-slp-vectorization", ("true",), "false",
                "LLVM SLP vectorization"),
)  # fmt: skip

# The local-task device's runtime options (`iree-run-module --help`, IREE 3.13); each is read
# when a device is created, so the runtime search gives each set a device of its own in one
# process. Defaults are the runtime's (the `IREE_FLAG` declarations under runtime/src/iree/task/
# of 3.13, as `--help` prints them), spelled back before each set: an empty favor
# (`--task_topology_favor=`) is the runtime's own "no preset" and parses. 2 cores is the smallest machine this targets: a
# worker count at or above the core count equals the default and is skipped (the timing worker
# reports how many workers each device runs).
LOCAL_TASK_RUNTIME_OPTIONS = (
    RuntimeOption("--task_topology_max_group_count", ("1", "2", "4", "8"), "64",
                  "at most this many task workers (one per physical core by default)"),
    RuntimeOption("--task_worker_spin_us", ("50", "500"), "0",
                  "workers spin this long for new work before they sleep"),
    RuntimeOption("--task_topology_favor", ("latency", "throughput"), "",
                  "the topology preset: compact on fast cores, or spread for bandwidth"),
)  # fmt: skip

CPU_FLAG_SPACE = FlagSpace(
    options=(
        FlagOption(
            "data-tiling",
            ((DATA_TILING,),),
            "packs matmul operands into the target's register tile layout (matmuls become "
            "linalg.mmt4d between pack and unpack dispatches)",
        ),
        FlagOption(
            "ukernels",
            ((f"{_UKERNELS}=mmt4d",), (f"{_UKERNELS}=all",), (f"{_UKERNELS}=none",)),
            "hand-written microkernels for mmt4d (and pack/unpack with `all`); the default "
            "leaves the choice to the compiler",
        ),
        FlagOption(
            "data-tiling-ops",
            ((f"{_DATA_TILING_OPS}=matmul", f"{_DATA_TILING_OPS}=convolution"),),
            "extends data tiling to convolutions (experimental in IREE 3.13)",
            requires=(DATA_TILING,),
        ),
        FlagOption(
            "im2col",
            ((_IM2COL,),),
            "rewrites convolutions as im2col plus matmul, so matmul codegen (and data tiling) "
            "applies to them",
        ),
        FlagOption(
            "opt-level",
            ((f"{_OPT_LEVEL}=O3",),),
            "the compiler's most aggressive global optimisation level (the default is O0)",
        ),
    ),
    combinations=(
        (DATA_TILING, f"{_UKERNELS}=mmt4d"),
        (DATA_TILING, f"{_UKERNELS}=all"),
        (DATA_TILING, f"{_DATA_TILING_OPS}=matmul", f"{_DATA_TILING_OPS}=convolution",
         f"{_UKERNELS}=mmt4d"),
        (_IM2COL, DATA_TILING, f"{_UKERNELS}=mmt4d"),
        (f"{_OPT_LEVEL}=O3", DATA_TILING, f"{_UKERNELS}=mmt4d"),
    ),
    tuned=CPU_TUNED_OPTIONS,
    runtime=LOCAL_TASK_RUNTIME_OPTIONS,
)  # fmt: skip


def with_channels_last_windows(space: FlagSpace, spec_paths: tuple[Path, ...]) -> FlagSpace:
    """Return `space` with the channels-last windows specs at `spec_paths` (the two forms of
    `window_layout.py`, the transposed first) as an option: seeds (each form with the
    channels-last pipeline and aggressive transpose propagation, the set that made MobileNet-v2
    fastest; and on the convolution seed) and a searched option, one value a form, that
    depends on the channels-last pipeline, declared first: a step that cannot try every single
    change tries it (SqueezeNet's search, capped at 48 sets, never reached it when it came
    last)."""
    why = (
        "turns NCHW depthwise convolutions and pools channels-last too, where the CPU's window "
        "codegen vectorizes along the channels (a transform spec made for the model; its layout "
        "changes as transposes that cancel against the neighbours', or as packs)"
    )
    choices: list[tuple[str, ...]] = []
    for path in spec_paths:
        windows = (f"{_PREPROCESSING}={CHANNELS_LAST}", spec_flag(path), _AGGRESSIVE_TRANSPOSES)
        # Alone, and on the convolution seed (im2col, data tiling, mmt4d) that the searches kept
        # most often on the CNNs: a step after the first tries an option already proposed
        # last, so the search seldom adds it to a set that already has the rest (SqueezeNet's
        # runs).
        choices += [windows, (_IM2COL, DATA_TILING, f"{_UKERNELS}=mmt4d", *windows)]
    seed = FlagOption("channels-last-windows", tuple(choices), why)
    values = tuple(str(path.resolve()) for path in spec_paths)
    tuned = TunedOption(TRANSFORM_SPEC_FLAG, values, "", why, depends_on=_WITH_CHANNELS_LAST)
    return dataclasses.replace(space, options=(*space.options, seed), tuned=(tuned, *space.tuned))


def _switches(flags: Sequence[str]) -> dict[str, bool]:
    """Read each flag as a switch, its last occurrence counting, as in iree-compile."""
    values: dict[str, bool] = {}
    for flag in flags:
        name, _, value = flag.partition("=")
        values[name] = value.lower() not in ("false", "0")
    return values


def specs_reach_data_tiled_matmuls(flags: Sequence[str]) -> bool:
    """Say whether, compiled with `flags`, a model's data-tiled matmuls are already `linalg.mmt4d`
    ops when IREE 3.13 applies tuning specs: with MATERIALIZE_FIRST, or on the early path
    (`--iree-global-opt-data-tiling` with its default early materialisation, and no
    DATA_TILING, which overrides it). The last occurrence of a flag counts, as in iree-compile."""
    values = _switches(flags)
    return MATERIALIZE_FIRST in flags or (
        values.get(_EARLY_DATA_TILING, False)
        and not values.get(DATA_TILING, False)
        and values.get(_EARLY_MATERIALIZATION, True)
    )


# The user's own executable preprocessing already warned about (once a process).
_WARNED: set[str] = set()


def with_materialize_first(flags: Sequence[str]) -> tuple[str, ...]:
    """Return `flags` with MATERIALIZE_FIRST after them when they take the late data-tiling path
    (DATA_TILING on) without it, so that tuning specs reach the data-tiled matmuls; the binaries
    without a spec stay the same. A flag set that already preprocesses executables its own way
    keeps its way, said once in one line (the data-tiled matmuls then stay out of specs' reach)."""
    if not _switches(flags).get(DATA_TILING, False) or MATERIALIZE_FIRST in flags:
        return tuple(flags)
    own = [flag for flag in flags if flag.partition("=")[0] == _PREPROCESS_EXECUTABLES]
    if own:
        if own[-1] not in _WARNED:
            _WARNED.add(own[-1])
            logger.warning(
                "%s: not adding the materialisation that lets tuning specs reach data-tiled "
                "matmuls under %s; they keep the compiler's tiles",
                own[-1], DATA_TILING,
            )  # fmt: skip
        return tuple(flags)
    return (*flags, MATERIALIZE_FIRST)
