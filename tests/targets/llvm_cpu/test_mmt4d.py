"""Data-tiled dispatches: the mmt4d parsed as a contraction, its CPU space, the packs skipped."""

from __future__ import annotations

import itertools
import re
import subprocess
from pathlib import Path

import pytest
from iree.compiler import ir

from ireetune.core.target import space_for
from ireetune.problem.contraction import ContractionProblem
from ireetune.problem.root_op import find_root_op, parse_problem
from ireetune.targets import parse_target
from ireetune.targets.llvm_cpu.facts import CpuFacts
from ireetune.targets.llvm_cpu.mmt4d_space import (
    Mmt4dSizes,
    compute_mmt4d_sizes,
    enumerate_mmt4d_space,
    mmt4d_tile_lists,
    order_mmt4d_candidates,
)
from tests.conftest import CPU_FLAGS, IREE_COMPILE, MATMUL_MODEL

AVX512 = CpuFacts("znver4", 64, 32, 32768, 1 << 20, threads=2, max_vector_bytes=32768)
README_MMT4D = Mmt4dSizes(m1=64, n1=64, k1=1024, m0=16, n0=16, k0=1, input_bytes=4,
                          accumulator_bytes=4)  # fmt: skip


@pytest.fixture(scope="module")
def data_tiled_dumps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Dump the test matmul's dispatches under data tiling for znver4 (AVX-512, whose register
    tile is 16x16 on any host): two packs and the mmt4d. Nothing runs them."""
    folder = tmp_path_factory.mktemp("data_tiled")
    model = folder / "model.mlir"
    model.write_text(MATMUL_MODEL)
    subprocess.run(
        [IREE_COMPILE, str(model), *CPU_FLAGS[:-1], "--iree-llvmcpu-target-cpu=znver4",
         "--iree-opt-data-tiling",
         "--iree-llvmcpu-enable-ukernels=mmt4d", f"--iree-hal-dump-executable-benchmarks-to={folder}",
         "--iree-codegen-add-tuner-attributes", "-o", str(folder / "model.vmfb")],
        check=True, capture_output=True,
    )  # fmt: skip
    dumps = sorted(folder.glob("*_benchmark.mlir"))
    return {("mmt4d" if "dispatch" in p.name else p.name.split("_")[3]): p for p in dumps}


def _parse(path: Path, context: ir.Context) -> tuple[ir.Module, ir.Operation]:
    """Return the module with its root op (the module owns the op: keep both alive)."""
    with context:
        module = ir.Module.parse(path.read_text())
        return module, find_root_op(module)


def test_mmt4d_is_a_contraction_with_outer_and_inner_tiles(
    data_tiled_dumps: dict[str, Path],
) -> None:
    context = ir.Context()
    with context:
        _, root = _parse(data_tiled_dumps["mmt4d"], context)
        problem = parse_problem(root)
    assert isinstance(problem, ContractionProblem)
    assert (problem.m_dims, problem.n_dims, problem.k_dims) == ((0, 3), (1, 4), (2, 5))
    assert (problem.loop_sizes, problem.kind) == ((4, 8, 96, 16, 16, 1), "mmt4d")
    assert problem.signature == "mmt4d_4x16x8x16x96x1_f32_f32_f32"
    assert compute_mmt4d_sizes(problem) == Mmt4dSizes(4, 8, 96, 16, 16, 1, 4, 4)


def test_the_packs_are_reported_as_not_tunable(data_tiled_dumps: dict[str, Path]) -> None:
    # These dumps come from --iree-opt-data-tiling, where no spec reaches a pack in a model.
    from ireetune.model.profile import LATE_PACK_NOTE, describe_problem

    target = parse_target("cpu:znver4").with_global_flags(("--iree-opt-data-tiling",))
    for name in ("0", "1"):
        reason, tunable = describe_problem(data_tiled_dumps[name], target)
        assert not tunable and reason.startswith("not tunable: pack_"), reason
        assert reason.endswith(LATE_PACK_NOTE)


def test_the_compilers_own_mmt4d_config_is_read_and_rendered_back(
    data_tiled_dumps: dict[str, Path],
) -> None:
    context = ir.Context()
    target = parse_target("cpu:znver4")
    with context:
        _, root = _parse(data_tiled_dumps["mmt4d"], context)
        problem = parse_problem(root)
        default = space_for(target, problem).parse_default_knobs(problem, root)
        assert isinstance(problem, ContractionProblem) and default is not None
        info = space_for(target, problem).configuration(problem, default, context).compilation_info
        dumped = str(root.attributes["lowering_config"])
    # What we would write for the compiler's own choice is exactly what the compiler wrote.
    assert dumped in info and "Mmt4dTilingExpert" in info
    assert mmt4d_tile_lists(problem, default)["vector_common_parallel"] == [1, 1, 0, 16, 16, 0]


def test_every_mmt4d_candidate_keeps_the_inner_tile_and_fits_the_machine() -> None:
    candidates = [
        dict(knobs)
        for knobs in itertools.islice(enumerate_mmt4d_space(README_MMT4D, AVX512, 0), 500)
    ]
    assert len(candidates) == len({tuple(sorted(c.items())) for c in candidates}) > 10
    for values in candidates:
        dist_m1, dist_n1 = int(values["dist_m1"]), int(values["dist_n1"])
        assert 64 % dist_m1 == 0 and 64 % dist_n1 == 0
        panels = (dist_m1 * 16 + dist_n1 * 16) * 1024 * 4 + dist_m1 * dist_n1 * 256 * 4
        assert panels <= AVX512.l2_bytes or dist_m1 * dist_n1 == 1
        assert (64 // dist_m1) * (64 // dist_n1) >= AVX512.threads
    excluded = (("dist_m1", 1), ("dist_n1", 2))
    assert dict(excluded) not in [
        dict(k)
        for k in itertools.islice(enumerate_mmt4d_space(README_MMT4D, AVX512, 0, excluded), 500)
    ]


def test_mmt4d_ordering_prefers_balanced_tiles() -> None:
    # 3 tiles over 2 threads leave one idle half the time; 4 tiles do not.
    sizes = Mmt4dSizes(m1=6, n1=2, k1=64, m0=16, n0=16, k0=1, input_bytes=4, accumulator_bytes=4)
    balanced = (("dist_m1", 3), ("dist_n1", 1))
    unbalanced = (("dist_m1", 2), ("dist_n1", 2))
    ordered = order_mmt4d_candidates(sizes, AVX512, [unbalanced, balanced], seed=0)
    assert [knobs for knobs, _ in ordered] == [balanced, unbalanced]


def test_in_a_model_a_data_tiled_mmt4d_is_not_tunable_and_says_why(
    data_tiled_dumps: dict[str, Path],
) -> None:
    from ireetune.model.profile import ENCODED_MMT4D_NOTE, describe_problem

    target = parse_target("cpu:znver4")
    problem, tunable = describe_problem(data_tiled_dumps["mmt4d"], target, encoded_mmt4d=True)
    assert not tunable and problem.startswith("not tunable: mmt4d_")
    assert problem.endswith(ENCODED_MMT4D_NOTE)
    # A model that writes its mmt4d itself, and the dispatch alone, keep it tunable.
    problem, tunable = describe_problem(data_tiled_dumps["mmt4d"], target)
    assert tunable and problem.startswith("mmt4d_")


def _mmt4d_configs(folder: Path) -> list[str]:
    """Return the lowering configs of the mmt4d ops in dumped executable configurations."""
    return [
        match.group(0)
        for path in sorted(folder.glob("*.mlir"))
        for line in path.read_text().splitlines()
        if "linalg.mmt4d" in line
        for match in re.finditer(r"lowering_config<[^>]*>", line)
    ]


MMT4D_SPEC = """
#config = #iree_cpu.lowering_config<distribution = [1, 1, 0, 0, 0, 0],
  vector_common_parallel = [1, 1, 0, 16, 16, 0], vector_reduction = [0, 0, 1, 0, 0, 1]>
#compilation = #iree_codegen.compilation_info<lowering_config = #config,
  translation_info = #iree_codegen.translation_info<pipeline = #iree_cpu.pipeline<Mmt4dTilingExpert>>>
module attributes {transform.with_named_sequence} {
  transform.named_sequence @apply(%op: !transform.any_op {transform.readonly},
                                  %config: !transform.any_param {transform.readonly}) {
    transform.annotate %op "compilation_info" = %config : !transform.any_op, !transform.any_param
    transform.yield
  }
  transform.named_sequence @match(%op: !transform.any_op {transform.readonly})
      -> (!transform.any_op, !transform.any_param) {
    transform.match.operation_name %op ["linalg.mmt4d"] : !transform.any_op
    %config = transform.param.constant #compilation -> !transform.any_param
    transform.yield %op, %config : !transform.any_op, !transform.any_param
  }
  transform.named_sequence @__kernel_config(%root: !transform.any_op {transform.consumed})
      -> !transform.any_op attributes {iree_codegen.tuning_spec_entrypoint} {
    %updated = transform.foreach_match in %root @match -> @apply
        : (!transform.any_op) -> !transform.any_op
    transform.yield %updated : !transform.any_op
  }
}
"""


def test_a_spec_for_the_dumped_mmt4d_does_not_reach_the_whole_model(
    data_tiled_dumps: dict[str, Path], tmp_path: Path
) -> None:
    """Why the model flow does not tune data-tiled matmuls (ENCODED_MMT4D_NOTE): a spec that
    sets its own config on every mmt4d reaches the dumped mmt4d dispatch, and leaves the same
    model compiled whole with the compiler's config. If a new IREE lets the spec through, this
    fails: tune them in models again."""
    from ireetune.frontend.dispatches import strip_configurations

    spec = tmp_path / "spec.mlir"
    spec.write_text(MMT4D_SPEC)
    alone = tmp_path / "alone.mlir"
    strip_configurations(data_tiled_dumps["mmt4d"], alone, timeout_s=120)
    model = data_tiled_dumps["mmt4d"].parent / "model.mlir"
    flags = [*CPU_FLAGS[:-1], "--iree-llvmcpu-target-cpu=znver4", "--iree-opt-data-tiling",
             "--iree-llvmcpu-enable-ukernels=mmt4d"]  # fmt: skip
    configs = {}
    # The dispatch alone keeps the compiler's config as dumped (stripped, it has none to fall
    # back on: IREE 3.13 then fails to configure an mmt4d by itself) and takes the spec's.
    compiles = [
        ("model", "default", model, []),
        ("model", "spec", model, [f"--iree-codegen-tuning-spec-path={spec}"]),
        ("alone", "default", data_tiled_dumps["mmt4d"], []),
        ("alone", "spec", alone, [f"--iree-codegen-tuning-spec-path={spec}"]),
    ]
    for label, name, source, extra in compiles:
        dump = tmp_path / f"{label}_{name}"
        subprocess.run(
            [IREE_COMPILE, str(source), *flags, *extra,
             f"--iree-hal-dump-executable-configurations-to={dump}", "-o", f"{dump}.vmfb"],
            check=True, capture_output=True,
        )  # fmt: skip
        configs[label, name] = _mmt4d_configs(dump)
    # The spec reaches the dispatch alone...
    assert (
        configs["alone", "default"]
        and "distribution = [1, 1, 0" not in configs["alone", "default"][0]
    )
    assert "distribution = [1, 1, 0" in configs["alone", "spec"][0]
    # ...but not the model, where the mmt4d keeps the compiler's config.
    assert configs["model", "spec"] == configs["model", "default"] == configs["alone", "default"]
