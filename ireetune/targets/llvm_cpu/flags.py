"""The llvm-cpu target's global compiler options worth searching, as data.

Read from `iree-compile --help-hidden` of IREE 3.13 and checked on this project's znver4 machine
(2026-11-24): each option below changed the binary of the README matmul or of a small
convolution (the flag search hashes every binary anyway and never times a set whose binary
equals the default's). Options left out: `--iree-llvmcpu-vector-pproc-strategy`, loop
unrolling/vectorization and fp-reduction reassociation changed neither binary; the numeric
distribution knobs (`--iree-llvmcpu-matmul-tile-bytes`, `--iree-llvmcpu-distribution-size`) are
what the dispatch tuner's lowering configurations search per dispatch.
"""

from __future__ import annotations

from ireetune.core.flag_space import FlagOption, FlagSpace

DATA_TILING = "--iree-opt-data-tiling"
_UKERNELS = "--iree-llvmcpu-enable-ukernels"
_DATA_TILING_OPS = "--iree-dispatch-creation-experimental-set-data-tiling-ops"
_IM2COL = "--iree-global-opt-use-im2col-for-convs"
_OPT_LEVEL = "--iree-opt-level"

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
            "the compiler's most aggressive global optimisation level (the default is O2)",
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
)  # fmt: skip
