"""The hand-written llvm-cpu search space and its ordering heuristic (pure, no compiler)."""

from __future__ import annotations

import itertools
import time

import pytest

from ireetune.core.candidate import make_knobs
from ireetune.targets.llvm_cpu.common import CpuFacts, order_pool, score_near_default
from ireetune.targets.llvm_cpu.space import CpuProblemSizes, enumerate_space, score_candidate

AVX512 = CpuFacts("znver4", 64, 32, 32768, 1 << 20, threads=2, max_vector_bytes=32768)
SIZES = CpuProblemSizes(
    m=1024, n=1024, k=1024, outer_parallel=1, input_bytes=4, accumulator_bytes=4
)


def _take(sizes: CpuProblemSizes, count: int, seed: int = 0) -> list[dict[str, int]]:
    return [
        {name: int(value) for name, value in knobs}
        for knobs in itertools.islice(enumerate_space(sizes, AVX512, seed), count)
    ]


def test_every_candidate_obeys_the_hardware_rules() -> None:
    candidates = _take(SIZES, 80)
    assert len(candidates) == 80
    assert len({tuple(sorted(c.items())) for c in candidates}) == 80
    for c in candidates:
        registers_n = c["vec_n"] // 16
        assert c["vec_n"] % 16 == 0
        assert c["vec_m"] * registers_n + registers_n + 1 <= 32
        assert c["vec_m"] * c["vec_n"] * c["vec_k"] * 4 < 32768
        assert c["dist_m"] % c["vec_m"] == 0 and c["dist_n"] % c["vec_n"] == 0
        assert 1024 % c["vec_k"] == 0
        assert 1024 % c["dist_m"] == 0 or c["dist_m"] >= 1024
        tiles = -(-1024 // c["dist_m"]) * -(-1024 // c["dist_n"])
        assert tiles >= 2


def test_same_seed_same_sequence_other_seed_other_sequence() -> None:
    assert _take(SIZES, 20, seed=7) == _take(SIZES, 20, seed=7)
    assert _take(SIZES, 20, seed=7) != _take(SIZES, 20, seed=8)


def test_enumeration_is_lazy() -> None:
    start = time.perf_counter()
    first = next(iter(enumerate_space(SIZES, AVX512, seed=0)))
    assert time.perf_counter() - start < 2.0
    assert {name for name, _ in first} == {"dist_m", "dist_n", "vec_m", "vec_n", "vec_k"}


def test_excluded_default_never_comes_back() -> None:
    default = make_knobs({"dist_m": 32, "dist_n": 64, "vec_m": 8, "vec_n": 16, "vec_k": 16})
    small = CpuProblemSizes(m=64, n=64, k=16, outer_parallel=1, input_bytes=4, accumulator_bytes=4)
    everything = list(enumerate_space(small, AVX512, seed=0, excluded=default))
    assert everything and default not in everything
    with_default = list(enumerate_space(small, AVX512, seed=0))
    assert default in with_default
    # Excluding the default (the baseline) also puts its neighbours first, some of them from
    # outside the walk's space (they leave a thread idle): every other configuration is the same.
    assert len(everything) == len(set(everything))
    assert set(with_default) - set(everything) == {default}
    neighbours_only = set(everything) - set(with_default)
    assert neighbours_only and all(
        1 <= sum(dict(knobs)[name] != value for name, value in default) <= 2
        for knobs in neighbours_only
    )


def test_problem_too_small_for_all_threads_still_has_candidates() -> None:
    tiny = CpuProblemSizes(m=4, n=16, k=8, outer_parallel=1, input_bytes=4, accumulator_bytes=4)
    candidates = _take(tiny, 10)
    assert candidates
    assert all(c["vec_n"] == 16 and c["vec_m"] <= 4 for c in candidates)


@pytest.mark.parametrize(
    ("better", "worse"),
    [
        (  # A K tile of 1 starves the FMA units.
            {"dist_m": 64, "dist_n": 64, "vec_m": 8, "vec_n": 16, "vec_k": 16},
            {"dist_m": 64, "dist_n": 64, "vec_m": 8, "vec_n": 16, "vec_k": 1},
        ),
        (  # One accumulator row wastes the register file.
            {"dist_m": 64, "dist_n": 64, "vec_m": 8, "vec_n": 32, "vec_k": 16},
            {"dist_m": 64, "dist_n": 64, "vec_m": 1, "vec_n": 32, "vec_k": 16},
        ),
        (  # Tiles that pad M by a third waste work.
            {"dist_m": 128, "dist_n": 64, "vec_m": 8, "vec_n": 16, "vec_k": 16},
            {"dist_m": 1368, "dist_n": 64, "vec_m": 12, "vec_n": 16, "vec_k": 16},
        ),
    ],
)
def test_heuristic_prefers_the_known_better_configuration(
    better: dict[str, int], worse: dict[str, int]
) -> None:
    assert score_candidate(SIZES, AVX512, make_knobs(better)) > score_candidate(
        SIZES, AVX512, make_knobs(worse)
    )


def test_ordering_is_sorted_by_score_and_reproducible() -> None:
    pool = [make_knobs(c) for c in _take(SIZES, 40)]
    ordered = order_pool(score_near_default(score_candidate), SIZES, AVX512, pool, seed=3)
    scores = [score for _, score in ordered]
    assert scores == sorted(scores, reverse=True)
    assert sorted(k for k, _ in ordered) == sorted(pool)
    assert ordered == order_pool(
        score_near_default(score_candidate), SIZES, AVX512, list(reversed(pool)), seed=3
    )


def test_a_long_loop_that_no_vector_tile_divides_still_has_distribution_tiles() -> None:
    # GoogLeNet's 3x3 convolution over 55x55 images, as im2col writes it: N = 3025 is odd and
    # over the 2048 limit, so no multiple of a 16-lane vector divides it or covers it in one tile.
    # Its N domain was empty, and `Or()` over no values made z3 refuse the constraints ("Value
    # cannot be converted into a Z3 Boolean value") and ended the model run.
    sizes = CpuProblemSizes(m=192, n=3025, k=576, outer_parallel=1, input_bytes=4,
                            accumulator_bytes=4)  # fmt: skip
    candidates = _take(sizes, 40)
    assert len(candidates) == 40
    # Every N tile is whole vectors; none divides the loop, so its last tile is partial.
    assert all(c["dist_n"] % c["vec_n"] == 0 and c["vec_n"] % 16 == 0 for c in candidates)
    assert all(3025 % c["dist_n"] != 0 and c["dist_n"] <= 2048 for c in candidates)


def test_the_outer_m_loop_of_a_1x1_nchw_convolution_stays_whole_in_a_workgroup() -> None:
    """A 1x1 NCHW convolution's contraction (out[576, 14, 14] = W[576, 96] x in[96, 14, 14])
    has two M loops; the knobs tile the inner one, and the outer one stays whole in a workgroup
    as the compiler's default keeps it (one row per workgroup made every candidate of MobileNet's
    such dispatches 2-10x slower than the default)."""
    from ireetune.problem.contraction import ContractionProblem
    from ireetune.targets.llvm_cpu.space import tile_lists

    problem = ContractionProblem(
        op_name="linalg.generic", loop_sizes=(576, 14, 14, 96), batch_dims=(), m_dims=(1, 2),
        n_dims=(0,), k_dims=(3,), lhs_type="f32", rhs_type="f32", output_type="f32",
        indexing_maps=(
            "affine_map<(d0, d1, d2, d3) -> (d3, d1, d2)>", "affine_map<(d0, d1, d2, d3) -> (d0, d3)>",
            "affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>",
        ),
        lhs_shape=(96, 14, 14), rhs_shape=(576, 96), output_shape=(576, 14, 14),
    )  # fmt: skip
    knobs = make_knobs({"dist_m": 7, "dist_n": 64, "vec_m": 7, "vec_n": 16, "vec_k": 8})
    assert tile_lists(problem, knobs) == {
        "distribution": [64, 14, 7, 0],
        "vector_common_parallel": [16, 1, 7, 0],
        "vector_reduction": [0, 0, 0, 8],
    }
