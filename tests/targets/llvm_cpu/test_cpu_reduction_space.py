"""The llvm-cpu reduction space (pure, no compiler)."""

from __future__ import annotations

import itertools

from ireetune.core.candidate import make_knobs
from ireetune.problem.reduction import ReductionProblem
from ireetune.targets.llvm_cpu.common import CpuFacts
from ireetune.targets.llvm_cpu.reduction_space import (
    STRIDED_CONTRACTION_PASS,
    CpuReductionSizes,
    compute_anchor,
    compute_reduction_sizes,
    enumerate_reduction_space,
    parse_default_reduction_knobs,
    reduction_sibling_configs,
    reduction_tile_lists,
    score_reduction_candidate,
)
from ireetune.targets.z3_enumerate import distance_to

AVX512 = CpuFacts("znver4", 64, 32, 32768, 1 << 20, threads=2, max_vector_bytes=32768)
# A real-weights ResNet-50's last strided 1x1 convolution: 2048 x 7 x 7 outputs, 1024 channels.
STRIDED = CpuReductionSizes((2048, 7, 7), 1024, 4)
# IREE's default for it on znver4: an 8-wide vector over the 7-wide row, masked.
STRIDED_DEFAULT = (("dist_0", 32), ("dist_1", 7), ("dist_2", 7), ("vec_p", 8), ("vec_r", 16))


def test_the_defaults_masked_vector_tile_is_in_the_space_and_its_neighbours_first() -> None:
    first = list(
        itertools.islice(enumerate_reduction_space(STRIDED, AVX512, 0, STRIDED_DEFAULT), 5)
    )
    assert [distance_to(k, STRIDED_DEFAULT) for k in first] == [
        1.0,
        1.0,
        2.807354922057604,
        3.0,
        1.0,
    ]
    assert sum(dict(k)["vec_p"] == 8 for k in first) == 4
    rest = list(
        itertools.islice(enumerate_reduction_space(STRIDED, AVX512, 0, STRIDED_DEFAULT), 60)
    )
    assert STRIDED_DEFAULT not in rest
    assert all(dict(k)["vec_p"] in (1, 8) for k in rest)  # Divides 7, or covers it whole.


def test_near_default_configurations_score_higher() -> None:
    near = (("dist_0", 16), ("dist_1", 7), ("dist_2", 7), ("vec_p", 8), ("vec_r", 16))
    far = (("dist_0", 256), ("dist_1", 1), ("dist_2", 1), ("vec_p", 1), ("vec_r", 2))
    assert score_reduction_candidate(
        STRIDED, AVX512, near, STRIDED_DEFAULT
    ) > score_reduction_candidate(STRIDED, AVX512, far, STRIDED_DEFAULT)


def _strided_problem(body: tuple[str, ...]) -> ReductionProblem:
    return ReductionProblem(
        kind="reduction", op_name="linalg.generic", loop_sizes=(2048, 7, 7, 1024),
        parallel_dims=(0, 1, 2), reduction_dims=(3,), input_types=("f32", "f32"),
        input_shapes=((1024, 14, 14), (2048, 1024)), output_type="f32", output_shape=(2048, 7, 7),
        indexing_maps=(
            "(d0, d1, d2, d3) -> (d3, d1 * 2, d2 * 2)", "(d0, d1, d2, d3) -> (d0, d3)",
            "(d0, d1, d2, d3) -> (d0, d1, d2)",
        ),
        body=body, source="",
    )  # fmt: skip


# The strided read of a ResNet's strided 1x1 convolution, but a body that is no contraction's.
STRIDED_MAXIMUM = _strided_problem(("arith.mulf", "arith.maximumf", "linalg.yield"))
# The convolution itself: a contraction in all but its strided image read.
STRIDED_CONTRACTION = _strided_problem(("arith.mulf", "arith.addf", "linalg.yield"))
IREE_DEFAULT_TILES = {
    "distribution": [32, 7, 7, 0],
    "vector_common_parallel": [1, 1, 8, 0],
    "vector_reduction": [0, 0, 0, 16],
}


def test_tiles_round_trip_and_give_the_other_ops_the_same_vectors() -> None:
    assert not STRIDED_MAXIMUM.strided_contraction
    tiles = reduction_tile_lists(STRIDED_MAXIMUM, STRIDED_DEFAULT)
    assert tiles == IREE_DEFAULT_TILES
    assert parse_default_reduction_knobs(STRIDED_MAXIMUM, tiles) == STRIDED_DEFAULT
    assert reduction_sibling_configs(STRIDED_MAXIMUM, tiles) == (
        ("reduction", "#iree_cpu.lowering_config<vector_common_parallel = [1, 1, 8, 0], vector_reduction = [0, 0, 0, 16]>"),
        ("parallel", "#iree_cpu.lowering_config<vector_common_parallel = [1, 1, 8, 0], vector_inner_parallel = [0, 0, 0, 16]>"),
    )  # fmt: skip


def test_a_strided_contraction_is_blocked_like_a_matmul_from_an_anchor() -> None:
    problem = STRIDED_CONTRACTION
    assert problem.strided_contraction and problem.output_channel_loops == (0,)
    sizes = compute_reduction_sizes(problem)
    default = parse_default_reduction_knobs(problem, IREE_DEFAULT_TILES)
    assert default is not None
    assert dict(default) == {**dict(STRIDED_DEFAULT), "vec_0": 1, "vec_1": 1}
    assert reduction_tile_lists(problem, default) == IREE_DEFAULT_TILES
    # The anchor blocks 8 output channels; it and its neighbours come first, the default never.
    anchor = compute_anchor(sizes, default)
    assert dict(anchor) == {**dict(default), "vec_0": 8}
    pool = list(itertools.islice(enumerate_reduction_space(sizes, AVX512, 0, default), 64))
    assert pool[0] == anchor and default not in pool
    assert {dict(k)["vec_1"] for k in pool} >= {1, 7}  # Rows are blocked too.
    ordered = sorted(pool, key=lambda k: -score_reduction_candidate(sizes, AVX512, k, default))
    assert ordered[0] == anchor
    assert all(dict(k)["vec_0"] >= 4 for k in ordered[:8])


def test_a_strided_contraction_candidate_runs_the_rewrite_after_configuring() -> None:
    from iree.compiler import ir

    from ireetune.targets.llvm_cpu.reduction_space import CpuReductionSpace

    knobs = make_knobs({**dict(STRIDED_DEFAULT), "vec_0": 8, "vec_1": 1})
    configuration = CpuReductionSpace(2).configuration(STRIDED_CONTRACTION, knobs, ir.Context())
    assert configuration.function_passes == (STRIDED_CONTRACTION_PASS,)
    assert configuration.sibling_configs == ()
    assert "vector_common_parallel = [8, 1, 8, 0]" in configuration.compilation_info
    other = CpuReductionSpace(2).configuration(STRIDED_MAXIMUM, STRIDED_DEFAULT, ir.Context())
    assert other.function_passes == () and len(other.sibling_configs) == 2
