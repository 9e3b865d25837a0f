"""The CPU space for data-tiling packs: the default's neighbours first, a real `tune-dispatch`
that compiles distinct candidates, a spec that lands its configuration in a whole model under
--iree-global-opt-data-tiling, and the model profile that says why not under
--iree-opt-data-tiling."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ireetune.core.target import space_for
from ireetune.model.profile import LATE_PACK_NOTE, describe_problem
from ireetune.problem.pack import PackProblem
from ireetune.targets import parse_target
from ireetune.targets.llvm_cpu.elementwise_space import CpuPackSpace, elementwise_tile_lists
from tests.conftest import FAST_RUN_ARGS, TEST_CPU, TEST_TARGET, dump_benchmarks
from tests.landing_support import compile_model_with_candidate, find_family_requests
from tests.targets.llvm_cpu.test_cpu_spec_reach import MATMUL_MODEL

EARLY = ("--iree-global-opt-data-tiling", "--iree-llvmcpu-enable-ukernels=mmt4d")
LATE = ("--iree-opt-data-tiling", "--iree-llvmcpu-enable-ukernels=mmt4d")


def test_both_packs_of_a_matmul_land_a_neighbour_of_the_default_in_the_whole_model(
    tmp_path: Path,
) -> None:
    requests = find_family_requests(MATMUL_MODEL, tmp_path / "dump", "pack", TEST_CPU, EARLY)
    # The left-hand and the right-hand side's packs (their inner tiles follow the CPU).
    signatures = sorted(request.problem.signature.split("_to_")[0] for request in requests)
    assert signatures == ["pack_64x96", "pack_96x128"]
    for index, request in enumerate(requests):
        problem = request.problem
        assert isinstance(problem, PackProblem) and request.default_knobs is not None
        space = space_for(parse_target(TEST_TARGET), problem)
        assert isinstance(space, CpuPackSpace)
        knobs = next(space.generate(request))
        # The first candidate is a neighbour of the default: one knob moved.
        assert len(set(knobs) - set(request.default_knobs)) == 1, (knobs, request.default_knobs)
        folder = tmp_path / f"pack_{index}"
        folder.mkdir()
        report = compile_model_with_candidate(
            tmp_path / "dump" / "model.mlir", problem, knobs, folder, EARLY
        )
        # The configuration dump of the whole data-tiled model shows the candidate's tiles on
        # that pack (the other pack, the mmt4d and the unpack keep their defaults).
        (landed,) = report.checks
        tiles = elementwise_tile_lists(problem, knobs)
        assert landed.landed, landed
        assert landed.found == (
            f"#iree_cpu.lowering_config<distribution = {tiles['distribution']}, "
            f"vector_common_parallel = {tiles['vector_common_parallel']}>"
        )


def test_tune_a_pack_dispatch_on_the_cpu(tmp_path: Path) -> None:
    benchmarks = dump_benchmarks(MATMUL_MODEL, tmp_path / "dump", TEST_CPU, EARLY)
    result = subprocess.run(
        [
            sys.executable, "-m", "ireetune.cli", "tune-dispatch", str(benchmarks[0]),
            "--target", TEST_TARGET, "--num-candidates", "3", "--output-dir", str(tmp_path / "out"),
            "--no-db", *FAST_RUN_ARGS,
        ],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "problem: pack_64x96_to_" in result.stdout, result.stdout
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
    packs = [name for name, _ in reasons["early"] if name.startswith("pack_")]
    assert len(packs) == 2 and all(tunable for name, tunable in reasons["early"] if name in packs)
    assert [r for r in reasons["late"] if "pack" in r[0]] == [
        (f"not tunable: {pack} {LATE_PACK_NOTE}", False) for pack in packs
    ]
