"""Compile-only GPU tests (no GPU needed): the compiler's space compiles and its configs land.

For an sm_80 and a gfx942 f16 matmul, a run stopped after compiling must generate the asked
number of candidates, compile at least 95% of them, give every compiled candidate a binary that
differs from the default's (on CUDA this fails if specs go through the ignored tuning-spec
flag), and the chosen configuration must appear in the compiler's configuration dump.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from iree.compiler import ir

from ireetune.core.records import CandidateStatus
from ireetune.flows.dispatch.options import References, StopAfter
from ireetune.flows.dispatch.tuner import TuneOptions, TuneResult, tune_dispatch
from ireetune.flows.handoff.manifest import read_manifest
from ireetune.spec.apply import compile_with_spec, resolve_compile_target
from ireetune.targets import parse_target
from ireetune.verify.landing import (
    dump_configurations,
    expected_lowering_config,
    prove_config_landed,
)

IREE_COMPILE = str(Path(sys.executable).parent / "iree-compile")
NUM_CANDIDATES = 6

MMT_F16 = """
func.func @main(%lhs: tensor<256x512xf16>, %rhs: tensor<384x512xf16>) -> tensor<256x384xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<256x384xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<256x384xf32>) -> tensor<256x384xf32>
  %r = linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>,
                                      affine_map<(d0, d1, d2) -> (d1, d2)>,
                                      affine_map<(d0, d1, d2) -> (d0, d1)>]
      ins(%lhs, %rhs : tensor<256x512xf16>, tensor<384x512xf16>)
      outs(%init : tensor<256x384xf32>) -> tensor<256x384xf32>
  return %r : tensor<256x384xf32>
}
"""

CONV_F16 = """
func.func @main(%x: tensor<1x18x18x64xf16>, %w: tensor<3x3x64x128xf16>) -> tensor<1x16x16x128xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<1x16x16x128xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<1x16x16x128xf32>) -> tensor<1x16x16x128xf32>
  %r = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
      ins(%x, %w : tensor<1x18x18x64xf16>, tensor<3x3x64x128xf16>)
      outs(%init : tensor<1x16x16x128xf32>) -> tensor<1x16x16x128xf32>
  return %r : tensor<1x16x16x128xf32>
}
"""

BATCH_MATMUL_F16 = """
func.func @main(%lhs: tensor<4x128x256xf16>, %rhs: tensor<4x256x128xf16>) -> tensor<4x128x128xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<4x128x128xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<4x128x128xf32>) -> tensor<4x128x128xf32>
  %r = linalg.batch_matmul ins(%lhs, %rhs : tensor<4x128x256xf16>, tensor<4x256x128xf16>)
                           outs(%init : tensor<4x128x128xf32>) -> tensor<4x128x128xf32>
  return %r : tensor<4x128x128xf32>
}
"""

ATTENTION_F16 = """
#q = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>
#k = affine_map<(d0, d1, d2, d3, d4) -> (d0, d3, d2)>
#v = affine_map<(d0, d1, d2, d3, d4) -> (d0, d3, d4)>
#s = affine_map<(d0, d1, d2, d3, d4) -> ()>
#o = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d4)>
func.func @main(%q: tensor<4x128x64xf16>, %k: tensor<4x128x64xf16>, %v: tensor<4x128x64xf16>) -> tensor<4x128x64xf16> {
  %scale = arith.constant 0.125 : f16
  %empty = tensor.empty() : tensor<4x128x64xf16>
  %r = iree_linalg_ext.attention <{indexing_maps = [#q, #k, #v, #s, #o]}>
      ins(%q, %k, %v, %scale : tensor<4x128x64xf16>, tensor<4x128x64xf16>, tensor<4x128x64xf16>, f16)
      outs(%empty : tensor<4x128x64xf16>) {
    ^bb0(%score: f32):
      iree_linalg_ext.yield %score : f32
  } -> tensor<4x128x64xf16>
  return %r : tensor<4x128x64xf16>
}
"""


def dump_gpu_benchmark(model_text: str, target_name: str, folder: Path) -> Path:
    """Dump a model's single dispatch benchmark for a GPU target, with tuner attributes."""
    folder.mkdir(parents=True, exist_ok=True)
    model = folder / "model.mlir"
    model.write_text(model_text)
    subprocess.run(
        [IREE_COMPILE, str(model), *parse_target(target_name).compile_flags(),
         f"--iree-hal-dump-executable-benchmarks-to={folder / 'dumps'}",
         "--iree-codegen-add-tuner-attributes", "-o", str(folder / "model.vmfb")],
        check=True, capture_output=True,
    )  # fmt: skip
    (path,) = sorted((folder / "dumps").glob("*_benchmark.mlir"))
    return path


def compile_run(benchmark: Path, target_name: str, output_dir: Path, count: int) -> TuneResult:
    return tune_dispatch(
        TuneOptions(
            input_path=benchmark, target=target_name, num_candidates=count, output_dir=output_dir,
            stop_after=StopAfter.COMPILE, show_progress=False, references=References.ALL,
        )
    )  # fmt: skip


def check_compiled_run(result: TuneResult, target_name: str, count: int) -> None:
    """Assert the issue's compile-only criteria on a run stopped after compiling."""
    baseline, *candidates = result.records
    assert baseline.status is CandidateStatus.COMPILED
    assert len(candidates) == count
    compiled = [r for r in candidates if r.binary_hash]
    assert len(compiled) / count >= 0.95, [r.reason for r in candidates if not r.binary_hash]
    assert all(r.binary_hash != baseline.binary_hash for r in compiled)
    assert [r.status for r in compiled] == [CandidateStatus.COMPILED] * len(compiled)
    # The chosen (first-ranked) candidate's config is in the configuration dump.
    chosen = compiled[0]
    target = parse_target(target_name)
    context = ir.Context()
    info = target_info_of(result.run_dir / chosen.spec_path, context)
    prove_config_landed(
        target, result.run_dir / "inputs" / "stripped_benchmark.mlir", result.run_dir / chosen.spec_path,
        info, result.run_dir / "verify" / "landing", context,
    )  # fmt: skip
    manifest = read_manifest(result.run_dir)
    assert [c.candidate_id for c in manifest.candidates] == [r.candidate_id for r in compiled]
    assert all(
        (result.run_dir / c.vmfb).exists() and (result.run_dir / c.reference_vmfb).exists()
        for c in manifest.candidates
    )
    # The reference program (the op alone, run on real inputs) takes every candidate's config.
    assert all(c.reference_hash != manifest.baseline.reference_hash for c in manifest.candidates)


def target_info_of(spec_path: Path, context: ir.Context) -> str:
    from ireetune.flows.handoff.finish import _compilation_info_of

    return _compilation_info_of(spec_path, context)


@pytest.fixture(scope="module")
def sm80_mmt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return dump_gpu_benchmark(MMT_F16, "cuda:sm_80", tmp_path_factory.mktemp("sm80_mmt"))


def test_sm80_matmul_candidates_compile_differ_and_land(sm80_mmt: Path, tmp_path: Path) -> None:
    result = compile_run(sm80_mmt, "cuda:sm_80", tmp_path, NUM_CANDIDATES)
    check_compiled_run(result, "cuda:sm_80", NUM_CANDIDATES)
    pipelines = {dict(r.knobs or ())["pipeline"] for r in result.records[1:]}
    assert pipelines == {"TileAndFuse", "VectorDistribute"}
    assert json.loads((result.run_dir / "results.json").read_text())["outcome"] == "compiled"


def test_gfx942_matmul_candidates_compile_differ_and_land(tmp_path: Path) -> None:
    benchmark = dump_gpu_benchmark(MMT_F16, "rocm:gfx942", tmp_path / "dump")
    result = compile_run(benchmark, "rocm:gfx942", tmp_path / "runs", NUM_CANDIDATES)
    check_compiled_run(result, "rocm:gfx942", NUM_CANDIDATES)


def test_sm80_convolution_candidates_compile_and_land(tmp_path: Path) -> None:
    benchmark = dump_gpu_benchmark(CONV_F16, "cuda:sm_80", tmp_path / "dump")
    result = compile_run(benchmark, "cuda:sm_80", tmp_path / "runs", 3)
    check_compiled_run(result, "cuda:sm_80", 3)
    # The compiler folds the unit batch away: the dispatch is a 6-loop convolution.
    assert result.problem.signature == "conv_16x16x128x3x3x64_f16_f16_f32"


def test_sm80_batch_matmul_compiles_through_the_batch_free_proxy(tmp_path: Path) -> None:
    # IREE 3.13 crashes emitting constraints for batch matmuls; the proxy's lifted space is used,
    # with a real batch tile (wg_b) the proxy's constraints do not know about.
    benchmark = dump_gpu_benchmark(BATCH_MATMUL_F16, "cuda:sm_80", tmp_path / "dump")
    result = compile_run(benchmark, "cuda:sm_80", tmp_path / "runs", 3)
    check_compiled_run(result, "cuda:sm_80", 3)
    assert dict(result.records[0].knobs or ())["wg_b"] == 1  # The default reads back, tile 1.


def test_pipeline_option_restricts_the_space(sm80_mmt: Path, tmp_path: Path) -> None:
    result = tune_dispatch(
        TuneOptions(
            input_path=sm80_mmt, target="cuda:sm_80", num_candidates=2, output_dir=tmp_path,
            stop_after=StopAfter.COMPILE, pipelines=("TileAndFuse",), show_progress=False,
        )
    )  # fmt: skip
    assert {dict(r.knobs or ())["pipeline"] for r in result.records[1:]} == {"TileAndFuse"}


def test_cuda_ignores_the_tuning_spec_flag_so_the_library_flag_is_used(
    sm80_mmt: Path, tmp_path: Path
) -> None:
    result = compile_run(sm80_mmt, "cuda:sm_80", tmp_path, 1)
    record = result.records[1]
    stripped = result.run_dir / "inputs" / "stripped_benchmark.mlir"
    context = ir.Context()
    lowering = expected_lowering_config(
        target_info_of(result.run_dir / record.spec_path, context), context
    )

    class TuningSpecFlagCuda(type(parse_target("cuda:sm_80"))):  # type: ignore[misc]
        traits = dataclasses.replace(
            parse_target("cuda:sm_80").traits, spec_flag="--iree-codegen-tuning-spec-path"
        )

    ignored = TuningSpecFlagCuda(parse_target("cuda:sm_80").arch)  # type: ignore[attr-defined]
    ignored_dump = dump_configurations(
        ignored, stripped, result.run_dir / record.spec_path, tmp_path / "a"
    )
    assert "lowering_config" in ignored_dump
    assert lowering not in ignored_dump
    cuda = parse_target("cuda:sm_80")
    assert lowering in dump_configurations(
        cuda, stripped, result.run_dir / record.spec_path, tmp_path / "b"
    )


SOFTMAX_F32 = """
func.func @main(%x: tensor<16x512xf32>) -> tensor<16x512xf32> {
  %empty = tensor.empty() : tensor<16x512xf32>
  %r = linalg.softmax dimension(1) ins(%x : tensor<16x512xf32>) outs(%empty : tensor<16x512xf32>) -> tensor<16x512xf32>
  return %r : tensor<16x512xf32>
}
"""

MATMUL_F32 = """
func.func @main(%lhs: tensor<128x192xf32>, %rhs: tensor<192x256xf32>) -> tensor<128x256xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<128x256xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<128x256xf32>) -> tensor<128x256xf32>
  %r = linalg.matmul ins(%lhs, %rhs : tensor<128x192xf32>, tensor<192x256xf32>)
                     outs(%init : tensor<128x256xf32>) -> tensor<128x256xf32>
  return %r : tensor<128x256xf32>
}
"""


@pytest.mark.parametrize("target_name", ["cuda:sm_80", "rocm:gfx942"])
def test_attention_candidates_compile_and_land(target_name: str, tmp_path: Path) -> None:
    # CUDA: ireetune's hand-written VectorDistribute space (IREE 3.13 emits none); ROCm: the
    # compiler's. Both set a decomposition_config beside the compilation_info.
    benchmark = dump_gpu_benchmark(ATTENTION_F16, target_name, tmp_path / "dump")
    result = compile_run(benchmark, target_name, tmp_path / "runs", 3)
    check_compiled_run(result, target_name, 3)
    spec = (result.run_dir / result.records[1].spec_path).read_text()
    assert "@apply_op_config_and_decomposition_config" in spec
    assert "transform.iree.match.online_attention" in spec


@pytest.mark.parametrize("target_name", ["cuda:sm_80", "rocm:gfx942"])
def test_softmax_candidates_configure_the_whole_dispatch(target_name: str, tmp_path: Path) -> None:
    # The root (sum of exponentials) gets the candidate's compilation_info, the row maximum and
    # the normalisation their lowering_configs; without those VectorDistribute fails.
    benchmark = dump_gpu_benchmark(SOFTMAX_F32, target_name, tmp_path / "dump")
    result = compile_run(benchmark, target_name, tmp_path / "runs", 3)
    check_compiled_run(result, target_name, 3)
    assert result.problem.signature == "reduction_16x512_f32_f32_f32"
    assert result.records[0].knobs is not None  # The compiler's default reads back.
    stripped = result.run_dir / "inputs" / "stripped_benchmark.mlir"
    dumped = dump_configurations(
        parse_target(target_name),
        stripped,
        result.run_dir / result.records[1].spec_path,
        tmp_path / "d",
    )
    assert dumped.count("serial = [0,") == 1 and dumped.count("partial_reduction = [0,") == 2
    # `ireetune compile` reads the reduction matcher back and finds its config in the model.
    report = compile_with_spec(
        tmp_path / "dump" / "model.mlir",
        resolve_compile_target(target_name),
        result.run_dir / result.records[1].spec_path,
        tmp_path / "model.vmfb",
        300,
    )
    assert report.landed and len(report.checks) == 1


def test_sm80_f32_matmul_searches_the_simt_space(tmp_path: Path) -> None:
    benchmark = dump_gpu_benchmark(MATMUL_F32, "cuda:sm_80", tmp_path / "dump")
    result = compile_run(benchmark, "cuda:sm_80", tmp_path / "runs", 3)
    check_compiled_run(result, "cuda:sm_80", 3)
    assert {dict(r.knobs or ())["pipeline"] for r in result.records} == {"TileAndFuse"}
    assert all("th_m" in dict(r.knobs or ()) for r in result.records)


CONV_7X7_F16 = """
func.func @main(%x: tensor<1x9x9x64xf16>, %w: tensor<3x3x64x24xf16>) -> tensor<1x7x7x24xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<1x7x7x24xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<1x7x7x24xf32>) -> tensor<1x7x7x24xf32>
  %r = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
      ins(%x, %w : tensor<1x9x9x64xf16>, tensor<3x3x64x24xf16>)
      outs(%init : tensor<1x7x7x24xf32>) -> tensor<1x7x7x24xf32>
  return %r : tensor<1x7x7x24xf32>
}
"""


def test_an_empty_vector_distribute_space_is_left_out_with_a_note(tmp_path: Path) -> None:
    # A 7-wide output row is narrower than the 16-row intrinsic: the compiler's VectorDistribute
    # space has no solution, and the run says which of its constraints conflict.
    benchmark = dump_gpu_benchmark(CONV_7X7_F16, "cuda:sm_80", tmp_path / "dump")
    result = compile_run(benchmark, "cuda:sm_80", tmp_path / "runs", 2)
    assert {dict(r.knobs or ())["pipeline"] for r in result.records[1:]} == {"TileAndFuse"}
    assert result.notes[0] == (
        "the VectorDistribute space of conv_7x7x24x3x3x64_f16_f16_f32 on cuda:sm_80 is empty, "
        "no configuration satisfies: dim_1 ({}) == 7; wg_1 <= dim_1; wg_1 >= mma_m"
    )
