"""The measuring code CUDA and ROCm use (benchmark worker, campaign, prewarm, reference and model
workers) run on the Vulkan device, not the CPU: real lavapipe runs, tiny shapes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ireetune.benchmark.campaign import CampaignSettings, job_deadlines, run_campaign
from ireetune.benchmark.runner import (
    BenchmarkJob,
    BenchmarkOutcome,
    BenchmarkSession,
    BenchmarkStatus,
    _Phase,
    _timed_out,
)
from ireetune.core.input_archive import write_input_archive
from ireetune.executor import LocalExecutor
from ireetune.model.timing import ModelComparison, run_models_side_by_side_here
from ireetune.verify.runner import ReferenceBatch, run_reference_programs_here
from tests.vulkan_support import IREE_COMPILE, compile_for_vulkan, requires_vulkan

MATMUL = """
func.func @main(%lhs: tensor<32x48xf32>, %rhs: tensor<48x64xf32>) -> tensor<32x64xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<32x64xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<32x64xf32>) -> tensor<32x64xf32>
  %r = linalg.matmul ins(%lhs, %rhs : tensor<32x48xf32>, tensor<48x64xf32>)
                     outs(%init : tensor<32x64xf32>) -> tensor<32x64xf32>
  return %r : tensor<32x64xf32>
}
"""

# A reduction: IREE compiles it with subgroup operations, so a target whose subgroup size is not
# the device's gives wrong sums (every named target on lavapipe, whose subgroup size is 8).
ROW_SUM = """
func.func @main(%input: tensor<16x512xf32>) -> tensor<16xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<16xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<16xf32>) -> tensor<16xf32>
  %r = linalg.reduce ins(%input : tensor<16x512xf32>) outs(%init : tensor<16xf32>) dimensions = [1]
    (%in: f32, %acc: f32) {
      %s = arith.addf %in, %acc : f32
      linalg.yield %s : f32
    }
  return %r : tensor<16xf32>
}
"""


@pytest.fixture(scope="module")
def vulkan_matmul(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Compile the matmul for the Vulkan device: the program and its dispatch's benchmark."""
    folder = tmp_path_factory.mktemp("vulkan_matmul")
    source = folder / "matmul.mlir"
    source.write_text(MATMUL)
    program = compile_for_vulkan(
        source, folder / "matmul.vmfb", f"--iree-hal-dump-executable-benchmarks-to={folder}"
    )
    (benchmark_source,) = folder.glob("*_benchmark.mlir")
    benchmark = folder / "benchmark.vmfb"
    subprocess.run(
        [IREE_COMPILE, str(benchmark_source), "-o", str(benchmark)], check=True, capture_output=True
    )
    return program, benchmark


def _inputs(folder: Path, *arrays: np.ndarray) -> Path:
    path = folder / "inputs.npz"
    write_input_archive(path, list(arrays))
    return path


@requires_vulkan
def test_benchmark_worker_times_on_the_vulkan_device(vulkan_matmul: tuple[Path, Path]) -> None:
    _, benchmark = vulkan_matmul
    jobs = [BenchmarkJob(0, benchmark), BenchmarkJob(1, benchmark)]
    session = BenchmarkSession(jobs, "vulkan", repetitions=2, batch=2, timeout_s=120.0)
    outcomes = list(LocalExecutor().run_benchmarks(session))
    assert [(o.candidate_id, o.status, o.driver, len(o.times_ms)) for o in outcomes] == [
        (0, BenchmarkStatus.MEASURED, "vulkan", 2),
        (1, BenchmarkStatus.MEASURED, "vulkan", 2),
    ]
    # The binary holds only SPIR-V: the CPU's device cannot run it, so a measuring path that
    # fell back to local-task would not have measured it.
    on_cpu = BenchmarkSession(jobs[:1], "local-task", repetitions=1, batch=1, timeout_s=120.0)
    (cpu_outcome,) = LocalExecutor().run_benchmarks(on_cpu)
    assert cpu_outcome.status is not BenchmarkStatus.MEASURED


@requires_vulkan
def test_two_device_campaign_on_vulkan_measures_and_confirms_every_candidate(
    vulkan_matmul: tuple[Path, Path],
) -> None:
    _, benchmark = vulkan_matmul
    settings = CampaignSettings(
        repetitions=2, min_repetition_s=0.005, hopeless_factor=1000.0, confirm_top=1,
        confirm_rounds=2, min_timeout_s=120.0,
    ).for_device("vulkan")  # fmt: skip
    # Not the host's CPU as far as the campaign knows: prewarm processes load ahead.
    assert settings.prewarm and settings.prewarm >= 1
    result = run_campaign(
        LocalExecutor(), BenchmarkJob(0, benchmark),
        [BenchmarkJob(i, benchmark) for i in (1, 2, 3, 4)], ["vulkan", "vulkan"], settings,
    )  # fmt: skip
    statuses = {cid: m.status for cid, m in result.candidates.items()}
    assert statuses == dict.fromkeys((1, 2, 3, 4), BenchmarkStatus.MEASURED), result.notes
    assert set(result.baselines) == {"vulkan"} or len(result.baselines) == 2
    assert all(baseline.before_ms for baseline in result.baselines.values())
    assert sum(m.confirmed for m in result.candidates.values()) >= 1


@requires_vulkan
def test_reference_worker_brings_vulkan_outputs_back(
    vulkan_matmul: tuple[Path, Path], tmp_path: Path
) -> None:
    program, _ = vulkan_matmul
    rng = np.random.default_rng(0)
    lhs, rhs = rng.random((32, 48), np.float32), rng.random((48, 64), np.float32)
    batch = ReferenceBatch(
        [(0, program, tmp_path / "out.npy")], "vulkan", _inputs(tmp_path, lhs, rhs), repetitions=1
    )
    run = run_reference_programs_here(batch)[0]
    assert (run.reason, run.driver) == ("", "vulkan")
    assert run.output is not None
    np.testing.assert_allclose(run.output, lhs @ rhs, rtol=1e-4)


@requires_vulkan
def test_model_worker_times_and_brings_outputs_back_on_vulkan(
    vulkan_matmul: tuple[Path, Path], tmp_path: Path
) -> None:
    program, _ = vulkan_matmul
    rng = np.random.default_rng(1)
    lhs, rhs = rng.random((32, 48), np.float32), rng.random((48, 64), np.float32)
    comparison = ModelComparison(
        [("default", program), ("candidate", program)], "main", _inputs(tmp_path, lhs, rhs),
        tmp_path, "vulkan", rounds=2,
    )  # fmt: skip
    runs = run_models_side_by_side_here(comparison)
    assert {model_id: (run.reason, len(run.times_ms)) for model_id, run in runs.items()} == {
        "default": ("", 2),
        "candidate": ("", 2),
    }
    np.testing.assert_allclose(runs["candidate"].outputs[0], lhs @ rhs, rtol=1e-4)


@requires_vulkan
def test_chosen_target_sums_correctly_on_the_device(tmp_path: Path) -> None:
    source = tmp_path / "row_sum.mlir"
    source.write_text(ROW_SUM)
    program = compile_for_vulkan(source, tmp_path / "row_sum.vmfb")
    values = np.random.default_rng(2).random((16, 512), np.float32)
    batch = ReferenceBatch(
        [(0, program, tmp_path / "out.npy")], "vulkan", _inputs(tmp_path, values), repetitions=1
    )
    run = run_reference_programs_here(batch)[0]
    assert run.reason == ""
    assert run.output is not None
    np.testing.assert_allclose(run.output, values.sum(axis=1), rtol=1e-4)


def test_first_run_deadline_allows_a_vulkan_drivers_compile() -> None:
    """Vulkan compiles a candidate's pipelines at its first call (1.5-2.6 s each on lavapipe,
    against 40 ms for the baseline's): its first run gets the load allowance, CUDA's does not."""
    baseline = BenchmarkOutcome(
        0, BenchmarkStatus.MEASURED, "", (10.0, 10.0), 4, False, "vulkan", first_run_ms=40.0
    )
    settings = CampaignSettings(min_timeout_s=10.0, hopeless_factor=5.0)
    on_vulkan = job_deadlines(settings.for_device("vulkan"), baseline)
    on_cuda = job_deadlines(settings.for_device("cuda://0"), baseline)
    assert (on_vulkan.first_run_s, on_cuda.first_run_s) == (
        pytest.approx(1.0 + 10.0 + 5 * 0.04),
        pytest.approx(1.0 + 5 * 0.04),
    )
    assert settings.for_device("vulkan://GPU-00ff").jit_at_first_run is True
    assert settings.for_device("local-task").jit_at_first_run is False
    # Past that deadline a Vulkan candidate timed out (its compile may be slow), it is not
    # stopped as slower than the baseline.
    assert (on_vulkan.first_run_compiles, on_cuda.first_run_compiles) == (True, False)
    job = BenchmarkJob(3, Path("3.vmfb"))
    on_vulkan_outcome = _timed_out(job, _Phase.FIRST_RUN, 11.2, on_vulkan, "vulkan")
    on_cuda_outcome = _timed_out(job, _Phase.FIRST_RUN, 1.2, on_cuda, "cuda://0")
    assert (on_vulkan_outcome.stopped_early, on_vulkan_outcome.reason) == (
        False,
        "no result within 11.2 s (first run, which includes the driver's compile of its "
        "pipelines; --benchmark-timeout allows more)",
    )
    assert (on_cuda_outcome.stopped_early, on_cuda_outcome.reason) == (
        True,
        "stopped early: its first run passed 1.20 s, set from the baseline's time",
    )


@requires_vulkan
def test_prewarm_puts_vulkan_pipelines_in_the_drivers_shader_cache(
    vulkan_matmul: tuple[Path, Path], tmp_path: Path
) -> None:
    _, benchmark = vulkan_matmul
    cache = tmp_path / "shader_cache"
    prewarm = subprocess.run(
        [sys.executable, "-m", "ireetune.benchmark.worker", "--prewarm"],
        input=f"vulkan\n{benchmark}\n", capture_output=True, text=True, check=True,
        env={**os.environ, "MESA_SHADER_CACHE_DIR": str(cache)},
    )  # fmt: skip
    assert prewarm.stdout.splitlines() == [f'{{"event": "prewarmed", "vmfb": "{benchmark}"}}']
    # Mesa keeps an index file and one file per compiled shader: loading alone compiles nothing.
    entries = [path for path in cache.rglob("*") if path.is_file() and path.name != "index"]
    assert entries, sorted(cache.rglob("*"))
