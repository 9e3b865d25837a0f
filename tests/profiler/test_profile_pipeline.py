"""End to end on the CPU: real iree-compile, real local-task runs, no mocks."""

from __future__ import annotations

import csv
import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ireetune.cli import main
from ireetune.profiler.configs import parse_config_request
from ireetune.profiler.generate import operation_dir, write_operation
from ireetune.profiler.manifest import DispatchStatus, read_manifest
from ireetune.profiler.operations import ElementType, MatmulLayout, MatmulOperation, OperationKind
from ireetune.profiler.pipeline import Phase, ProfileOptions, run_profile
from ireetune.profiler.vendor import import_torch, time_with_vendor

CPU_FLAGS = [
    "--iree-hal-target-device=local",
    "--iree-hal-local-target-device-backends=llvm-cpu",
    "--iree-llvmcpu-target-cpu=host",
]


def test_cpu_sweep_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    generated = tmp_path / "generated"
    report = tmp_path / "data.csv"
    status = main(
        [
            "profile",
            "matmul",
            "matmul_bias_relu",
            "conv2d",
            "--m",
            "32,48",
            "--n",
            "16",
            "--k",
            "8",
            "--height",
            "7",
            "--width",
            "7",
            "--channels",
            "2",
            "--filters",
            "4",
            "--stride",
            "2",
            "--dilation",
            "2",
            "--dtype",
            "f32",
            "--repetitions",
            "2",
            "--generated-dir",
            str(generated),
            "--output",
            str(report),
        ]
    )
    assert status == 0
    rows = list(csv.DictReader(report.open()))
    assert [row["dispatch"] for row in rows] == [
        "matmul_32x16x8_f32t_f32t_f32t_default",
        "matmul_48x16x8_f32t_f32t_f32t_default",
        "matmul_bias_relu_32x16x8_f32t_f32t_f32t_default",
        "matmul_bias_relu_48x16x8_f32t_f32t_f32t_default",
        "conv2d_nhwc_hwcf_1x7x7x2_3x3x4_s2_d2_f32t_f32t_f32t_default",
    ]
    assert {(row["status"], row["verification"]) for row in rows} == {("profiled", "SUCCESS")}
    assert all(float(row["runtime_ms"]) > 0 and float(row["gflops"]) > 0 for row in rows)
    assert {row["peak_note"] for row in rows} == {"peak of cpu unknown; give --peak-gflops"}
    folder = generated / "linalg" / "matmul" / "matmul_32x16x8_f32t_f32t_f32t"
    assert sorted(p.name for p in folder.glob("matmul_32x16x8_*")) == [
        "matmul_32x16x8_f32t_f32t_f32t.mlir",
        "matmul_32x16x8_f32t_f32t_f32t_benchmark.mlir",
        "matmul_32x16x8_f32t_f32t_f32t_default_profile.vmfb",
        "matmul_32x16x8_f32t_f32t_f32t_default_verify.vmfb",
    ]
    console = capsys.readouterr().out
    assert (
        "Dispatch      : conv2d_nhwc_hwcf_1x7x7x2_3x3x4_s2_d2_f32t_f32t_f32t_default\n" in console
    )
    assert "Verification  : SUCCESS (checked all 512 elements)" in console


MATMUL = MatmulOperation(OperationKind.MATMUL, 32, 32, 32, ElementType.F32, ElementType.F32)


@pytest.fixture(scope="module")
def compiled_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One matmul with the default, two search-space configs and a broken knob set, compiled."""
    generated = tmp_path_factory.mktemp("tree")
    knob_file = generated.parent / "broken_knobs.json"
    knob_file.write_text('[{"dist_m": 32}]')
    options = ProfileOptions(
        generated_dir=generated, configs=parse_config_request(f"2,{knob_file}"), phase=Phase.COMPILE
    )
    run_profile([MATMUL], options)
    return generated


def test_search_space_configs_are_compiled_and_applied(compiled_tree: Path) -> None:
    manifest = read_manifest(compiled_tree)
    kinds = [(e.config_kind, e.status) for e in manifest.dispatches]
    assert kinds == [
        ("knobs", DispatchStatus.CONFIG_FAILED),
        ("default", DispatchStatus.COMPILED),
        ("search-space", DispatchStatus.COMPILED),
        ("search-space", DispatchStatus.COMPILED),
    ]
    broken, default, first, second = manifest.dispatches
    assert broken.reason.startswith("invalid configuration: KeyError")
    assert len({default.binary_hash, first.binary_hash, second.binary_hash}) == 3
    assert not first.not_applied and not second.not_applied
    spec = (
        compiled_tree / operation_dir(Path(), MATMUL) / "configs" / f"{first.config_name}.spec.mlir"
    )
    assert "match_matmul_32x32x32_f32_f32_f32" in spec.read_text()


def test_a_wrong_program_is_reported_as_failed(compiled_tree: Path, tmp_path: Path) -> None:
    """Plant a wrong binary: the transposed-operand matmul of the same shapes computes A x B^T."""
    tree = tmp_path / "tree"
    shutil.copytree(compiled_tree, tree)
    manifest = read_manifest(tree)
    victim = manifest.dispatches[2]
    wrong = dataclasses.replace(MATMUL, layout=MatmulLayout.NT)
    source = write_operation(tmp_path / "wrong", wrong)
    subprocess.run(
        [
            str(Path(sys.executable).parent / "iree-compile"),
            str(source),
            *CPU_FLAGS,
            "-o",
            str(tree / victim.verify_vmfb),
        ],
        check=True,
    )
    results = run_profile(
        [], ProfileOptions(generated_dir=tree, phase=Phase.RUN, repetitions=2)
    ).results
    verdicts = {r.configuration: r.verification for r in results}
    assert verdicts == {
        manifest.dispatches[0].config_name: "Not verified",
        "default": "SUCCESS",
        victim.config_name: "FAILED",
        manifest.dispatches[3].config_name: "SUCCESS",
    }
    failed = next(r for r in results if r.configuration == victim.config_name)
    assert "differ from the reference" in failed.verification_detail
    assert failed.status == "profiled"  # The dispatch still ran; only its result is wrong.
    assert next(r for r in results if r.configuration == "default").speedup_vs_default == 1.0


def test_dispatch_regexes_select_what_is_compiled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(
        [
            "profile",
            "matmul",
            "--m",
            "16",
            "--n",
            "16",
            "--k",
            "16",
            "--layout",
            "nn,nt",
            "--phase",
            "compile",
            "--dispatches",
            "^mmt_.*_default$",
            "--generated-dir",
            str(tmp_path),
        ]
    )
    assert status == 0
    manifest = read_manifest(tmp_path)
    assert [e.name for e in manifest.dispatches] == ["mmt_16x16x16_f32t_f32t_f32t_default"]
    assert "[compiled] mmt_16x16x16_f32t_f32t_f32t_default" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["matmul", "--m", "64:32:8"], "--m: range '64:32:8' starts after it stops"),
        (["gemm"], "unknown operation 'gemm'"),
        (["matmul", "--dtype", "f8"], "unknown element type 'f8'"),
        (["matmul", "--height", "3"], "no operation named takes --height"),
        ([], "name an operation"),
        (["matmul", "--dispatches", "("], "is not a regular expression"),
        (["--phase", "run"], "manifest.json not found"),
        (["matmul", "--configs", "nope"], "'nope' is not default, a number, or an existing file"),
    ],
)
def test_user_mistakes_are_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], arguments: list[str], message: str
) -> None:
    status = main(["profile", *arguments, "--generated-dir", str(tmp_path / "g")])
    error = capsys.readouterr().err
    assert status == 2
    assert error.count("\n") == 1 and message in error


def test_vendor_comparison_without_torch_says_why() -> None:
    timing = time_with_vendor(MATMUL, gpu=False, repetitions=1, min_repetition_s=0.0)
    if import_torch() is None:
        assert (timing.runtime_ms, timing.reason) == (None, "torch is not installed")
    else:
        assert timing.runtime_ms is not None and timing.runtime_ms > 0
