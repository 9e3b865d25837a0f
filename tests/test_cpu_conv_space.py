"""The llvm-cpu convolution space (pure, no compiler)."""

from __future__ import annotations

import itertools

from ireetune.problem.convolution import ConvolutionProblem
from ireetune.targets.llvm_cpu.conv_space import (
    compute_conv_sizes,
    conv_tile_lists,
    enumerate_conv_space,
    order_conv_candidates,
    parse_default_conv_knobs,
)
from ireetune.targets.llvm_cpu.facts import CpuFacts

AVX512 = CpuFacts("znver4", 64, 32, 32768, 1 << 20, threads=2, max_vector_bytes=32768)
# ResNet-50's 3x3 convolution on 56x56 images in NCHW: loops (n, f, oh, ow, c, kh, kw).
CONV = ConvolutionProblem(
    op_name="linalg.generic",
    loop_sizes=(1, 64, 56, 56, 64, 3, 3),
    batch_dims=(0,),
    output_image_dims=(2, 3),
    output_channel_dims=(1,),
    filter_dims=(5, 6),
    input_channel_dims=(4,),
    depth_dims=(),
    strides=(1, 1),
    dilations=(1, 1),
    lhs_type="f32",
    rhs_type="f32",
    output_type="f32",
    indexing_maps=(
        "(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, d2 + d5, d3 + d6)",
        "(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)",
        "(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)",
    ),
    lhs_shape=(1, 64, 58, 58),
    rhs_shape=(64, 64, 3, 3),
    output_shape=(1, 64, 56, 56),
)


def test_conv_candidates_obey_register_vector_and_nesting_rules() -> None:
    sizes = compute_conv_sizes(CONV)
    candidates = [
        dict(k) for k in itertools.islice(enumerate_conv_space(sizes, AVX512, seed=0), 60)
    ]
    assert len(candidates) == 60
    for c in candidates:
        assert -(-c["vec_f"] * c["vec_ow"] // 16) + 2 <= 32
        assert c["vec_f"] * c["vec_ow"] * c["vec_c"] * 4 < 32768
        assert c["dist_f"] % c["vec_f"] == 0 and c["dist_ow"] % c["vec_ow"] == 0
        assert 64 % c["vec_c"] == 0 and 56 % c["dist_oh"] == 0


def test_conv_tiles_follow_the_decomposition_rules_and_round_trip() -> None:
    knobs = (
        ("dist_f", 32),
        ("dist_oh", 8),
        ("dist_ow", 56),
        ("vec_c", 8),
        ("vec_f", 16),
        ("vec_ow", 8),
    )
    tiles = conv_tile_lists(CONV, knobs)
    assert tiles == {
        "distribution": [1, 32, 8, 56, 0, 0, 0],
        "vector_common_parallel": [1, 16, 1, 8, 0, 0, 0],
        "vector_reduction": [0, 0, 0, 0, 8, 1, 1],
    }
    assert parse_default_conv_knobs(CONV, tiles) == knobs


def test_conv_ordering_prefers_a_full_register_block_and_is_reproducible() -> None:
    sizes = compute_conv_sizes(CONV)
    pool = list(itertools.islice(enumerate_conv_space(sizes, AVX512, seed=1), 40))
    ordered = order_conv_candidates(sizes, AVX512, pool, seed=1)
    assert ordered == order_conv_candidates(sizes, AVX512, list(reversed(pool)), seed=1)
    best, worst = dict(ordered[0][0]), dict(ordered[-1][0])
    assert best["vec_f"] * best["vec_ow"] >= worst["vec_f"] * worst["vec_ow"]
