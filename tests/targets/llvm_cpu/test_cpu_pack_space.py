"""The CPU spaces for data-tiling packs and unpacks: the default's neighbours first, a real
`tune-dispatch` that compiles distinct candidates, a spec that lands its configuration in a whole
model under --iree-global-opt-data-tiling, and the model profile that says why not under
--iree-opt-data-tiling."""

from __future__ import annotations

import json
import subprocess
import sys
from itertools import islice
from pathlib import Path

import pytest
from iree.compiler import ir

from ireetune.core.target import space_for
from ireetune.model.profile import LATE_PACK_NOTE
from ireetune.problem.pack import UNPACK_OP, PackProblem, UnpackProblem
from ireetune.problem.registry import parse_problem
from ireetune.spec.builder import build_configuration_spec
from ireetune.spec.inspect import list_matchers
from ireetune.spec.source import parse_spec
from ireetune.targets import parse_target
from ireetune.targets.llvm_cpu.common import CpuFacts
from ireetune.targets.llvm_cpu.elementwise_space import (
    CpuElementwiseSizes,
    CpuPackSpace,
    CpuUnpackSpace,
    compute_unpack_sizes,
    elementwise_tile_lists,
    enumerate_elementwise_space,
)
from tests.conftest import (
    FAST_RUN_ARGS,
    TEST_CPU,
    TEST_TARGET,
    dump_benchmarks,
    parse_function_op,
)
from tests.landing_support import compile_model_with_candidate, find_family_requests
from tests.profile_support import describe_problem
from tests.targets.llvm_cpu.test_cpu_spec_reach import MATMUL_MODEL

AVX512 = CpuFacts("znver4", 64, 32, 32768, 1 << 20, threads=2, max_vector_bytes=32768)
EARLY = ("--iree-global-opt-data-tiling", "--iree-llvmcpu-enable-ukernels=mmt4d")
LATE = ("--iree-opt-data-tiling", "--iree-llvmcpu-enable-ukernels=mmt4d")


# The left-hand and the right-hand side's packs, and the result's unpack (their inner tiles follow
# the CPU), by the names their signatures start with.
LAYOUT_CHANGES = {
    "pack": (PackProblem, CpuPackSpace, ["pack_64x96", "pack_96x128"]),
    "unpack": (UnpackProblem, CpuUnpackSpace, ["unpack"]),
}


@pytest.mark.parametrize("family", list(LAYOUT_CHANGES))
def test_the_layout_changes_of_a_matmul_land_a_neighbour_of_the_default_in_the_whole_model(
    family: str, tmp_path: Path
) -> None:
    record, space_class, names = LAYOUT_CHANGES[family]
    requests = find_family_requests(MATMUL_MODEL, tmp_path / "dump", family, TEST_CPU, EARLY)
    signatures = sorted(request.problem.signature.split("_to_")[0] for request in requests)
    assert [s[: len(n)] for s, n in zip(signatures, names, strict=True)] == names, signatures
    for index, request in enumerate(requests):
        problem = request.problem
        assert isinstance(problem, record) and request.default_knobs is not None
        space = space_for(parse_target(TEST_TARGET), problem)
        assert isinstance(space, space_class)
        knobs = next(space.generate(request))
        # The first candidate is a neighbour of the default: one knob moved.
        assert len(set(knobs) - set(request.default_knobs)) == 1, (knobs, request.default_knobs)
        folder = tmp_path / f"{family}_{index}"
        folder.mkdir()
        report = compile_model_with_candidate(
            tmp_path / "dump" / "model.mlir", problem, knobs, folder, EARLY
        )
        # The configuration dump of the whole data-tiled model shows the candidate's tiles on
        # that op (the other layout changes and the mmt4d keep their defaults).
        (landed,) = report.checks
        tiles = elementwise_tile_lists(problem, knobs)
        assert landed.landed, landed
        assert landed.found == (
            f"#iree_cpu.lowering_config<distribution = {tiles['distribution']}, "
            f"vector_common_parallel = {tiles['vector_common_parallel']}>"
        )


def test_an_unpack_matcher_names_the_op_checks_both_types_and_reads_back(tmp_path: Path) -> None:
    (request,) = find_family_requests(MATMUL_MODEL, tmp_path / "dump", "unpack", TEST_CPU, EARLY)
    problem = request.problem
    assert isinstance(problem, UnpackProblem)
    context = ir.Context()
    configuration = space_for(parse_target(TEST_TARGET), problem).configuration(
        problem, request.default_knobs or (), context
    )
    text = build_configuration_spec(problem, configuration, (), context)
    source, dest = problem.operand_tensor_types
    assert '["linalg.unpack"]' in text and "cast_compatible_dag_from_root" not in text, text
    assert "transform.iree.match.cast_compatible_type " in text, text
    for type_text in (source, dest):
        assert f"= {type_text} : !transform.any_value" in text, text
    (matcher,) = list_matchers(parse_spec(text, "spec.mlir", context))
    assert (matcher.kind, matcher.conditions) == (
        "unpack",
        ("op name in [linalg.unpack]", f"unpack {source} -> {dest}"),
    )
    # The same type checks after another op's name (a hand-written spec's matmul) are no
    # unpack pattern, and neither is an unpack matcher that checks its source only.
    dest_check = next(line for line in text.splitlines() if f"= {dest} :" in line)
    for other in (
        text.replace('["linalg.unpack"]', '["linalg.matmul"]'),
        text.replace(dest_check + "\n", ""),
    ):
        (read,) = list_matchers(parse_spec(other, "spec.mlir", context))
        assert read.kind != "unpack", read


@pytest.mark.parametrize(
    ("dispatch", "problem_start"),
    [("pack", "problem: pack_64x96_to_"), ("unpack", "problem: unpack_")],
)
def test_tune_a_layout_change_dispatch_on_the_cpu(
    dispatch: str, problem_start: str, tmp_path: Path
) -> None:
    benchmarks = dump_benchmarks(MATMUL_MODEL, tmp_path / "dump", TEST_CPU, EARLY)
    # The first dispatch is the left-hand side's pack, the last the result's unpack.
    benchmark = benchmarks[0] if dispatch == "pack" else benchmarks[-1]
    result = subprocess.run(
        [
            sys.executable, "-m", "ireetune.cli", "tune-dispatch", str(benchmark),
            "--target", TEST_TARGET, "--num-candidates", "3", "--output-dir", str(tmp_path / "out"),
            "--no-db", *FAST_RUN_ARGS,
        ],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert problem_start in result.stdout, result.stdout
    (run_dir,) = (tmp_path / "out").iterdir()
    candidates = json.loads((run_dir / "results.json").read_text())["candidates"]
    statuses = [c["status"] for c in candidates[1:]]
    # Every candidate compiled, landed (its binary is not the default's) and was timed.
    assert len(statuses) == 3 and set(statuses) <= {"measured", "verified"}, candidates
    hashes = [c["binary_hash"] for c in candidates]
    assert len(set(hashes)) == len(hashes), candidates
    assert "DataTiling" in (run_dir / "specs" / "1_spec.mlir").read_text()


OWN_PREPROCESSING = "--iree-hal-preprocess-executables-with=builtin.module()"


def test_a_pack_is_not_tunable_in_a_model_under_the_late_data_tiling_path(
    tmp_path: Path,
) -> None:
    benchmarks = dump_benchmarks(MATMUL_MODEL, tmp_path / "dump", TEST_CPU, LATE)
    target = parse_target(TEST_TARGET)
    reasons = {
        label: [describe_problem(path, target.with_global_flags(flags)) for path in benchmarks]
        # A user's own executable preprocessing keeps the target from adding MATERIALIZE_FIRST:
        # the late path alone, where no spec reaches a pack.
        for label, flags in (("late", (*LATE, OWN_PREPROCESSING)), ("early", EARLY))
    }
    # The late path fuses the result's unpack into the mmt4d's dispatch: the packs are left.
    packs = [name for name, _ in reasons["early"] if name.startswith("pack_")]
    assert len(packs) == 2 and all(tunable for name, tunable in reasons["early"] if name in packs)
    assert [r for r in reasons["late"] if "pack" in r[0]] == [
        (f"not tunable: {pack} {LATE_PACK_NOTE}", False) for pack in packs
    ]


# Rows that are no multiple of the inner tile (8 or 16): the left-hand side's pack pads them with
# its dispatch's constant zero.
PADDED_MATMUL_MODEL = MATMUL_MODEL.replace("64x", "60x")


def test_a_padded_pack_lands_in_the_whole_model_and_is_tuned_on_its_reference(
    tmp_path: Path,
) -> None:
    assert "64x" not in PADDED_MATMUL_MODEL
    requests = find_family_requests(PADDED_MATMUL_MODEL, tmp_path / "dump", "pack", TEST_CPU, EARLY)
    (padded,) = [r for r in requests if r.problem.signature.startswith("pack_60x96_to_")]
    assert "padding_value" in padded.problem.source, padded.problem.source  # type: ignore[attr-defined]
    space = space_for(parse_target(TEST_TARGET), padded.problem)
    knobs = next(space.generate(padded))
    (folder := tmp_path / "landed").mkdir()
    report = compile_model_with_candidate(
        tmp_path / "dump" / "model.mlir", padded.problem, knobs, folder, EARLY
    )
    (landed,) = report.checks
    assert landed.landed, landed
    # The reference program keeps the padding constant, and each candidate's reference binary
    # is its own.
    benchmarks = dump_benchmarks(PADDED_MATMUL_MODEL, tmp_path / "bench", TEST_CPU, EARLY)
    result = subprocess.run(
        [
            sys.executable, "-m", "ireetune.cli", "tune-dispatch", str(benchmarks[0]),
            "--target", TEST_TARGET, "--num-candidates", "3", "--output-dir", str(tmp_path / "out"),
            "--no-db", *FAST_RUN_ARGS,
        ],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "problem: pack_60x96_to_" in result.stdout, result.stdout
    (run_dir,) = (tmp_path / "out").iterdir()
    candidates = json.loads((run_dir / "results.json").read_text())["candidates"]
    assert [c["status"] in {"measured", "verified"} for c in candidates[1:]] == [True] * 3
    assert len({c["binary_hash"] for c in candidates}) == 4, candidates
    assert "padding_value" in (run_dir / "verify" / "reference.mlir").read_text()


# An unpack of a 60x128 result from 8x16 tiles (rows padded to 64): its columns are whole tiles,
# its rows are not.
PADDED_UNPACK = """
func.func @f(%s: tensor<8x8x8x16xf32>, %d: tensor<60x128xf32>) -> tensor<60x128xf32> {
  %u = linalg.unpack %s outer_dims_perm = [0, 1] inner_dims_pos = [0, 1] inner_tiles = [8, 16] into %d : tensor<8x8x8x16xf32> -> tensor<60x128xf32>
  return %u : tensor<60x128xf32>
}
"""


def test_unpack_tiles_stay_at_multiples_of_its_inner_tiles() -> None:
    context = ir.Context()
    swapped = PADDED_UNPACK.replace("[0, 1] inner_tiles", "[1, 0] inner_tiles")
    module, op = parse_function_op(swapped.replace("8x8x8x16", "4x16x8x16"), context, UNPACK_OP)
    with context:
        problem = parse_problem(op)
    assert isinstance(problem, UnpackProblem)
    # inner_dims_pos = [1, 0]: the columns are read in tiles of 8, the rows in tiles of 16.
    assert problem.inner_tiles == (16, 8)
    module, op = parse_function_op(PADDED_UNPACK, context, UNPACK_OP)
    with context:
        problem = parse_problem(op)
    assert isinstance(problem, UnpackProblem) and problem.inner_tiles == (8, 16)
    sizes = compute_unpack_sizes(problem)
    # A default that keeps whole 16-column tiles (its values join their domains).
    default = (("dist_0", 4), ("dist_1", 64), ("vec_0", 4), ("vec_1", 16))
    candidates = list(islice(enumerate_elementwise_space(sizes, AVX512, 0, default), 40))
    assert len(candidates) >= 10
    # The columns (whole tiles of 16) keep distribution tiles at multiples of 16; the 60 rows,
    # no multiple of 8, are free, and so are the vector tiles.
    assert all(dict(knobs)["dist_1"] % 16 == 0 for knobs in candidates), candidates
    assert {dict(k)["dist_0"] for k in candidates} - {8, 16, 32}, candidates
    assert {dict(k)["vec_1"] for k in candidates} - {16, 32, 64}, candidates
    # 16x16 tiles on a CPU of 16 registers of 32 bytes (haswell) still leave a space.
    wide = CpuElementwiseSizes((64, 128), 4, (16, 16))
    haswell = CpuFacts("haswell", 32, 16, 32768, 1 << 20, threads=2, max_vector_bytes=32768)
    assert next(enumerate_elementwise_space(wide, haswell, 0, None), None) is not None
