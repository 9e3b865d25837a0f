"""Data-tiled dispatches: the mmt4d parsed as a contraction, its CPU space, the packs skipped."""

from __future__ import annotations

import functools
import itertools
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from iree.compiler import ir

from ireetune.core.target import space_for
from ireetune.problem.contraction import ContractionProblem
from ireetune.problem.root_op import find_root_op, parse_problem
from ireetune.targets import parse_target
from ireetune.targets.llvm_cpu.common import CpuFacts, order_pool
from ireetune.targets.llvm_cpu.mmt4d_space import (
    Mmt4dSizes,
    compute_mmt4d_sizes,
    enumerate_mmt4d_space,
    mmt4d_tile_lists,
    score_mmt4d_candidate,
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
    # These dumps come from --iree-opt-data-tiling, where no spec reaches a pack in a model
    # unless the encodings are materialised first: a user's own executable preprocessing keeps
    # the target from adding MATERIALIZE_FIRST, so the late path stays alone.
    from ireetune.model.profile import LATE_PACK_NOTE
    from tests.profile_support import describe_problem

    target = parse_target("cpu:znver4").with_global_flags(
        ("--iree-opt-data-tiling", "--iree-hal-preprocess-executables-with=builtin.module()")
    )
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
    ordered = order_pool(score_mmt4d_candidate, sizes, AVX512, [unbalanced, balanced], seed=0)
    assert [knobs for knobs, _ in ordered] == [balanced, unbalanced]


def test_in_a_model_a_data_tiled_mmt4d_is_not_tunable_and_says_why(
    data_tiled_dumps: dict[str, Path],
) -> None:
    from ireetune.model.profile import ENCODED_MMT4D_NOTE
    from tests.profile_support import describe_problem

    target = parse_target("cpu:znver4")
    problem, tunable = describe_problem(data_tiled_dumps["mmt4d"], target, encoded_mmt4d=True)
    assert not tunable and problem.startswith("not tunable: mmt4d_")
    assert problem.endswith(ENCODED_MMT4D_NOTE)
    # A model that writes its mmt4d itself, and the dispatch alone, keep it tunable.
    problem, tunable = describe_problem(data_tiled_dumps["mmt4d"], target)
    assert tunable and problem.startswith("mmt4d_")


def _mmt4d_configs_of(text: str) -> list[str]:
    """Return the lowering configs of the mmt4d ops in one dumped executable's text."""
    return [
        match.group(0)
        for line in text.splitlines()
        if "linalg.mmt4d" in line
        for match in re.finditer(r"lowering_config<[^>]*>", line)
    ]


def _mmt4d_configs(folder: Path) -> list[str]:
    """Return the lowering configs of the mmt4d ops in dumped executable configurations."""
    return [
        c for path in sorted(folder.glob("*.mlir")) for c in _mmt4d_configs_of(path.read_text())
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
        (
            "model",
            "spec",
            model,
            [f"--iree-codegen-tuning-spec-path={spec}", "--mlir-disable-threading"],
        ),
        ("alone", "default", data_tiled_dumps["mmt4d"], []),
        (
            "alone",
            "spec",
            alone,
            [f"--iree-codegen-tuning-spec-path={spec}", "--mlir-disable-threading"],
        ),
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


# A small CNN as ONNX models import (NCHW, batch 1): a 1x1 convolution whose result is padded
# for a 3x3 convolution, that 3x3 convolution, a 1x1 convolution of its result, and a matmul of
# its result.
CNN_MODEL = """
func.func @main(%image: tensor<1x16x14x14xf32>, %w1: tensor<32x16x1x1xf32>,
                %w3: tensor<32x32x3x3xf32>, %w2: tensor<64x32x1x1xf32>, %fc: tensor<196x64xf32>)
    -> (tensor<1x64x14x14xf32>, tensor<32x64xf32>) {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<1x32x14x14xf32>
  %i1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<1x32x14x14xf32>) -> tensor<1x32x14x14xf32>
  %reduce = linalg.conv_2d_nchw_fchw
      {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
      ins(%image, %w1 : tensor<1x16x14x14xf32>, tensor<32x16x1x1xf32>)
      outs(%i1 : tensor<1x32x14x14xf32>) -> tensor<1x32x14x14xf32>
  %padded = tensor.pad %reduce low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%n: index, %c: index, %h: index, %w: index):
    tensor.yield %zero : f32
  } : tensor<1x32x14x14xf32> to tensor<1x32x16x16xf32>
  %window = linalg.conv_2d_nchw_fchw
      {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
      ins(%padded, %w3 : tensor<1x32x16x16xf32>, tensor<32x32x3x3xf32>)
      outs(%i1 : tensor<1x32x14x14xf32>) -> tensor<1x32x14x14xf32>
  %e2 = tensor.empty() : tensor<1x64x14x14xf32>
  %i2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<1x64x14x14xf32>) -> tensor<1x64x14x14xf32>
  %expand = linalg.conv_2d_nchw_fchw
      {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
      ins(%window, %w2 : tensor<1x32x14x14xf32>, tensor<64x32x1x1xf32>)
      outs(%i2 : tensor<1x64x14x14xf32>) -> tensor<1x64x14x14xf32>
  %rows = tensor.collapse_shape %window [[0, 1], [2, 3]] : tensor<1x32x14x14xf32> into tensor<32x196xf32>
  %e3 = tensor.empty() : tensor<32x64xf32>
  %i3 = linalg.fill ins(%zero : f32) outs(%e3 : tensor<32x64xf32>) -> tensor<32x64xf32>
  %dense = linalg.matmul ins(%rows, %fc : tensor<32x196xf32>, tensor<196x64xf32>)
                         outs(%i3 : tensor<32x64xf32>) -> tensor<32x64xf32>
  return %expand, %dense : tensor<1x64x14x14xf32>, tensor<32x64xf32>
}
"""
# The data-tiling paths of IREE 3.13, for a generic x86-64 CPU (the same on any CI host). The
# late path materialised before configuration runs the codegen pass that turns encodings into
# pack, mmt4d and unpack on each executable before configuration
# (`--iree-hal-preprocess-executables-with`); codegen's own run of it then finds nothing to do.
MATERIALIZE_FIRST = (
    "--iree-hal-preprocess-executables-with=builtin.module(hal.executable.variant("
    "builtin.module(func.func(iree-codegen-materialize-device-encoding))))"
)
DATA_TILING_PATHS = {
    "late": ("--iree-opt-data-tiling",),
    "late materialised first": ("--iree-opt-data-tiling", MATERIALIZE_FIRST),
    "early": ("--iree-global-opt-data-tiling",),
    "early with im2col": (
        "--iree-global-opt-data-tiling",
        "--iree-global-opt-use-im2col-for-convs",
    ),
}
GENERIC_CPU_FLAGS = [*CPU_FLAGS[:-1], "--iree-llvmcpu-target-cpu=generic",
                     "--iree-llvmcpu-enable-ukernels=mmt4d"]  # fmt: skip


@pytest.fixture(scope="module")
def configure_cnn(
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[[str, bool], dict[str, list[str]]]:
    """Return a function that configures CNN_MODEL's executables (no code generation) on a
    data-tiling path, with MMT4D_SPEC or not, and returns each dispatch's mmt4d lowering configs
    by its export name; each compile runs once per module."""
    folder = tmp_path_factory.mktemp("cnn")
    model, spec = folder / "cnn.mlir", folder / "spec.mlir"
    model.write_text(CNN_MODEL)
    spec.write_text(MMT4D_SPEC)

    @functools.cache
    def configure(path: str, with_spec: bool) -> dict[str, list[str]]:
        dump = folder / f"{path.replace(' ', '_')}_{'spec' if with_spec else 'default'}"
        extra = (
            [f"--iree-codegen-tuning-spec-path={spec}", "--mlir-disable-threading"]
            if with_spec
            else []
        )
        subprocess.run(
            [IREE_COMPILE, str(model), *GENERIC_CPU_FLAGS, *DATA_TILING_PATHS[path], *extra,
             "--compile-to=executable-configurations",
             f"--iree-hal-dump-executable-configurations-to={dump}", "-o", f"{dump}.mlir"],
            check=True, capture_output=True,
        )  # fmt: skip
        return {
            export: _mmt4d_configs_of(text)
            for text in (p.read_text() for p in sorted(dump.glob("*.mlir")))
            for export in re.findall(r"hal\.executable\.export public @(\w+)", text)
        }

    return configure


# MMT4D_SPEC's config as a dumped configuration writes it.
SPEC_LOWERING_CONFIG = (
    "lowering_config<distribution = [1, 1, 0, 0, 0, 0], vector_common_parallel = [1, 1, 0, 16, "
    "16, 0], vector_reduction = [0, 0, 1, 0, 0, 1]>"
)


def test_the_early_path_data_tiles_no_convolution_the_late_path_the_collapsed_1x1_ones(
    configure_cnn: Callable[[str, bool], dict[str, list[str]]],
) -> None:
    """Why the early (GlobalOptimization) path data-tiles fewer matmuls of a CNN: it annotates
    matmuls before anything collapses a 1x1 convolution's h and w into one dimension, and IREE
    data-tiles contractions of at most one M, N and K dimension. The late path annotates inside
    dispatch regions after CollapseDimensions: the 1x1 convolution that writes into the next
    one's padding keeps h and w apart, the other becomes a 64x196x32 matmul and is data-tiled.
    im2col makes every convolution a matmul before the early path annotates."""
    # Which matmuls are data-tiled does not depend on the spec: the compiles the next tests need.
    with_mmt4d = {
        path: sorted(name for name, configs in configure_cnn(path, path != "late").items()
                     if configs)
        for path in ("late", "early", "early with im2col")
    }  # fmt: skip
    assert with_mmt4d["late"] == [
        "main_dispatch_2_matmul_like_64x196x32_f32", "main_dispatch_3_matmul_32x64x196_f32",
    ]  # fmt: skip
    assert with_mmt4d["early"] == ["main_dispatch_5_mmt4d_4x16x196x8x4x1_f32"]
    assert with_mmt4d["early with im2col"] == [
        "main_dispatch_12_mmt4d_8x49x32x8x4x1_f32", "main_dispatch_16_mmt4d_4x16x196x8x4x1_f32",
        "main_dispatch_2_mmt4d_4x49x16x8x4x1_f32", "main_dispatch_8_mmt4d_4x49x288x8x4x1_f32",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("path", "data_tiled"), [("late materialised first", 2), ("early", 1), ("early with im2col", 4)]
)
def test_an_mmt4d_spec_reaches_every_data_tiled_matmul_of_a_whole_model(
    path: str, data_tiled: int, configure_cnn: Callable[[str, bool], dict[str, list[str]]]
) -> None:
    """Where a spec reaches the mmt4d of a whole model: on the early path (it materialises the
    encodings before dispatches form), and on the late path when each executable's encodings
    are materialised before configuration. Materialising first changes no default config."""
    configs = [" ".join(c.split()) for cs in configure_cnn(path, True).values() for c in cs]
    assert configs == [SPEC_LOWERING_CONFIG] * data_tiled
    if path == "late materialised first":
        assert configure_cnn(path, False) == configure_cnn("late", False)


def test_on_the_late_path_alone_a_spec_does_not_reach_the_mmt4d_of_a_whole_model(
    configure_cnn: Callable[[str, bool], dict[str, list[str]]],
) -> None:
    """IREE 3.13's late path applies tuning specs while the matmul is still an encoded
    linalg.matmul, and materialises the mmt4d afterwards without the spec's config. If a new
    IREE applies specs after materialising, this fails: the model flow can then tune data-tiled
    matmuls under `--iree-opt-data-tiling` without MATERIALIZE_FIRST."""
    default, with_spec = configure_cnn("late", False), configure_cnn("late", True)
    assert sum(len(configs) for configs in default.values()) == 2
    assert with_spec == default


def test_which_flags_let_a_spec_reach_the_data_tiled_matmuls_of_a_model() -> None:
    from ireetune.model.profile import has_encoded_mmt4d
    from ireetune.targets.llvm_cpu.flags import MATERIALIZE_FIRST as FLAG
    from ireetune.targets.llvm_cpu.flags import specs_reach_data_tiled_matmuls

    assert FLAG == MATERIALIZE_FIRST
    reach = {
        flags: specs_reach_data_tiled_matmuls(flags)
        for flags in [
            (), ("--iree-opt-data-tiling",), ("--iree-opt-data-tiling", FLAG),
            ("--iree-global-opt-data-tiling",), ("--iree-global-opt-data-tiling=false",),
            ("--iree-global-opt-data-tiling", "--iree-opt-data-tiling"),
            ("--iree-global-opt-data-tiling", "--iree-opt-data-tiling=false"),
            ("--iree-global-opt-data-tiling", "--iree-global-opt-enable-early-materialization=0"),
        ]
    }  # fmt: skip
    assert [flags for flags, reached in reach.items() if reached] == [
        ("--iree-opt-data-tiling", FLAG),
        ("--iree-global-opt-data-tiling",),
        ("--iree-global-opt-data-tiling", "--iree-opt-data-tiling=false"),
    ]
    # The profile calls a model's mmt4d encoded (not tunable) only where no spec reaches it.
    assert has_encoded_mmt4d(CNN_MODEL, ("--iree-opt-data-tiling",))
    assert not has_encoded_mmt4d(CNN_MODEL, ("--iree-global-opt-data-tiling",))
    assert not has_encoded_mmt4d(f"// linalg.mmt4d\n{CNN_MODEL}", ("--iree-opt-data-tiling",))


def test_the_cpu_target_materialises_first_on_the_late_path_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every compile under `--iree-opt-data-tiling` gets MATERIALIZE_FIRST from the target (its
    global flags: the user's, the flag winner's), once, and never over the user's own executable
    preprocessing, which one line names."""
    target = parse_target("cpu:x86-64")
    late = ("--iree-opt-data-tiling", "--iree-llvmcpu-enable-ukernels=mmt4d")
    tiled = target.with_global_flags(late)
    assert tiled.global_flags == (*late, MATERIALIZE_FIRST)
    assert tiled.compile_flags()[-1] == MATERIALIZE_FIRST
    assert tiled.with_global_flags(tiled.global_flags).global_flags == tiled.global_flags
    for flags in [(), ("--iree-global-opt-data-tiling",), ("--iree-opt-data-tiling=false",),
                  ("--iree-opt-data-tiling", "--iree-opt-data-tiling=0")]:  # fmt: skip
        assert target.with_global_flags(flags).global_flags == flags
    own = (*late, "--iree-hal-preprocess-executables-with=builtin.module(canonicalize)")
    with caplog.at_level("WARNING"):
        assert target.with_global_flags(own).global_flags == own
        assert target.with_global_flags(own).global_flags == own
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [own[-1]]


@pytest.mark.parametrize("path", ["early", "late materialised first"])
def test_the_mmt4d_spaces_config_for_a_dumped_dispatch_lands_in_the_whole_model(
    path: str, tmp_path: Path
) -> None:
    """What the model flow does for a data-tiled matmul the profile calls tunable: dump the
    model's dispatches with its flags, render a config of the mmt4d space for the mmt4d dispatch,
    and compile the whole model with that spec (`ireetune compile` proves it landed)."""
    from ireetune.spec.apply import compile_with_spec, resolve_compile_target
    from ireetune.spec.builder import build_configuration_spec
    from tests.profile_support import describe_problem

    model = tmp_path / "cnn.mlir"
    model.write_text(CNN_MODEL)
    flags = ("--iree-llvmcpu-enable-ukernels=mmt4d", *DATA_TILING_PATHS[path])
    target = resolve_compile_target("cpu:x86-64", flags)
    subprocess.run(
        [IREE_COMPILE, str(model), *target.compile_flags,
         f"--iree-hal-dump-executable-benchmarks-to={tmp_path}",
         "--iree-codegen-add-tuner-attributes", "-o", str(tmp_path / "default.vmfb")],
        check=True, capture_output=True,
    )  # fmt: skip
    dumps = [
        p for p in sorted(tmp_path.glob("*_benchmark.mlir")) if "linalg.mmt4d" in p.read_text()
    ]
    assert len(dumps) == {"early": 1, "late materialised first": 2}[path]
    context = ir.Context()
    with context:
        _, root = _parse(dumps[-1], context)
        problem = parse_problem(root)
        assert isinstance(problem, ContractionProblem) and problem.is_mmt4d
        space = space_for(target.target, problem)
        knobs = (("dist_m1", 1), ("dist_n1", 1))
        assert knobs != space.parse_default_knobs(problem, root)
        spec_text = build_configuration_spec(
            problem, space.configuration(problem, knobs, context), (), context
        )
    spec = tmp_path / "spec.mlir"
    spec.write_text(spec_text)
    assert describe_problem(dumps[-1], target.target, encoded_mmt4d=False)[1]
    report = compile_with_spec(model, target, spec, tmp_path / "tuned.vmfb", timeout_s=120)
    assert [(c.landed, "distribution = [1, 1, 0, 0, 0, 0]" in c.found) for c in report.checks] == [
        (True, True)
    ]
