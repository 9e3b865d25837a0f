"""The Vulkan target's names, its z3 spaces against the target's limits, and candidates that
compile and land (compile only: no Vulkan device is needed)."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
import subprocess
from pathlib import Path

import pytest
from iree.compiler import ir

from ireetune.core.candidate import Knobs, make_knobs
from ireetune.core.errors import IreetuneError
from ireetune.core.records import CandidateStatus
from ireetune.core.target import SpaceRequest, space_for
from ireetune.core.tools import find_tool
from ireetune.flows.dispatch.options import StopAfter
from ireetune.flows.dispatch.tuner import TuneOptions, tune_dispatch
from ireetune.frontend.dispatches import parse_module
from ireetune.problem.root_op import Problem, find_root_op, parse_problem
from ireetune.targets import parse_target
from ireetune.targets.vulkan.archs import IREE_VULKAN_TARGETS, LAVAPIPE_LIMITS
from ireetune.targets.vulkan.config import SpirvConfig, SpirvPipeline
from ireetune.targets.vulkan.facts import VulkanFacts, parse_cooperative_shape
from ireetune.targets.vulkan.space import VulkanSpace
from ireetune.targets.vulkan.target import VulkanTarget

MATMUL = """
func.func @main(%lhs: tensor<256x384x{t}>, %rhs: tensor<384x512x{t}>) -> tensor<256x512xf32> {{
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<256x512xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<256x512xf32>) -> tensor<256x512xf32>
  %r = linalg.matmul ins(%lhs, %rhs : tensor<256x384x{t}>, tensor<384x512x{t}>)
                     outs(%init : tensor<256x512xf32>) -> tensor<256x512xf32>
  return %r : tensor<256x512xf32>
}}
"""
BATCH_MATMUL = """
func.func @main(%lhs: tensor<4x32x48xf32>, %rhs: tensor<4x48x64xf32>,
                %out: tensor<4x32x64xf32>) -> tensor<4x32x64xf32> {
  %r = linalg.batch_matmul ins(%lhs, %rhs : tensor<4x32x48xf32>, tensor<4x48x64xf32>)
                           outs(%out : tensor<4x32x64xf32>) -> tensor<4x32x64xf32>
  return %r : tensor<4x32x64xf32>
}
"""
CONV = """
func.func @main(%x: tensor<2x10x10x16xf32>, %w: tensor<3x3x16x32xf32>,
                %out: tensor<2x8x8x32xf32>) -> tensor<2x8x8x32xf32> {
  %r = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
      ins(%x, %w : tensor<2x10x10x16xf32>, tensor<3x3x16x32xf32>)
      outs(%out : tensor<2x8x8x32xf32>) -> tensor<2x8x8x32xf32>
  return %r : tensor<2x8x8x32xf32>
}
"""
# Limits as IREE 3.13 states them for valhall4 and rdna3 (with its f16 cooperative matrices).
VALHALL4 = VulkanFacts("valhall4", (16,), (512, 512, 512), 512, 32768)
RDNA3 = VulkanFacts(
    "rdna3",
    (32, 64),
    (1024, 1024, 1024),
    1024,
    65536,
    tuple(
        shape
        for shape in map(
            parse_cooperative_shape,
            ["WMMAR3_F32_16x16x16_F16", "NV_MMA_SYNC_F32_16x8x16_F16", "MFMA_F32_32x32x8_F16"],
        )
        if shape is not None
    ),
)
LAVAPIPE = VulkanFacts(
    "",
    LAVAPIPE_LIMITS.subgroup_sizes,
    LAVAPIPE_LIMITS.max_workgroup_sizes,
    LAVAPIPE_LIMITS.max_threads,
    LAVAPIPE_LIMITS.max_workgroup_memory_bytes,
)


def dump_vulkan_benchmark(model_text: str, target: str, folder: Path) -> Path:
    """Compile a one-op model for a Vulkan target with benchmark dumps; return its dispatch."""
    folder.mkdir(parents=True, exist_ok=True)
    model = folder / "model.mlir"
    model.write_text(model_text)
    subprocess.run(
        [find_tool("iree-compile"), str(model), *parse_target(target).compile_flags(),
         f"--iree-hal-dump-executable-benchmarks-to={folder / 'dumps'}",
         "--iree-codegen-add-tuner-attributes", "-o", str(folder / "model.vmfb")],
        check=True, capture_output=True,
    )  # fmt: skip
    (path,) = sorted((folder / "dumps").glob("*_benchmark.mlir"))
    return path


def dispatch_problem(model_text: str, folder: Path, context: ir.Context) -> Problem:
    """Dump a model's one dispatch for valhall4 and parse its root op, as the tuner sees it."""
    benchmark = dump_vulkan_benchmark(model_text, "vulkan:valhall4", folder)
    with context:
        module = parse_module(benchmark.read_text(), context, benchmark)
        return parse_problem(find_root_op(module))


def draw(target: VulkanTarget, problem: Problem, facts: VulkanFacts, count: int) -> list[Knobs]:
    space = space_for(target, problem)
    assert isinstance(space, VulkanSpace)
    space._facts = facts  # No dispatch to read them from.
    request = SpaceRequest(problem, ir.Attribute.parse("unit", ir.Context()), None, seed=7)
    drawn = []
    for knobs in space.generate(request):
        drawn.append(knobs)
        if len(drawn) == count:
            break
    return drawn


def element_bytes(type_name: str) -> int:
    return {"f16": 2, "f32": 4}[type_name]


def check_limits(problem: Problem, config: SpirvConfig, facts: VulkanFacts) -> list[str]:
    """Say which of the target's limits a rendered configuration breaks (none: empty)."""
    broken = []
    size = config.workgroup_size
    threads = math.prod(size)
    if threads > facts.max_threads:
        broken.append(f"{threads} threads")
    if any(s > limit for s, limit in zip(size, facts.max_workgroup_sizes, strict=True)):
        broken.append(f"workgroup {size}")
    if any(s & (s - 1) for s in size):
        broken.append(f"workgroup {size} not powers of two")
    if config.subgroup_size and config.subgroup_size not in facts.subgroup_sizes:
        broken.append(f"subgroup {config.subgroup_size}")
    subgroup = config.subgroup_size or min(facts.subgroup_sizes)
    if config.pipeline is not SpirvPipeline.BASE and threads % subgroup:
        broken.append(f"{threads} threads are not whole subgroups of {subgroup}")
    for level in config.tile_sizes:
        for loop, tile in zip(problem.loop_sizes, level, strict=False):
            if tile and loop % tile:
                broken.append(f"tile {tile} of loop {loop}")
    if problem.family == "convolution":
        oh, ow = problem.output_image_dims  # type: ignore[attr-defined]
        oc = problem.output_channel_dims[-1]  # type: ignore[attr-defined]
        wg, thread = config.tile_sizes[0], config.tile_sizes[1]
        if (wg[oc] // thread[oc], wg[ow] // thread[ow], wg[oh] // thread[oh]) != size:
            broken.append(f"workgroup {size} is not the workgroup tile over the thread tile")
        return broken
    m, n, k = (problem.m_dims[-1], problem.n_dims[-1], problem.k_dims[-1])  # type: ignore[attr-defined]
    wg = config.tile_sizes[0]
    if config.pipeline is SpirvPipeline.BASE:
        thread = config.tile_sizes[1]
        if (wg[n] // thread[n], wg[m] // thread[m], 1) != size:
            broken.append(f"workgroup {size} is not the workgroup tile over the thread tile")
        return broken
    tile_k = wg[k] if config.pipeline is SpirvPipeline.PROMOTE else config.tile_sizes[2][k]
    bytes_per = element_bytes(problem.lhs_type)  # type: ignore[attr-defined]
    # IREE's own count (no padding): one buffer per stage plus one, one less where a
    # MatmulPromoteVectorize stores early.
    buffers = (config.pipeline_depth or 1) + 1
    if config.pipeline is SpirvPipeline.PROMOTE and config.store_stage == 1:
        buffers -= 1
    used = (wg[m] + wg[n]) * tile_k * bytes_per * buffers
    if used > facts.max_workgroup_memory_bytes:
        broken.append(f"{used} bytes of shared memory")
    return broken


def test_vulkan_target_names_flags_and_refusals() -> None:
    named = parse_target("vulkan:Mali-G715")
    lavapipe = parse_target("vulkan:lavapipe")
    with pytest.raises(IreetuneError) as excinfo:
        parse_target("vulkan:apple")
    assert (named.name, named.backend, named.runtime_device) == (
        "vulkan:mali-g715",
        "vulkan-spirv",
        "vulkan",
    )
    assert named.target_flags() == [
        "--iree-hal-target-device=vulkan",
        "--iree-vulkan-target=mali-g715",
    ]
    assert named.traits.spec_flag == "--iree-codegen-transform-dialect-library"
    (flag,) = lavapipe.target_flags()
    assert flag.startswith('--iree-hal-target-device=#hal.device.target<"vulkan"')
    assert "subgroup_size_choices = [8]" in flag
    message = str(excinfo.value)
    assert message.startswith("unknown Vulkan target 'apple'; IREE 3.13 knows: valhall")
    assert "\n" not in message and "rdna3" in message and "lavapipe" in message


@pytest.mark.parametrize(
    ("model", "facts", "pipelines"),
    [
        (MATMUL.format(t="f32"), VALHALL4, {"BaseVectorize", "MatmulPromoteVectorize"}),
        (MATMUL.format(t="f32"), LAVAPIPE, {"BaseVectorize", "MatmulPromoteVectorize"}),
        (
            MATMUL.format(t="f16"),
            RDNA3,
            {"BaseVectorize", "MatmulPromoteVectorize", "CooperativeMatrixVectorize"},
        ),
        (BATCH_MATMUL, VALHALL4, {"BaseVectorize", "MatmulPromoteVectorize"}),
        (CONV, VALHALL4, {"BaseVectorize"}),
    ],
    ids=["matmul-valhall4", "matmul-lavapipe", "matmul-f16-rdna3", "bmm-valhall4", "conv-valhall4"],
)
def test_candidates_respect_the_target_limits(
    tmp_path: Path, model: str, facts: VulkanFacts, pipelines: set[str]
) -> None:
    context = ir.Context()
    problem = dispatch_problem(model, tmp_path, context)
    target = VulkanTarget("valhall4")
    drawn = draw(target, problem, facts, 90)
    space = space_for(target, problem)
    assert isinstance(space, VulkanSpace)
    configs = [space.render(problem, SpirvPipeline(str(dict(k)["pipeline"])), k) for k in drawn]
    broken = {str(k): check_limits(problem, c, facts) for k, c in zip(drawn, configs, strict=True)}
    assert {k: v for k, v in broken.items() if v} == {}
    assert len(set(drawn)) == 90
    assert {config.pipeline.value for config in configs} == pipelines
    cooperative = [c for c in configs if c.pipeline is SpirvPipeline.COOPERATIVE]
    # Only the matrix shape SPIR-V can use (not mma.sync's 16x8x16 nor MFMA's 32x32x8), with a
    # subgroup size set.
    assert {(c.tile_sizes[3], c.subgroup_size in (32, 64)) for c in cooperative} <= {
        ((16, 16, 16), True)
    }


def test_default_configuration_reads_back_and_renders_the_same(tmp_path: Path) -> None:
    benchmark = dump_vulkan_benchmark(MATMUL.format(t="f32"), "vulkan:valhall4", tmp_path)
    target = parse_target("vulkan:valhall4")
    context = ir.Context()
    with context:
        module = parse_module(benchmark.read_text(), context, benchmark)
        root_op = find_root_op(module)
        problem = parse_problem(root_op)
        knobs = space_for(target, problem).parse_default_knobs(problem, root_op)
        info = (
            space_for(target, problem).configuration(problem, knobs, context).compilation_info
            if knobs
            else ""
        )
    assert dict(knobs or ()) == {
        "pipeline": "BaseVectorize", "subgroup_size": 0, "th_m": 4, "th_n": 4, "tile_k": 4,
        "wg_m": 8, "wg_n": 32, "wg_x": 8, "wg_y": 2,
    }  # fmt: skip
    assert "tile_sizes = [[8, 32, 0], [4, 4, 0], [0, 0, 4]]" in info
    assert "spirv_pipeline<BaseVectorize> workgroup_size = [8, 2, 1]>" in info


def binary_hash(run_dir: Path, binary_path: str) -> str:
    return hashlib.sha256((run_dir / binary_path).read_bytes()).hexdigest()


@pytest.mark.parametrize("target_name", ["vulkan:valhall4", "vulkan:lavapipe", "vulkan:rdna3"])
def test_candidates_compile_and_differ_from_the_default(tmp_path: Path, target_name: str) -> None:
    benchmark = dump_vulkan_benchmark(MATMUL.format(t="f32"), target_name, tmp_path / "dump")
    result = tune_dispatch(
        TuneOptions(
            input_path=benchmark, target=target_name, num_candidates=12,
            output_dir=tmp_path / "runs", stop_after=StopAfter.COMPILE, show_progress=False,
            use_database=False, jobs=2,
        )
    )  # fmt: skip
    baseline, *candidates = result.records
    applied = [r for r in candidates if r.status is CandidateStatus.COMPILED]
    assert len(candidates) == 12
    assert len(applied) >= 11, [(r.knobs, r.status, r.reason[:120]) for r in candidates]
    # The tool's "applied" must be true of the bytes: every applied binary differs from the
    # default's, as hashed here independently of the tool.
    default_hash = binary_hash(result.run_dir, baseline.binary_path)
    assert all(binary_hash(result.run_dir, r.binary_path) != default_hash for r in applied)
    assert baseline.knobs is not None and dict(baseline.knobs)["pipeline"] in (
        "BaseVectorize",
        "MatmulPromoteVectorize",
    )


def test_an_ignored_spec_route_is_caught_as_not_applied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Applied through `--iree-codegen-tuning-spec-path`, which SPIR-V ignores, every candidate's
    binary is the default's, and the tool must say so rather than count it as a candidate."""
    monkeypatch.setattr(
        VulkanTarget,
        "traits",
        dataclasses.replace(VulkanTarget.traits, spec_flag="--iree-codegen-tuning-spec-path"),
    )
    benchmark = dump_vulkan_benchmark(MATMUL.format(t="f32"), "vulkan:valhall4", tmp_path / "d")
    result = tune_dispatch(
        TuneOptions(
            input_path=benchmark, target="vulkan:valhall4", num_candidates=3,
            output_dir=tmp_path / "runs", stop_after=StopAfter.COMPILE, show_progress=False,
            use_database=False, jobs=2,
        )
    )  # fmt: skip
    assert [r.status for r in result.records[1:]] == [CandidateStatus.NOT_APPLIED] * 3


def test_compile_command_applies_a_written_spec(tmp_path: Path) -> None:
    from ireetune.cli import main

    benchmark = dump_vulkan_benchmark(MATMUL.format(t="f32"), "vulkan:valhall4", tmp_path / "d")
    result = tune_dispatch(
        TuneOptions(
            input_path=benchmark, target="vulkan:valhall4", num_candidates=1,
            output_dir=tmp_path / "runs", stop_after=StopAfter.COMPILE, show_progress=False,
            use_database=False, jobs=1,
        )
    )  # fmt: skip
    spec = result.run_dir / result.records[1].spec_path
    model = tmp_path / "d" / "model.mlir"
    with_spec = tmp_path / "with_spec.vmfb"
    code = main(["compile", str(model), "--target", "vulkan:valhall4", "--spec", str(spec),
                 "-o", str(with_spec)])  # fmt: skip
    plain = tmp_path / "plain.vmfb"
    subprocess.run(
        [find_tool("iree-compile"), str(model), *parse_target("vulkan:valhall4").compile_flags(),
         "-o", str(plain)],
        check=True, capture_output=True,
    )  # fmt: skip
    assert "tuning_spec_entrypoint" in spec.read_text()
    assert code == 0
    assert with_spec.read_bytes() != plain.read_bytes()


ADD = """
func.func @main(%a: tensor<16xf32>, %b: tensor<16xf32>) -> tensor<16xf32> {
  %r = arith.addf %a, %b : tensor<16xf32>
  return %r : tensor<16xf32>
}
"""


def test_every_named_target_is_one_iree_knows(tmp_path: Path) -> None:
    """Each name `vulkan:NAME` takes resolves, in the pinned iree-compile, to a target with an
    arch (a name IREE does not know is an error; some it accepts resolve to arch "")."""
    model = tmp_path / "add.mlir"
    model.write_text(ADD)
    archs = {}
    for name in IREE_VULKAN_TARGETS:
        sources = tmp_path / f"{name}.mlir"
        subprocess.run(
            [find_tool("iree-compile"), str(model), *VulkanTarget(name).compile_flags(),
             "--compile-to=executable-sources", "-o", str(sources)],
            check=True, capture_output=True,
        )  # fmt: skip
        found = re.search(r'arch = "([^"]*)"', sources.read_text())
        archs[name] = found.group(1) if found else ""
    assert {name for name, arch in archs.items() if not arch} == set()
    assert (archs["mali-g715"], archs["ampere"], archs["mi300x"]) == ("valhall4", "sm_80", "gfx942")


def test_order_takes_pipelines_in_turn_and_prefers_busy_workgroups(tmp_path: Path) -> None:
    context = ir.Context()
    problem = dispatch_problem(MATMUL.format(t="f32"), tmp_path, context)
    space = space_for(VulkanTarget("valhall4"), problem)
    common = {"subgroup_size": 0, "tile_k": 4}
    lonely = make_knobs(
        {**common, "pipeline": "BaseVectorize", "wg_m": 1, "wg_n": 1, "th_m": 1, "th_n": 1,
         "wg_x": 1, "wg_y": 1}
    )  # fmt: skip
    busy = make_knobs(
        {**common, "pipeline": "BaseVectorize", "wg_m": 32, "wg_n": 64, "th_m": 4, "th_n": 4,
         "wg_x": 16, "wg_y": 8}
    )  # fmt: skip
    promoted = make_knobs(
        {**common, "pipeline": "MatmulPromoteVectorize", "wg_m": 64, "wg_n": 64, "tile_k": 16,
         "wg_x": 16, "wg_y": 8, "depth": 2, "store_stage": 0}
    )  # fmt: skip
    order = [
        knobs
        for knobs, _ in space.order(SpaceRequest(problem, None, None, 1), [lonely, promoted, busy])
    ]
    assert order == [busy, promoted, lonely]


def test_cooperative_matrix_candidates_compile_where_the_target_has_them(tmp_path: Path) -> None:
    benchmark = dump_vulkan_benchmark(MATMUL.format(t="f16"), "vulkan:rdna3", tmp_path / "dump")
    result = tune_dispatch(
        TuneOptions(
            input_path=benchmark, target="vulkan:rdna3", num_candidates=4,
            output_dir=tmp_path / "runs", stop_after=StopAfter.COMPILE, show_progress=False,
            use_database=False, jobs=2, pipelines=("CooperativeMatrixVectorize",),
        )
    )  # fmt: skip
    baseline, *candidates = result.records
    assert baseline.knobs is not None and dict(baseline.knobs)["pipeline"] == (
        "CooperativeMatrixVectorize"
    )
    assert [(dict(r.knobs or ())["pipeline"], r.status) for r in candidates] == [
        ("CooperativeMatrixVectorize", CandidateStatus.COMPILED)
    ] * 4
