"""Features of a CPU candidate for the learned cost model (ireetune/search/ranker.py).

Contractions and convolutions share one feature space, seen as a GEMM: a convolution's output
channels play N (`vec_f` is the vector tile, as `vec_n` is a matmul's), its output columns play M
(`vec_ow`) and its input channels K (`vec_c`), so that what one family teaches the model (register
blocking, padding, thread balance, cache use) carries over to the other. Sizes enter as log2, so
the model compares shapes by their ratios. The hand-written heuristic's score is a feature too:
the model starts from what it knows and learns where it is wrong.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from ireetune.core.candidate import Knobs
from ireetune.core.features import FactValue, FeatureExtractor, FeatureSpace
from ireetune.problem.contraction import ContractionProblem
from ireetune.problem.convolution import ConvolutionProblem
from ireetune.problem.family import Problem, narrow
from ireetune.targets.llvm_cpu.common import CpuFacts, thread_imbalance
from ireetune.targets.llvm_cpu.conv_space import (
    CpuConvSizes,
    compute_conv_sizes,
    conv_working_set,
    count_conv_tiles,
    is_window_problem,
    score_conv_candidate,
)
from ireetune.targets.llvm_cpu.elementwise_space import is_window_sum_problem
from ireetune.targets.llvm_cpu.mmt4d_space import is_data_tiled
from ireetune.targets.llvm_cpu.space import (
    CpuProblemSizes,
    best_intensity,
    compute_problem_sizes,
    count_tiles,
    distribution_bytes,
    score_candidate,
)

FEATURE_FAMILY = "llvm-cpu/gemm-view/v1"
FEATURE_NAMES = (
    "is_convolution",
    "log_m",
    "log_n",
    "log_k",
    "log_outer",
    "input_bytes",
    "accumulator_bytes",
    "log_vec_m",
    "log_vec_n",
    "log_vec_k",
    "log_dist_m",
    "log_dist_n",
    "log_dist_oh",
    "vec_n_registers",
    "accumulator_registers",
    "register_use",
    "intensity",
    "k_steps_log",
    "k_tile_power_of_two",
    "padding_m",
    "padding_n",
    "tiles_log",
    "tiles_per_thread_log",
    "imbalance",
    "l1_use",
    "l2_use",
    "dist_m_fraction",
    "dist_n_fraction",
    "kernel_window",
    "stride",
    "heuristic_score",
)


def _log2(value: float) -> float:
    return math.log2(max(value, 1e-9))


def _padding(extent: int, tile: int) -> float:
    return math.ceil(extent / tile) * tile / extent - 1.0


@dataclass(frozen=True)
class GemmView:
    """A problem seen as a GEMM: M x N outputs over K, `outer` times, with its element sizes."""

    m: int
    n: int
    k: int
    outer: int
    input_bytes: int
    accumulator_bytes: int


@dataclass(frozen=True)
class GemmTiling:
    """A candidate's tiles on the GEMM view: the vector tile, the distribution tile, how many
    distribution tiles there are, and the bytes one of them touches."""

    vec_m: int
    vec_n: int
    vec_k: int
    dist_m: int
    dist_n: int
    tiles: int
    distribution_bytes: float


def _shared_features(facts: CpuFacts, gemm: GemmView, tiling: GemmTiling) -> dict[str, float]:
    m, n, k, outer = gemm.m, gemm.n, gemm.k, gemm.outer
    input_bytes, accumulator_bytes = gemm.input_bytes, gemm.accumulator_bytes
    vec_m, vec_n, vec_k = tiling.vec_m, tiling.vec_n, tiling.vec_k
    dist_m, dist_n, tiles = tiling.dist_m, tiling.dist_n, tiling.tiles
    lanes = max(1, facts.native_vector_bytes // accumulator_bytes)
    registers_n = -(-vec_n // lanes)
    accumulators = vec_m * registers_n
    micro_kernel_bytes = (vec_m * vec_k + vec_k * vec_n) * input_bytes + (
        vec_m * vec_n * accumulator_bytes
    )
    return {
        "log_m": _log2(m),
        "log_n": _log2(n),
        "log_k": _log2(k),
        "log_outer": _log2(outer),
        "input_bytes": float(input_bytes),
        "accumulator_bytes": float(accumulator_bytes),
        "log_vec_m": _log2(vec_m),
        "log_vec_n": _log2(vec_n),
        "log_vec_k": _log2(vec_k),
        "log_dist_m": _log2(dist_m),
        "log_dist_n": _log2(dist_n),
        "vec_n_registers": float(registers_n),
        "accumulator_registers": float(accumulators),
        "register_use": (accumulators + registers_n + 1) / facts.vector_registers,
        "intensity": accumulators / (vec_m + registers_n) / best_intensity(facts),
        "k_steps_log": _log2(k / vec_k),
        "k_tile_power_of_two": 1.0 if vec_k & (vec_k - 1) == 0 and vec_k >= 8 else 0.0,
        "padding_m": _padding(m, dist_m) + _padding(dist_m, vec_m),
        "padding_n": _padding(n, dist_n) + _padding(dist_n, vec_n),
        "tiles_log": _log2(tiles),
        "tiles_per_thread_log": _log2(tiles / facts.threads),
        "imbalance": thread_imbalance(tiles, facts.threads),
        "l1_use": micro_kernel_bytes / facts.l1_bytes,
        "l2_use": tiling.distribution_bytes / facts.l2_bytes,
        "dist_m_fraction": min(dist_m, m) / m,
        "dist_n_fraction": min(dist_n, n) / n,
    }


def contraction_features(sizes: CpuProblemSizes, facts: CpuFacts, knobs: Knobs) -> list[float]:
    """Return the features of a contraction candidate, in FEATURE_NAMES order."""
    values = {name: int(value) for name, value in knobs}
    dist_m, dist_n = values["dist_m"], values["dist_n"]
    dist_o = values.get("dist_o", sizes.outer_m)
    gemm = GemmView(
        sizes.m, sizes.n, sizes.k, sizes.outer_parallel, sizes.input_bytes, sizes.accumulator_bytes
    )
    tiling = GemmTiling(
        values["vec_m"], values["vec_n"], values["vec_k"], dist_m, dist_n,
        count_tiles(sizes, dist_m, dist_n, dist_o),
        distribution_bytes(sizes, dist_m, dist_n, max(1, dist_o)),
    )  # fmt: skip
    features = _shared_features(facts, gemm, tiling)
    features.update(
        is_convolution=0.0,
        log_dist_oh=0.0,
        kernel_window=1.0,
        stride=1.0,
        heuristic_score=score_candidate(sizes, facts, knobs),
    )
    return [features[name] for name in FEATURE_NAMES]


def convolution_features(sizes: CpuConvSizes, facts: CpuFacts, knobs: Knobs) -> list[float]:
    """Return the features of a convolution candidate, in FEATURE_NAMES order (seen as a GEMM:
    M = output columns, N = output channels, K = input channels)."""
    values = {name: int(value) for name, value in knobs}
    dist_f, dist_oh, dist_ow = values["dist_f"], values["dist_oh"], values["dist_ow"]
    gemm = GemmView(
        sizes.ow, sizes.f, sizes.c, sizes.batch * sizes.oh, sizes.input_bytes,
        sizes.accumulator_bytes,
    )  # fmt: skip
    tiling = GemmTiling(
        values["vec_ow"], values["vec_f"], values["vec_c"], dist_ow, dist_f,
        count_conv_tiles(sizes, dist_f, dist_oh, dist_ow),
        conv_working_set(sizes, dist_f, dist_oh, dist_ow),
    )  # fmt: skip
    features = _shared_features(facts, gemm, tiling)
    features.update(
        is_convolution=1.0,
        log_dist_oh=_log2(dist_oh),
        kernel_window=float(sizes.kh * sizes.kw),
        stride=float(max(sizes.stride_h, sizes.stride_w)),
        heuristic_score=score_conv_candidate(sizes, facts, knobs),
    )
    return [features[name] for name in FEATURE_NAMES]


def has_features(problem: Problem) -> bool:
    """Say whether the learned cost model has features for a problem: contractions and
    convolutions, but not data-tiled matmuls, windows, window sums or reductions yet (their
    heuristic orders them)."""
    if problem.family == "convolution":
        convolution = narrow(problem, ConvolutionProblem)
        return not is_window_problem(convolution) and not is_window_sum_problem(convolution)
    if problem.family in ("contraction", "batch_contraction"):
        return not is_data_tiled(narrow(problem, ContractionProblem))
    return False


class CpuFeatureExtractor(FeatureExtractor):
    """The features of a contraction's or convolution's candidates on one CPU."""

    space = FeatureSpace(FEATURE_FAMILY, FEATURE_NAMES)

    def __init__(self, problem: Problem, facts: CpuFacts) -> None:
        self.problem = problem
        self.facts = facts

    def machine_facts(self) -> dict[str, FactValue]:
        return dataclasses.asdict(self.facts)

    def features(self, pool: Sequence[Knobs]) -> list[list[float]]:
        if self.problem.family == "convolution":
            conv_sizes = compute_conv_sizes(narrow(self.problem, ConvolutionProblem))
            return [convolution_features(conv_sizes, self.facts, knobs) for knobs in pool]
        sizes = compute_problem_sizes(narrow(self.problem, ContractionProblem))
        return [contraction_features(sizes, self.facts, knobs) for knobs in pool]
