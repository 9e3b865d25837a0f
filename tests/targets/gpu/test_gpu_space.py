"""The GPU search space without a compiler: targets, templates, z3 sampling and ordering."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import z3

from ireetune.core.candidate import interleave, make_knobs
from ireetune.core.errors import IreetuneError
from ireetune.core.target import spec_flags
from ireetune.problem.contraction import ContractionProblem
from ireetune.targets import parse_target
from ireetune.targets.gpu.constraints import ConstraintSpace
from ireetune.targets.gpu.ordering import TileShape, compute_tile_shape, score_candidate
from ireetune.targets.gpu.smt_space import SmtSpace, sample_spaces
from ireetune.targets.gpu.template import (
    IntKnob,
    OneOfKnob,
    OpaqueAttr,
    extract_knob_values,
    fill_template,
)


def count_solutions(space: SmtSpace, limit: int = 100_000) -> int:
    """Count a space's solutions by plain enumeration (for tests and reports on small spaces)."""
    context = z3.Context()
    solver = z3.Solver(ctx=context)
    solver.add(z3.parse_smt2_string(space.smtlib, ctx=context))
    variables = [z3.Int(name, context) for name in space.knob_names]
    count = 0
    while count < limit and solver.check() == z3.sat:
        model = solver.model()
        solver.add(z3.Or([v != model.eval(v, model_completion=True) for v in variables]))
        count += 1
    return count


NV_MMA = "#iree_gpu.mma_layout<NV_MMA_SYNC_F32_16x8x16_F16>"

# A miniature of what the compiler emits for a matmul: tiles that divide the problem, a multiple
# of the (non-square) intrinsic, and a thread count tied to the subgroup counts.
TOY_SMTLIB = """
(declare-const wg_0 Int)
(declare-const wg_1 Int)
(declare-const sg_m Int)
(declare-const threads Int)
(assert (and (>= wg_0 16) (<= wg_0 128) (= (mod 128 wg_0) 0) (= (mod wg_0 16) 0)))
(assert (and (>= wg_1 8) (<= wg_1 64) (= (mod 64 wg_1) 0) (= (mod wg_1 8) 0)))
(assert (and (>= sg_m 1) (<= sg_m 2) (= (mod wg_0 (* sg_m 16)) 0)))
(assert (= threads (* sg_m 32)))
"""
TOY_KNOBS = ("wg_0", "wg_1", "sg_m", "threads")


def test_cuda_and_rocm_targets_know_their_flags_devices_and_spec_routes() -> None:
    cuda = parse_target("cuda:sm_80")
    rocm = parse_target("hip:gfx942")
    spec = Path("spec.mlir")
    assert (cuda.name, cuda.backend, cuda.runtime_device) == ("cuda:sm_80", "cuda", "cuda://0")
    assert cuda.compile_flags() == ["--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80"]
    assert spec_flags(cuda, spec) == [
        "--iree-codegen-transform-dialect-library=spec.mlir",
        "--mlir-disable-threading",
    ]
    assert (rocm.name, rocm.backend, rocm.runtime_device) == ("rocm:gfx942", "rocm", "hip://0")
    assert rocm.compile_flags() == ["--iree-hal-target-device=hip", "--iree-rocm-target=gfx942"]
    assert spec_flags(rocm, spec) == [
        "--iree-codegen-tuning-spec-path=spec.mlir",
        "--mlir-disable-threading",
    ]
    assert [parse_target(f"rocm:{arch}").name for arch in ("gfx950", "gfx1100", "gfx1201")] == [
        "rocm:gfx950", "rocm:gfx1100", "rocm:gfx1201",
    ]  # fmt: skip


def test_hopper_is_refused_with_the_sm_80_route() -> None:
    with pytest.raises(IreetuneError) as excinfo:
        parse_target("cuda:sm_90")
    assert "--target cuda:sm_80" in str(excinfo.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cuda:sm_42", "unknown CUDA architecture"),
        ("rocm:gfx000", "unknown ROCm"),
        ("cuda", "name the CUDA"),
    ],
)
def test_unknown_architectures_are_user_errors(text: str, message: str) -> None:
    with pytest.raises(IreetuneError) as excinfo:
        parse_target(text)
    assert message in str(excinfo.value)


def test_pipeline_restriction_is_checked() -> None:
    with pytest.raises(IreetuneError) as excinfo:
        parse_target("cuda:sm_80", ["Warp"])
    assert "unknown pipeline 'Warp'" in str(excinfo.value)
    with pytest.raises(IreetuneError):
        parse_target("cpu", ["TileAndFuse"])


def test_template_fills_and_reads_back_its_knobs() -> None:
    template = {
        "workgroup": [IntKnob("wg_0"), IntKnob("wg_1"), 0],
        "mma_kind": OneOfKnob(
            "mma_idx", (NV_MMA, "#iree_gpu.mma_layout<NV_WMMA_F32_16x16x16_F16>")
        ),
        "gpu_pipeline_options": {
            "prefetch_num_stages": IntKnob("stages"),
            "use_igemm_convolution": False,
        },
    }
    values = {"wg_0": 64, "wg_1": 32, "mma_idx": 0, "stages": 2}
    filled = fill_template(template, values)  # type: ignore[arg-type]
    assert filled == {
        "workgroup": [64, 32, 0],
        "mma_kind": OpaqueAttr(NV_MMA),
        "gpu_pipeline_options": {"prefetch_num_stages": 2, "use_igemm_convolution": False},
    }
    with_extra_field = {**filled, "convert_acc_gemm": OpaqueAttr("unit")}  # type: ignore[dict-item]
    assert extract_knob_values(template, with_extra_field) == values  # type: ignore[arg-type]
    assert extract_knob_values(template, {**filled, "workgroup": [64, 32]}) is None  # type: ignore[arg-type, dict-item]


def test_sampler_yields_every_solution_once_and_never_the_excluded_one() -> None:
    space = SmtSpace("toy", TOY_SMTLIB, TOY_KNOBS)
    total = count_solutions(space)
    default = {"wg_0": 64, "wg_1": 32, "sg_m": 2, "threads": 64}
    drawn = [values for _, values in sample_spaces([space], seed=3, excluded={"toy": default})]
    keys = [tuple(sorted(values.items())) for values in drawn]
    assert total == 4 * 4 * 2 - 4  # sg_m = 2 needs wg_0 >= 32: wg_0 = 16 loses 4 of them.
    assert len(keys) == len(set(keys)) == total - 1
    assert default not in drawn
    assert all(values["threads"] == 32 * values["sg_m"] for values in drawn)


def test_sampler_is_reproducible_and_lazy_across_spaces() -> None:
    spaces = [SmtSpace("a", TOY_SMTLIB, TOY_KNOBS), SmtSpace("b", TOY_SMTLIB, TOY_KNOBS)]
    first = list(itertools.islice(sample_spaces(spaces, seed=7), 6))
    again = list(itertools.islice(sample_spaces(spaces, seed=7), 6))
    assert first == again
    assert [index for index, _ in first] == [0, 1, 0, 1, 0, 1]


def _problem(m: int, n: int, k: int) -> ContractionProblem:
    return ContractionProblem(
        op_name="linalg.matmul", loop_sizes=(m, n, k), batch_dims=(), m_dims=(0,), n_dims=(1,), k_dims=(2,),
        lhs_type="f16", rhs_type="f16", output_type="f32",
        indexing_maps=("(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d1, d2)", "(d0, d1, d2) -> (d0, d1)"),
        lhs_shape=(m, k), rhs_shape=(n, k), output_shape=(m, n),
    )  # fmt: skip


def test_tile_shape_reads_tileandfuse_counts_with_a_non_square_intrinsic() -> None:
    space = ConstraintSpace(0, "TileAndFuse", {}, "", (), {NV_MMA: (16, 8, 16)})
    config = {
        "workgroup": [64, 128, 0], "reduction": [0, 0, 4], "subgroup": [2, 4, 0],
        "mma_kind": OpaqueAttr(NV_MMA), "workgroup_size": [256, 1, 1], "subgroup_size": 32,
    }  # fmt: skip
    shape = compute_tile_shape(_problem(1024, 1280, 4096), space, config)  # type: ignore[arg-type]
    assert shape == TileShape(
        tile_m=64, tile_n=128, tile_k=64, subgroup_m=32, subgroup_n=32, threads=256, workgroups=160
    )


def test_score_prefers_large_power_of_two_tiles_over_slivers() -> None:
    problem = _problem(2048, 2048, 4096)
    good = TileShape(128, 128, 64, 64, 32, 256, 256)
    sliver = TileShape(16, 8, 16, 16, 8, 32, 32768)
    padded = TileShape(96, 80, 48, 48, 40, 128, 22 * 26)
    assert score_candidate(problem, good, 108) > score_candidate(problem, padded, 108)
    assert score_candidate(problem, good, 108) > score_candidate(problem, sliver, 108)


def test_interleave_takes_each_order_in_turn() -> None:
    a = [(make_knobs({"x": i}), float(i)) for i in range(3)]
    b = [(make_knobs({"y": i}), float(i)) for i in range(1)]
    assert interleave([a, b]) == [a[0], b[0], a[1], a[2]]


def test_batch_proxy_lifts_templates_to_the_batch_loops() -> None:
    from ireetune.targets.gpu.batch_proxy import lift_template

    template = {
        "workgroup": [IntKnob("wg_0"), IntKnob("wg_1"), 0],
        "reduction": [0, 0, IntKnob("red_2")],
        "subgroup": [IntKnob("sg_0"), IntKnob("sg_1"), 0],
        "subgroup_basis": [[IntKnob("m"), IntKnob("n"), 1], [0, 1, 2]],
        "promote_operands": [0, 1],
    }
    lifted = lift_template(template, batch_dims=(0,), proxy_loops=3)  # type: ignore[arg-type]
    assert lifted == {
        "workgroup": [1, IntKnob("wg_0"), IntKnob("wg_1"), 0],
        "reduction": [0, 0, 0, IntKnob("red_2")],
        "subgroup": [0, IntKnob("sg_0"), IntKnob("sg_1"), 0],
        "subgroup_basis": [[1, IntKnob("m"), IntKnob("n"), 1], [0, 1, 2, 3]],
        "promote_operands": [0, 1],
    }


def test_an_empty_space_is_explained_by_the_compilers_messages() -> None:
    from ireetune.targets.gpu.smt_space import explain_unsatisfiable

    smtlib = (
        "(declare-const dim_1 Int)\n(declare-const wg_1 Int)\n"
        "(assert (= dim_1 7))\n(assert (<= wg_1 dim_1))\n(assert (>= wg_1 16))\n(assert (>= wg_1 1))\n"
    )
    messages = ("dim_1 ({}) == 7", "wg_1 <= dim_1", "wg_1 >= mma_m", "wg_1 >= 1")
    assert explain_unsatisfiable(smtlib, messages) == (
        "no configuration satisfies: dim_1 ({}) == 7; wg_1 <= dim_1; wg_1 >= mma_m"
    )
    assert explain_unsatisfiable(smtlib.replace("16", "4"), messages) is None
    assert explain_unsatisfiable(smtlib, ()) == "its constraints admit no configuration"


def _mmt_space(pipeline: str) -> ConstraintSpace:
    return ConstraintSpace(0, pipeline, {}, "", (), {NV_MMA: (16, 8, 16)})


def test_shared_memory_and_registers_are_counted_before_compiling() -> None:
    from ireetune.targets.gpu.facts import GpuFacts
    from ireetune.targets.gpu.resources import ResourceUsage, check_resources, estimate_resources

    sm80 = GpuFacts("sm_80", (32,), 1024, 166912, (), 108)
    problem = _problem(1024, 1280, 4096)
    config = {
        "workgroup": [128, 256, 0], "reduction": [0, 0, 8], "subgroup": [2, 4, 0],
        "mma_kind": OpaqueAttr(NV_MMA), "promote_operands": [0, 1], "workgroup_size": [256, 1, 1],
    }  # fmt: skip
    usage = estimate_resources(problem, _mmt_space("TileAndFuse"), config)  # type: ignore[arg-type]
    # LHS 128 x 128 and RHS 128 x 256 in f16, the 128 x 256 f32 accumulator staged as well.
    assert usage == ResourceUsage((128 * 128 + 128 * 256) * 2 + 128 * 256 * 4, 128)
    assert check_resources(usage, sm80) == (
        "needs 229376 bytes of shared memory, over the target's 166912"
    )
    smaller = {**config, "workgroup": [64, 128, 0], "reduction": [0, 0, 4]}
    assert (
        check_resources(estimate_resources(problem, _mmt_space("TileAndFuse"), smaller), sm80)
        is None
    )  # type: ignore[arg-type]


def test_vector_distribute_tiles_must_split_into_whole_vectors_per_thread() -> None:
    from ireetune.targets.gpu.resources import check_promoted_reads

    problem = _problem(256, 384, 512)
    config = {
        "workgroup": [256, 96, 0], "reduction": [0, 0, 32], "promote_operands": [0, 1],
        "workgroup_size": [256, 1, 1],
    }  # fmt: skip
    # The mmt's RHS tile is 96 rows (N) of 32 contiguous K elements: 4 vectors a row, 64 rows
    # of threads, which do not divide 96 rows.
    assert check_promoted_reads(problem, _mmt_space("VectorDistribute"), config) == (  # type: ignore[arg-type]
        "operand 1's 96 x 32 tile (4 vectors a row) does not spread evenly over 256 threads"
    )
    matmul_f32 = ContractionProblem(
        op_name="linalg.matmul", loop_sizes=(256, 512, 384), batch_dims=(), m_dims=(0,), n_dims=(1,), k_dims=(2,),
        lhs_type="f32", rhs_type="f32", output_type="f32",
        indexing_maps=("(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d2, d1)", "(d0, d1, d2) -> (d0, d1)"),
        lhs_shape=(256, 384), rhs_shape=(384, 512), output_shape=(256, 512),
    )  # fmt: skip
    wide_k = {
        "workgroup": [128, 128, 0], "reduction": [0, 0, 48], "promote_operands": [0, 1],
        "workgroup_size": [128, 1, 1],
    }  # fmt: skip
    assert check_promoted_reads(matmul_f32, _mmt_space("VectorDistribute"), wide_k) == (  # type: ignore[arg-type]
        "operand 0's 128 x 48 tile (12 vectors a row) does not spread evenly over 128 threads"
    )
    fits = {**config, "workgroup": [256, 128, 0]}
    assert check_promoted_reads(problem, _mmt_space("VectorDistribute"), fits) is None  # type: ignore[arg-type]
    assert check_promoted_reads(problem, _mmt_space("TileAndFuse"), config) is None  # type: ignore[arg-type]


def test_a_workgroup_tile_may_not_exceed_its_loop_unpadded() -> None:
    from ireetune.targets.gpu.resources import check_tile_extents

    problem = _problem(16, 128, 64)
    assert check_tile_extents(problem, {"workgroup": [32, 64, 0]}) == (  # type: ignore[arg-type]
        "workgroup tile 32 of loop 0 exceeds its 16"
    )
    assert check_tile_extents(problem, {"workgroup": [16, 64, 0]}) is None  # type: ignore[arg-type]
    assert check_tile_extents(problem, {"workgroup": [32, 64, 0], "padding": [32, 64, 64]}) is None  # type: ignore[arg-type]


def test_the_lifted_batch_space_tiles_the_innermost_batch_loop() -> None:
    from ireetune.targets.gpu.batch_proxy import batch_tile_smtlib, lift_template

    template = {"workgroup": [IntKnob("wg_0"), IntKnob("wg_1"), 0], "subgroup": [1, 2, 0]}
    lifted = lift_template(template, batch_dims=(0, 1), proxy_loops=3, tiled_batch_dim=1)  # type: ignore[arg-type]
    assert lifted == {
        "workgroup": [1, IntKnob("wg_b"), IntKnob("wg_0"), IntKnob("wg_1"), 0],
        "subgroup": [0, 0, 1, 2, 0],
    }
    space = SmtSpace("batch", TOY_SMTLIB + batch_tile_smtlib(12), (*TOY_KNOBS, "wg_b"))
    tiles = {values["wg_b"] for _, values in sample_spaces([space], seed=0)}
    assert tiles == {1, 2, 3, 4, 6}  # Divisors of 12 up to MAX_BATCH_TILE (8).
