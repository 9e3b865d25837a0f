"""Shared fixtures: real dispatch benchmark files dumped by the pinned iree-compile."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from iree.compiler import ir

from ireetune.problem.contraction import ContractionProblem
from ireetune.problem.convolution import ConvolutionProblem

# The CPU that tests compile, tune and run for: this host unless IREETUNE_TEST_CPU names another
# x86-64 CPU that this host can run (CI's second run forces `haswell`, AVX2 without AVX-512, so
# that a host with AVX-512 proves the suite passes on one without). Tests that assert what the
# compiler chose name their CPU explicitly instead; those that run code never name an AVX-512 CPU.
# The tests folder and the repository around it (a test file finds its data, workers, examples
# and bench scripts through these, wherever its folder sits).
TESTS = Path(__file__).resolve().parent
REPOSITORY = TESTS.parent

TEST_CPU = os.environ.get("IREETUNE_TEST_CPU", "").strip() or "host"
# The tuner's `--target` for TEST_CPU.
TEST_TARGET = "cpu" if TEST_CPU == "host" else f"cpu:{TEST_CPU}"
CPU_FLAGS = [
    "--iree-hal-target-device=local",
    "--iree-hal-local-target-device-backends=llvm-cpu",
    f"--iree-llvmcpu-target-cpu={TEST_CPU}",
]
IREE_COMPILE = str(Path(sys.executable).parent / "iree-compile")
# The fast-run settings every end-to-end tuning test runs with: two timed repetitions of at
# least 5 ms, one confirmation round. On the command line (`FAST_RUN_ARGS`), and as the options'
# field names for the Python API and the options dataclasses (`FAST_RUN_OPTIONS`).
FAST_RUN_ARGS = ("--repetitions", "2", "--confirm-rounds", "1", "--min-repetition-time", "0.005")
FAST_RUN_OPTIONS = {"repetitions": 2, "confirm_rounds": 1, "min_repetition_s": 0.005}

MATMUL_MODEL = """
func.func @main(%lhs: tensor<64x96xf32>, %rhs: tensor<96x128xf32>) -> tensor<64x128xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<64x128xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<64x128xf32>) -> tensor<64x128xf32>
  %r = linalg.matmul ins(%lhs, %rhs : tensor<64x96xf32>, tensor<96x128xf32>)
                     outs(%init : tensor<64x128xf32>) -> tensor<64x128xf32>
  return %r : tensor<64x128xf32>
}
"""

MMT_MODEL = """
func.func @main(%lhs: tensor<32x64xf16>, %rhs: tensor<48x64xf16>) -> tensor<32x48xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<32x48xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<32x48xf32>) -> tensor<32x48xf32>
  %r = linalg.matmul
      indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>,
                       affine_map<(d0, d1, d2) -> (d1, d2)>,
                       affine_map<(d0, d1, d2) -> (d0, d1)>]
      ins(%lhs, %rhs : tensor<32x64xf16>, tensor<48x64xf16>)
      outs(%init : tensor<32x48xf32>) -> tensor<32x48xf32>
  return %r : tensor<32x48xf32>
}
"""

BATCH_MATMUL_MODEL = """
func.func @main(%lhs: tensor<4x32x64xf32>, %rhs: tensor<4x64x16xf32>) -> tensor<4x32x16xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<4x32x16xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<4x32x16xf32>) -> tensor<4x32x16xf32>
  %r = linalg.batch_matmul ins(%lhs, %rhs : tensor<4x32x64xf32>, tensor<4x64x16xf32>)
                           outs(%init : tensor<4x32x16xf32>) -> tensor<4x32x16xf32>
  return %r : tensor<4x32x16xf32>
}
"""

# An arg-max over the rows of %x (tensor<64x32xf32>), its index in %r#1: a generic of two results
# (the largest value and its index), which no op family covers, so it is refused (a ReLU, whose
# body reads a constant, is tunable).
ARGMAX_OPS = """
  %low = arith.constant -3.0e+38 : f32
  %z = arith.constant 0 : i32
  %ev = tensor.empty() : tensor<64xf32>
  %ei = tensor.empty() : tensor<64xi32>
  %v = linalg.fill ins(%low : f32) outs(%ev : tensor<64xf32>) -> tensor<64xf32>
  %i = linalg.fill ins(%z : i32) outs(%ei : tensor<64xi32>) -> tensor<64xi32>
  %r:2 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<64x32xf32>) outs(%v, %i : tensor<64xf32>, tensor<64xi32>) {
    ^bb0(%in: f32, %best: f32, %at: i32):
      %k = linalg.index 1 : index
      %ki = arith.index_cast %k : index to i32
      %gt = arith.cmpf ogt, %in, %best : f32
      %nb = arith.select %gt, %in, %best : f32
      %na = arith.select %gt, %ki, %at : i32
      linalg.yield %nb, %na : f32, i32
  } -> (tensor<64xf32>, tensor<64xi32>)
"""
ARGMAX_MODEL = f"""
func.func @main(%x: tensor<64x32xf32>) -> tensor<64xi32> {{{ARGMAX_OPS}
  return %r#1 : tensor<64xi32>
}}
"""


def dump_benchmarks(
    model_text: str, folder: Path, cpu: str = TEST_CPU, flags: tuple[str, ...] = ()
) -> list[Path]:
    """Compile a model with per-dispatch benchmark dumps and tuner attributes.

    The compiler's default configurations depend on the CPU: a test that expects particular
    defaults dumps for a named CPU (cross-compiling works on any x86-64 host), never for
    TEST_CPU.
    """
    folder.mkdir(parents=True, exist_ok=True)
    model_path = folder / "model.mlir"
    model_path.write_text(model_text)
    subprocess.run(
        [
            IREE_COMPILE,
            str(model_path),
            *CPU_FLAGS[:-1],
            f"--iree-llvmcpu-target-cpu={cpu}",
            *flags,
            f"--iree-hal-dump-executable-benchmarks-to={folder / 'dumps'}",
            "--iree-codegen-add-tuner-attributes",
            "-o",
            str(folder / "model.vmfb"),
        ],
        check=True,
        capture_output=True,
    )
    return sorted((folder / "dumps").glob("*_benchmark.mlir"))


def compile_matmul_for_device_host(folder: Path, **options: Any) -> Path:
    """Write MATMUL_MODEL into `folder`, compile it as `tune-dispatch --stop-after compile` does
    for this host's CPU (no database, no progress bar; `options`: the other TuneOptions fields a
    test sets) and return the run folder."""
    from ireetune.flows.dispatch.options import StopAfter
    from ireetune.flows.dispatch.tuner import TuneOptions, tune_dispatch

    model = folder / "matmul.mlir"
    model.write_text(MATMUL_MODEL)
    settings = {
        "input_path": model,
        "target": "cpu",
        "output_dir": folder / "runs",
        "stop_after": StopAfter.COMPILE,
        "use_database": False,
        "show_progress": False,
    }
    return tune_dispatch(TuneOptions(**settings, **options)).run_dir


@pytest.fixture(scope="session")
def matmul_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("matmul_model")
    path = folder / "matmul.mlir"
    path.write_text(MATMUL_MODEL)
    return path


@pytest.fixture(scope="session")
def matmul_benchmark(tmp_path_factory: pytest.TempPathFactory) -> Path:
    (path,) = dump_benchmarks(MATMUL_MODEL, tmp_path_factory.mktemp("matmul"))
    return path


@pytest.fixture(scope="session")
def znver4_matmul_benchmark(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The matmul dumped for an AVX-512 Zen 4 CPU, whatever this host is."""
    (path,) = dump_benchmarks(MATMUL_MODEL, tmp_path_factory.mktemp("matmul_znver4"), "znver4")
    return path


@pytest.fixture(scope="session")
def mmt_benchmark(tmp_path_factory: pytest.TempPathFactory) -> Path:
    (path,) = dump_benchmarks(MMT_MODEL, tmp_path_factory.mktemp("mmt"))
    return path


@pytest.fixture(scope="session")
def batch_matmul_benchmark(tmp_path_factory: pytest.TempPathFactory) -> Path:
    (path,) = dump_benchmarks(BATCH_MATMUL_MODEL, tmp_path_factory.mktemp("bmm"))
    return path


@pytest.fixture(scope="session")
def argmax_benchmark(tmp_path_factory: pytest.TempPathFactory) -> Path:
    (path,) = dump_benchmarks(ARGMAX_MODEL, tmp_path_factory.mktemp("argmax"))
    return path


@pytest.fixture(autouse=True)
def private_database(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Give every test its own tuning database, never the user's cache."""
    path = tmp_path_factory.mktemp("db") / "tuning.sqlite"
    monkeypatch.setenv("IREETUNE_DB", str(path))
    return path


CONV_MODEL = """
func.func @main(%image: tensor<1x16x18x18xf32>, %filter: tensor<32x16x3x3xf32>) -> tensor<1x32x16x16xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<1x32x16x16xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<1x32x16x16xf32>) -> tensor<1x32x16x16xf32>
  %r = linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
      ins(%image, %filter : tensor<1x16x18x18xf32>, tensor<32x16x3x3xf32>)
      outs(%init : tensor<1x32x16x16xf32>) -> tensor<1x32x16x16xf32>
  return %r : tensor<1x32x16x16xf32>
}
"""


@pytest.fixture(scope="session")
def conv_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("conv_model") / "conv.mlir"
    path.write_text(CONV_MODEL)
    return path


# The problem record of the 64x128x96 f32 `linalg.matmul` (MATMUL_MODEL's dispatch).
MATMUL_64X128X96 = ContractionProblem(
    op_name="linalg.matmul",
    loop_sizes=(64, 128, 96),
    batch_dims=(),
    m_dims=(0,),
    n_dims=(1,),
    k_dims=(2,),
    lhs_type="f32",
    rhs_type="f32",
    output_type="f32",
    indexing_maps=(
        "(d0, d1, d2) -> (d0, d2)",
        "(d0, d1, d2) -> (d2, d1)",
        "(d0, d1, d2) -> (d0, d1)",
    ),
    lhs_shape=(64, 96),
    rhs_shape=(96, 128),
    output_shape=(64, 128),
)


def nchw_conv_problem(
    batch: int, f: int, c: int, out: int, kernel: int, stride: int = 1
) -> ConvolutionProblem:
    """Return the problem record of an f32 NCHW convolution with square images and filters, as
    IREE's dispatch shows it (loops n, f, oh, ow, c, kh, kw)."""
    image = f"d2 * {stride} + d5, d3 * {stride} + d6" if stride > 1 else "d2 + d5, d3 + d6"
    size = (out - 1) * stride + kernel
    return ConvolutionProblem(
        op_name="linalg.generic",
        loop_sizes=(batch, f, out, out, c, kernel, kernel),
        batch_dims=(0,),
        output_image_dims=(2, 3),
        output_channel_dims=(1,),
        filter_dims=(5, 6),
        input_channel_dims=(4,),
        depth_dims=(),
        strides=(stride, stride),
        dilations=(1, 1),
        lhs_type="f32",
        rhs_type="f32",
        output_type="f32",
        indexing_maps=(
            f"(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, {image})",
            "(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)",
            "(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)",
        ),
        lhs_shape=(batch, c, size, size),
        rhs_shape=(f, c, kernel, kernel),
        output_shape=(batch, f, out, out),
    )


def parse_function_op(
    text: str, context: ir.Context, op_name: str = "linalg.generic"
) -> tuple[ir.Module, ir.Operation]:
    """Parse a module of one function; return it (which keeps the op alive) and its one op named
    `op_name`."""
    module = ir.Module.parse(text, context)
    (found,) = [
        op.operation
        for op in module.body.operations[0].regions[0].blocks[0].operations
        if op.operation.name == op_name
    ]
    return module, found
