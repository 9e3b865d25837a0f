"""The CPU space for element-wise generics: its knobs, the default's neighbours first, and a real
`tune-dispatch` of a small element-wise dispatch (candidates measured, outputs verified)."""

from __future__ import annotations

import json
import subprocess
import sys
from itertools import islice
from pathlib import Path

import numpy as np
import pytest
from iree.compiler import ir

from ireetune.core.candidate import make_knobs
from ireetune.core.errors import IreetuneError
from ireetune.core.target import OpConfiguration
from ireetune.executor import LocalExecutor
from ireetune.problem.body_matcher import reads_constants
from ireetune.problem.elementwise import ElementwiseProblem
from ireetune.problem.generic import NEUTRAL_BODY_OPS
from ireetune.problem.registry import family_of, parse_problem
from ireetune.spec.builder import build_configuration_spec
from ireetune.spec.inspect import MatchVerdict, list_matchers, match_problem
from ireetune.spec.source import read_spec
from ireetune.targets.llvm_cpu.common import CpuFacts, order_pool
from ireetune.targets.llvm_cpu.elementwise_space import (
    CpuElementwiseSizes,
    CpuElementwiseSpace,
    elementwise_anchor,
    elementwise_domains,
    elementwise_tile_lists,
    enumerate_elementwise_space,
)
from ireetune.verify.compare import make_random_inputs
from ireetune.verify.runner import ReferenceBatch
from tests.conftest import FAST_RUN_ARGS, TEST_TARGET, parse_function_op

AVX2 = CpuFacts("haswell", 32, 16, 32768, 1 << 20, threads=2, max_vector_bytes=32768)
# A residual add with a bias broadcast over rows: two loops IREE keeps (the bias reads one).
BIAS_ADD_MODEL = """
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
func.func @main(%x: tensor<32x48xf32>, %y: tensor<32x48xf32>, %b: tensor<48xf32>) -> tensor<32x48xf32> {
  %e = tensor.empty() : tensor<32x48xf32>
  %r = linalg.generic {indexing_maps = [#id, #id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %y, %b : tensor<32x48xf32>, tensor<32x48xf32>, tensor<48xf32>) outs(%e : tensor<32x48xf32>) {
    ^bb0(%a: f32, %c: f32, %bias: f32, %out: f32):
      %s = arith.addf %a, %c : f32
      %t = arith.addf %s, %bias : f32
      linalg.yield %t : f32
  } -> tensor<32x48xf32>
  return %r : tensor<32x48xf32>
}
"""  # noqa: E501


def test_the_space_starts_at_the_defaults_neighbours() -> None:
    sizes = CpuElementwiseSizes(loops=(64, 96), element_bytes=4)
    domains = elementwise_domains(sizes)
    # Outer loops take small vector tiles, the innermost whole or masked vectors.
    assert domains["vec_0"] == [1, 2, 4, 8, 16]
    assert domains["vec_1"] == [1, 2, 4, 8, 16, 32]
    default = (("dist_0", 64), ("dist_1", 96), ("vec_0", 1), ("vec_1", 8))
    first = list(enumerate_elementwise_space(sizes, AVX2, 0, default))[:4]
    assert all(len(set(knobs) - set(default)) == 1 for knobs in first), first
    assert default not in first


def test_tiny_and_very_many_default_tasks_move_the_search_to_wider_ones() -> None:
    """ZFNet-512's im2col gather: IREE 3.13 gives 11881 tasks of 147 elements; the search starts
    at one whole 109-wide row per task (8.3x faster there), and orders it first."""
    sizes = CpuElementwiseSizes(loops=(3, 7, 7, 109, 109), element_bytes=4)
    tiles = {"dist_0": 3, "dist_1": 7, "dist_2": 7, "dist_3": 1, "dist_4": 1}
    default = make_knobs({**tiles, **{f"vec_{i}": 1 for i in range(5)}})
    anchor = elementwise_anchor(sizes, 2, default)
    assert dict(anchor) == {**dict(default), "dist_4": 109}
    drawn = list(islice(enumerate_elementwise_space(sizes, AVX2, 0, default), 24))
    assert drawn[0] == anchor
    ordered = order_pool(CpuElementwiseSpace.family.score, sizes, AVX2, drawn, 0, default)
    assert ordered[0][0] == anchor
    # The widening stops at the first tile that gives a task enough elements.
    rows = CpuElementwiseSizes(loops=(4096, 64), element_bytes=4)
    small = make_knobs({"dist_0": 1, "dist_1": 2, "vec_0": 1, "vec_1": 2})
    assert dict(elementwise_anchor(rows, 2, small)) == {**dict(small), "dist_1": 64, "dist_0": 16}
    # Tasks already large enough, or few enough, keep the default as the centre.
    for loops, knobs in [
        ((64, 96), {"dist_0": 64, "dist_1": 96, "vec_0": 1, "vec_1": 8}),
        ((64, 96), {"dist_0": 8, "dist_1": 8, "vec_0": 1, "vec_1": 8}),
    ]:
        centred = make_knobs(knobs)
        assert elementwise_anchor(CpuElementwiseSizes(loops, 4), 2, centred) == centred


def test_a_transpose_keeps_its_two_vector_tiles(tmp_path: Path) -> None:
    from ireetune.problem.elementwise import ElementwiseProblem

    problem = ElementwiseProblem(
        kind="elementwise",
        op_name="linalg.generic",
        loop_sizes=(64, 32),
        input_types=("f32",),
        input_shapes=((64, 32),),
        output_type="f32",
        output_shape=(32, 64),
        indexing_maps=("(d0, d1) -> (d0, d1)", "(d0, d1) -> (d1, d0)"),
        body=("linalg.yield",),
        source="",
    )
    knobs = (("dist_0", 8), ("dist_1", 32), ("vec_0", 8), ("vec_1", 8))
    assert elementwise_tile_lists(problem, knobs) == {
        "distribution": [8, 32],
        "vector_common_parallel": [8, 8],
    }
    # The body only yields its input: a transpose moves elements and computes nothing.
    assert all(op in NEUTRAL_BODY_OPS for op in problem.body)
    assert problem.signature == "elementwise_64x32_f32_f32"


def test_tune_an_elementwise_dispatch_on_the_cpu(tmp_path: Path) -> None:
    model = tmp_path / "bias_add.mlir"
    model.write_text(BIAS_ADD_MODEL)
    result = subprocess.run(
        [
            sys.executable, "-m", "ireetune.cli", "tune-dispatch", str(model),
            "--target", TEST_TARGET, "--num-candidates", "3", "--output-dir", str(tmp_path / "out"),
            "--no-db", *FAST_RUN_ARGS,
        ],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "problem: elementwise_32x48_f32_f32_f32_f32" in result.stdout
    (run_dir,) = (tmp_path / "out").iterdir()
    candidates = json.loads((run_dir / "results.json").read_text())["candidates"]
    statuses = [c["status"] for c in candidates[1:]]
    # Every candidate compiled, landed (its binary is not the default's) and was timed.
    assert len(statuses) == 3 and set(statuses) <= {"measured", "verified"}, candidates
    hashes = [c["binary_hash"] for c in candidates]
    assert len(set(hashes)) == len(hashes), candidates
    # Each candidate's binary (the reference program under its spec) computes the op.
    x, y, b = make_random_inputs([(32, 48), (32, 48), (48,)], ["f32"] * 3, seed=1)
    np.savez(tmp_path / "inputs.npz", arg0=x, arg1=y, arg2=b)
    runs = LocalExecutor().run_reference_programs(
        ReferenceBatch(
            [
                (
                    c["candidate_id"],
                    run_dir / c["binary_path"],
                    tmp_path / f"{c['candidate_id']}.npy",
                )
                for c in candidates
            ],
            "local-task",
            tmp_path / "inputs.npz",
        )
    )
    for run in runs.values():
        assert run.output is not None
        np.testing.assert_allclose(run.output, x + y + b, rtol=1e-6)
    spec_path = run_dir / "specs" / "1_spec.mlir"
    spec = spec_path.read_text()
    assert "cast_compatible_dag_from_root" in spec and "DoubleTilingExpert" in spec
    # `spec show` reads the matcher back as an element-wise one.
    context = ir.Context()
    (matcher,) = list_matchers(read_spec(spec_path, context))
    assert matcher.kind == "elementwise"
    assert matcher.conditions[0].startswith(
        "element-wise tensor<32x48xf32> x tensor<32x48xf32> x tensor<48xf32> -> tensor<32x48xf32>"
    ), matcher.conditions


def _body_reading(body: str, argument: str = "") -> str:
    """A one-loop generic whose body is `body` (it yields %r), in a function that defines
    %zero and takes `argument` besides %x."""
    return f"""
    func.func @f(%x: tensor<8xf32>{argument}) -> tensor<8xf32> {{
      %zero = arith.constant 0.0 : f32
      %e = tensor.empty() : tensor<8xf32>
      %r = linalg.generic {{indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
          iterator_types = ["parallel"]}} ins(%x : tensor<8xf32>) outs(%e : tensor<8xf32>) {{
        ^bb0(%in: f32, %out: f32):
          {body}
      }} -> tensor<8xf32>
      return %r : tensor<8xf32>
    }}
    """


@pytest.mark.parametrize(
    ("body", "argument", "refusal"),
    [
        (
            "%m = arith.maximumf %in, %s : f32\n linalg.yield %m : f32",
            ", %s: f32",
            "its body reads a value from outside it that is not a constant",
        ),
        (
            "%k = linalg.index 0 : index\n %i = arith.index_cast %k : index to i32\n"
            " %f = arith.sitofp %i : i32 to f32\n %a = arith.addf %in, %f : f32\n"
            " %m = arith.maximumf %a, %zero : f32\n linalg.yield %m : f32",
            "",
            "reads both constants from outside it and loop indices",
        ),
        ("linalg.yield %zero : f32", "", "its body yields a value it does not compute"),
        (
            "%two = arith.constant 2.0 : f32\n %d = arith.mulf %in, %two : f32\n"
            " %m = arith.maximumf %d, %zero : f32\n linalg.yield %m : f32",
            "",
            "defines constants of its own",
        ),
        (
            "%d = arith.addf %in, %zero : f32\n %m = arith.maximumf %in, %zero : f32\n"
            " linalg.yield %m : f32",
            "",
            "its body computes values it does not yield",
        ),
    ],
    ids=["argument", "index", "yields_constant", "inner_constant", "dead_op"],
)
def test_a_body_no_matcher_reaches_is_refused_with_its_reason(
    body: str, argument: str, refusal: str
) -> None:
    context = ir.Context()
    _, generic = parse_function_op(_body_reading(body, argument), context)
    with context, pytest.raises(IreetuneError, match=refusal):
        parse_problem(generic)


def test_a_body_reading_a_constant_gets_a_body_matcher_read_back_whole() -> None:
    context = ir.Context()
    module, generic = parse_function_op(
        _body_reading("%m = arith.maximumf %in, %zero : f32\n linalg.yield %m : f32"), context
    )
    with context:
        problem = parse_problem(generic)
    assert isinstance(problem, ElementwiseProblem) and reads_constants(problem)
    expected = family_of(problem).expected_pattern(problem)
    # No maps (the body matcher checks none); the constant's value is part of what it checks.
    assert expected.indexing_maps == ()
    assert expected.body == (
        "parallel",
        "arith.maximumf",
        "linalg.yield",
        "constant 0.000000e+00 : f32",
    )
    configuration = OpConfiguration(
        "#iree_codegen.compilation_info<lowering_config = #iree_cpu.lowering_config<distribution = [4], vector_common_parallel = [4]>, translation_info = #iree_codegen.translation_info<pipeline = #iree_cpu.pipeline<DoubleTilingExpert>>>"
    )
    spec = build_configuration_spec(problem, configuration, (), context)
    spec_module = ir.Module.parse(spec, ir.Context())
    (matcher,) = list_matchers(spec_module.operation)
    assert matcher.pattern == expected
    assert matcher.op_names == () and matcher.other_conditions == ()
    assert match_problem(matcher, problem) is MatchVerdict.HIT
    # A ReLU6 reads two constants: the pattern lists them in the body's order on every parse.
    relu6 = _body_reading(
        "%m = arith.maximumf %in, %zero : f32\n %c = arith.minimumf %m, %six : f32\n"
        " linalg.yield %c : f32"
    ).replace("%e = tensor.empty()", "%six = arith.constant 6.0 : f32\n      %e = tensor.empty()")
    _, clamp = parse_function_op(relu6, context)
    with context:
        clamp_problem = parse_problem(clamp)
    clamp_spec = build_configuration_spec(clamp_problem, configuration, (), context)
    clamp_module = ir.Module.parse(clamp_spec, ir.Context())
    (clamp_matcher,) = list_matchers(clamp_module.operation)
    assert clamp_matcher.pattern == family_of(clamp_problem).expected_pattern(clamp_problem)
    assert clamp_matcher.pattern is not None and clamp_matcher.pattern.body[-2:] == (
        "constant 0.000000e+00 : f32",
        "constant 6.000000e+00 : f32",
    )
    # The same body at another constant (a ReLU at 1) is another problem the matcher misses.
    relu_at_one = _body_reading("%m = arith.maximumf %in, %zero : f32\n linalg.yield %m : f32")
    _, other = parse_function_op(relu_at_one.replace("constant 0.0", "constant 1.0"), context)
    with context:
        assert match_problem(matcher, parse_problem(other)) is MatchVerdict.MISS
    del module
