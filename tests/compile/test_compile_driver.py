"""The compiler driver: one request, one command line, one result, with the real iree-compile."""

from __future__ import annotations

from pathlib import Path

import pytest

from ireetune.compile import driver
from ireetune.compile.driver import (
    DUMP_BENCHMARKS_FLAG,
    CompileRequest,
    CompileResult,
    CompilerTool,
    CompileStatus,
    build_arguments,
    build_request,
    run_compile,
)
from ireetune.core.target import links_specs
from ireetune.profiler.operations import ElementType
from ireetune.profiler.peaks import PEAK_DEVICE, lookup_peak_gflops
from ireetune.targets import parse_target
from tests.conftest import MATMUL_MODEL


def test_arguments_hold_every_part_of_the_request(tmp_path: Path) -> None:
    request = build_request(
        parse_target("cuda:sm_80"),
        tmp_path / "in" / "model.mlir",
        tmp_path / "out.vmfb",
        phase_flags=("--compile-to=executable-configurations",),
        spec_path=tmp_path / "spec.mlir",
        default_specs=True,
        dumps=((DUMP_BENCHMARKS_FLAG, tmp_path / "dumps"),),
        reproducer_path=tmp_path / "crash.mlir",
    )
    assert build_arguments(request, "iree-compile") == [
        "iree-compile",
        str(tmp_path / "in" / "model.mlir"),
        "--iree-hal-target-device=cuda",
        "--iree-cuda-target=sm_80",
        "--compile-to=executable-configurations",
        f"--iree-codegen-transform-dialect-library={tmp_path / 'spec.mlir'}",
        "--iree-codegen-enable-default-tuning-specs",
        "--mlir-disable-threading",
        f"--iree-hal-dump-executable-benchmarks-to={tmp_path / 'dumps'}",
        f"--mlir-pass-pipeline-crash-reproducer={tmp_path / 'crash.mlir'}",
        "-o",
        str(tmp_path / "out.vmfb"),
    ]


def test_only_a_compile_that_loads_a_spec_runs_without_mlir_threads(tmp_path: Path) -> None:
    """IREE 3.13 can deadlock while it loads a spec with MLIR's threads on (ireetune/core/tools.py);
    a compile without a spec keeps them."""
    target = parse_target("cpu")
    plain = build_request(target, tmp_path / "m.mlir", tmp_path / "m.vmfb")
    with_spec = build_request(
        target, tmp_path / "m.mlir", tmp_path / "s.vmfb", spec_path=tmp_path / "s.mlir"
    )
    assert "--mlir-disable-threading" not in build_arguments(plain, "iree-compile")
    assert build_arguments(with_spec, "iree-compile")[-4:-2] == [
        f"--iree-codegen-tuning-spec-path={tmp_path / 's.mlir'}",
        "--mlir-disable-threading",
    ]


def test_a_failed_compile_says_why_in_one_line_and_leaves_no_binary(tmp_path: Path) -> None:
    source = tmp_path / "broken.mlir"
    source.write_text("func.func @main( {\n")
    output = tmp_path / "broken.vmfb"
    result = run_compile(build_request(parse_target("cpu"), source, output, timeout_s=60))
    assert (result.status, result.ok, result.crashed) == (CompileStatus.FAILED, False, False)
    assert result.error_line.startswith("error:") and "\n" not in result.error_line
    assert not output.exists()


def test_a_compile_past_its_timeout_is_timed_out(tmp_path: Path) -> None:
    source = tmp_path / "matmul.mlir"
    source.write_text(MATMUL_MODEL)
    request = build_request(parse_target("cpu"), source, tmp_path / "m.vmfb", timeout_s=0.01)
    result = run_compile(request)
    assert (result.status, result.error_line) == (CompileStatus.TIMED_OUT, "timed out after 0 s")
    assert not (tmp_path / "m.vmfb").exists()


def test_iree_opt_runs_through_the_same_request(tmp_path: Path) -> None:
    source = tmp_path / "matmul.mlir"
    source.write_text(MATMUL_MODEL)
    output = tmp_path / "canonical.mlir"
    request = CompileRequest(
        source, output, phase_flags=("--canonicalize",), timeout_s=60, tool=CompilerTool.OPT
    )
    result = run_compile(request)
    assert result.ok, result.error_line
    assert Path(result.arguments[0]).name == "iree-opt"
    assert "linalg.matmul" in output.read_text()


def test_targets_say_how_specs_apply_and_what_their_peak_is() -> None:
    facts = {
        name: (
            target.traits.spec_flag,
            links_specs(target),
            target.traits.has_default_specs,
            lookup_peak_gflops(target.name, ElementType("f16")),
            PEAK_DEVICE.get(target.name, target.name),
        )
        for name in ("cpu", "cuda:sm_80", "rocm:gfx942")
        for target in [parse_target(name)]
    }
    assert facts == {
        "cpu": ("--iree-codegen-tuning-spec-path", True, False, None, "cpu"),
        "cuda:sm_80": ("--iree-codegen-transform-dialect-library", False, False, 312_000.0, "A100"),
        "rocm:gfx942": ("--iree-codegen-tuning-spec-path", True, True, 1_307_400.0, "MI300X"),
    }


def _fail_in_a_pass(tmp_path: Path) -> CompileResult:
    """Compile the matmul with a spec that does not parse: a pass fails, and MLIR writes its
    crash reproducer (about 8 KiB)."""
    source, spec = tmp_path / "matmul.mlir", tmp_path / "bad_spec.mlir"
    source.write_text(MATMUL_MODEL)
    spec.write_text("module {\n")
    request = build_request(
        parse_target("cpu"), source, tmp_path / "m.vmfb", spec_path=spec, timeout_s=60,
        reproducer_path=tmp_path / "m_reproducer.mlir",
    )  # fmt: skip
    return run_compile(request)


def test_a_failed_compile_keeps_its_crash_reproducer(tmp_path: Path) -> None:
    result = _fail_in_a_pass(tmp_path)
    assert (result.status, result.reproducer_path) == (
        CompileStatus.FAILED,
        tmp_path / "m_reproducer.mlir",
    )
    assert "linalg.matmul" in (tmp_path / "m_reproducer.mlir").read_text()


def test_a_crash_reproducer_over_the_limit_is_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A whole model's reproducer holds its weights; here the limit is made smaller instead.
    monkeypatch.setattr(driver, "MAX_REPRODUCER_BYTES", 1024)
    result = _fail_in_a_pass(tmp_path)
    assert (result.status, result.reproducer_path) == (CompileStatus.FAILED, None)
    assert not (tmp_path / "m_reproducer.mlir").exists()
    assert result.stderr.endswith(
        "MiB) was not kept (over 0 MiB); the command above writes it again\n"
    )
