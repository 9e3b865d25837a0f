"""Order CPU candidates so the likely-fast ones are compiled and measured first.

The score follows the features that seeds/002 found predictive on GPUs, translated to a CPU:

- the micro-kernel's arithmetic intensity, relative to the best the register file allows (the
  GPU's "intrinsic area to volume ratio");
- a power-of-two K tile of at least 8 (K tiles of 1 or 2 starve the FMA units);
- the padding waste of distribution tiles that do not divide the problem ("quantization
  inefficiency");
- how evenly the tiles spread over the threads, and whether there are enough of them;
- a distribution tile large enough to reuse what it brings into L2.

The weights were set by hand from the first measurements on this project's 2-core znver4 machine
(see docs/ordering.md); they are a starting point for a learned model, not a final word.
"""

from __future__ import annotations

import functools
import math

from ireetune.core.candidate import Knobs
from ireetune.targets.llvm_cpu.facts import CpuFacts, thread_imbalance
from ireetune.targets.llvm_cpu.sizes import CpuProblemSizes, count_tiles, distribution_bytes


@functools.cache
def best_intensity(facts: CpuFacts) -> float:
    """Return the highest micro-kernel intensity m*r/(m+r) the register file can hold (kept per
    machine: every candidate's score and features divide by it)."""
    best = 0.0
    for rows in range(1, 17):
        for registers_n in range(1, 5):
            if rows * registers_n + registers_n + 1 <= facts.vector_registers:
                best = max(best, rows * registers_n / (rows + registers_n))
    return best


def score_candidate(sizes: CpuProblemSizes, facts: CpuFacts, knobs: Knobs) -> float:
    """Score one configuration; higher is more promising."""
    values = {name: int(value) for name, value in knobs}
    lanes = max(1, facts.native_vector_bytes // sizes.accumulator_bytes)
    vec_m, vec_n, vec_k = values["vec_m"], values["vec_n"], values["vec_k"]
    dist_m, dist_n = values["dist_m"], values["dist_n"]

    registers_n = -(-vec_n // lanes)
    intensity = (vec_m * registers_n) / (vec_m + registers_n) / best_intensity(facts)
    good_k = 1.0 if vec_k & (vec_k - 1) == 0 and 8 <= vec_k <= 32 else 0.0
    tiny_k = 1.0 if vec_k < 4 else 0.0

    padded = math.ceil(sizes.m / dist_m) * dist_m * math.ceil(sizes.n / dist_n) * dist_n
    padding_waste = padded / (sizes.m * sizes.n) - 1.0
    tiles = count_tiles(sizes, dist_m, dist_n)
    imbalance = thread_imbalance(tiles, facts.threads)
    too_few_tiles = 1.0 if tiles < facts.threads else 0.0
    l2_use = distribution_bytes(sizes, dist_m, dist_n) / facts.l2_bytes
    small_tile = max(0.0, 0.125 - l2_use) / 0.125

    return (
        2.0 * intensity
        + 1.0 * good_k
        - 2.0 * tiny_k
        - 2.0 * padding_waste
        - 1.0 * imbalance
        - 1.0 * too_few_tiles
        - 1.0 * small_tile
    )
