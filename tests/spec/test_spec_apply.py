"""`ireetune compile` and `ireetune spec dump`: apply a spec per target and prove it landed."""

# ruff: noqa: E501  (MLIR text and expected output lines are data, kept verbatim)

from __future__ import annotations

from pathlib import Path

import pytest

from ireetune.cli import main
from ireetune.spec.apply import resolve_compile_target
from tests.spec_support import (
    CUDA_SPEC,
    F16_MODEL,
    MATMUL_MODEL,
    MIXED_MODEL,
    ROCM_SPEC,
    VALID_SPEC,
    build_conv_spec,
    edit,
    write,
)


def _compile(tmp_path: Path, model: str, spec: str, target: str) -> tuple[int, Path]:
    model_path = write(tmp_path, "model.mlir", model)
    spec_path = write(tmp_path, "spec.mlir", spec)
    output = tmp_path / "out" / "model.vmfb"
    status = main(
        [
            "compile",
            str(model_path),
            "--target",
            target,
            "--spec",
            str(spec_path),
            "-o",
            str(output),
        ]
    )
    return status, output


def test_cpu_spec_lands_and_vmfb_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, output = _compile(tmp_path, MIXED_MODEL, VALID_SPEC, "cpu")
    assert (status, output.stat().st_size > 0, capsys.readouterr().out) == (
        0,
        True,
        f"landed: @match_matmul_64x128x96 configured main_dispatch_0\nwrote {output}\n",
    )


def test_the_binary_written_is_the_plain_compile_not_the_dumped_one(tmp_path: Path) -> None:
    # The landing check compiles with the configurations dumped, which moves the executables'
    # source locations (a SqueezeNet so built ran 2-5% slower); the user gets iree-compile's.
    from ireetune.compile.driver import DUMP_CONFIGURATIONS_FLAG, build_request, run_compile

    status, output = _compile(tmp_path, MIXED_MODEL, VALID_SPEC, "cpu")
    assert status == 0
    target = resolve_compile_target("cpu").target
    built = {}
    for name, dumps in (("plain", ()), ("dumped", ((DUMP_CONFIGURATIONS_FLAG, tmp_path / "d"),))):
        request = build_request(
            target, tmp_path / "model.mlir", tmp_path / f"{name}.vmfb",
            spec_path=tmp_path / "spec.mlir", dumps=dumps,
        )  # fmt: skip
        assert run_compile(request).ok
        built[name] = request.output_path.read_bytes()
    assert built["plain"] != built["dumped"]
    assert output.read_bytes() == built["plain"]


def test_the_landing_check_stops_once_the_executables_are_configured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its dumps are complete by then; the code generation, most of a compile, is the binary's.
    from ireetune.compile import driver

    compiles: list[list[str]] = []
    real_run_tool = driver.run_tool

    def counting(arguments: list[str], **options: object) -> object:
        compiles.append(arguments)
        return real_run_tool(arguments, **options)

    monkeypatch.setattr(driver, "run_tool", counting)
    assert _compile(tmp_path, MIXED_MODEL, VALID_SPEC, "cpu")[0] == 0
    dumped = [any(w.startswith(driver.DUMP_CONFIGURATIONS_FLAG) for w in a) for a in compiles]
    configured = [driver.CONFIGURED_PHASE in a for a in compiles]
    assert sorted(zip(dumped, configured, strict=True)) == [(False, False), (True, True)]


def test_config_that_does_not_land_fails_loudly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The action forgets to annotate: the matcher matches, but its configuration never lands.
    spec = edit(
        VALID_SPEC,
        '    transform.annotate %op "compilation_info" = %config : !transform.any_op, !transform.any_param\n',
        "",
    )
    status, output = _compile(tmp_path, MATMUL_MODEL, spec, "cpu")
    captured = capsys.readouterr()
    assert (status, output.exists(), captured.err) == (
        1,
        False,
        f"ireetune: error: 1 of 1 configurations did not land; {output} was not written\n",
    )
    assert captured.out.startswith(
        "NOT LANDED: @match_matmul_64x128x96 should configure main_dispatch_0 with "
        "#iree_cpu.lowering_config<distribution = [32, 64, 0]"
    )


def test_spec_matching_no_dispatch_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, output = _compile(tmp_path, MATMUL_MODEL, edit(VALID_SPEC, "[96] :", "[97] :"), "cpu")
    assert (status, output.exists(), capsys.readouterr().err) == (
        1,
        False,
        "ireetune: error: no matcher of the spec configures any dispatch of the model; "
        f"{output} was not written\n",
    )


def test_cuda_spec_is_applied_as_a_library_and_lands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert resolve_compile_target("cuda:sm_80").spec_flags(Path("s.mlir")) == [
        "--iree-codegen-transform-dialect-library=s.mlir",
        "--mlir-disable-threading",
    ]
    status, output = _compile(tmp_path, F16_MODEL, CUDA_SPEC, "cuda:sm_80")
    assert (status, capsys.readouterr().out) == (
        0,
        f"landed: @match_matmul_256x384x512 configured main_dispatch_0\nwrote {output}\n",
    )


def test_rocm_spec_lands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, output = _compile(tmp_path, F16_MODEL, ROCM_SPEC, "rocm:gfx942")
    assert (status, capsys.readouterr().out) == (
        0,
        f"landed: @match_matmul_256x384x512 configured main_dispatch_0\nwrote {output}\n",
    )


def test_dump_cpu_prints_the_spec_the_compiler_loaded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model_path = write(tmp_path, "model.mlir", MATMUL_MODEL)
    spec_path = write(tmp_path, "spec.mlir", VALID_SPEC)
    assert main(["spec", "dump", str(model_path), "--target", "cpu", "--spec", str(spec_path)]) == 0
    dumped = capsys.readouterr().out
    assert (
        dumped.count("transform.named_sequence @match_matmul_64x128x96("),
        "distribution = [32, 64, 0]" in dumped,
    ) == (1, True)


def test_dump_rocm_puts_user_matchers_before_default_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model_path = write(tmp_path, "model.mlir", F16_MODEL)
    spec_path = write(tmp_path, "spec.mlir", ROCM_SPEC)
    arguments = [
        "spec",
        "dump",
        str(model_path),
        "--target",
        "rocm:gfx942",
        "--spec",
        str(spec_path),
    ]
    assert main([*arguments, "--with-default-specs"]) == 0
    dumped = capsys.readouterr().out
    # IREE's shipped gfx942 spec holds an attention and an mmt matcher.
    pairs = dumped[dumped.index("transform.foreach_match") :].split(":")[0]
    assert [name.split(" ->")[0].strip(", \n") for name in pairs.split("@")[1::2]] == [
        "match_matmul_256x384x512",
        "match_attention_2x10x4096x64x64x64_f16",
        "match_mmt_2048x1280x5120_f16_f16_f32",
    ]


def test_dump_cuda_explains_there_is_no_linking(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model_path = write(tmp_path, "model.mlir", F16_MODEL)
    spec_path = write(tmp_path, "spec.mlir", CUDA_SPEC)
    assert (
        main(["spec", "dump", str(model_path), "--target", "cuda:sm_80", "--spec", str(spec_path)])
        == 0
    )
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == (
        CUDA_SPEC,
        "ireetune: note: cuda:sm_80 applies the spec as a transform-dialect library "
        "(--iree-codegen-transform-dialect-library); the compiler links nothing, so this is the spec as given.\n",
    )


def test_dump_refuses_default_specs_where_none_exist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model_path = write(tmp_path, "model.mlir", MATMUL_MODEL)
    assert main(["spec", "dump", str(model_path), "--target", "cpu", "--with-default-specs"]) == 2
    assert (
        capsys.readouterr().err
        == "ireetune: error: IREE ships no default tuning specs for cpu (only for ROCm)\n"
    )


def test_a_convolution_spec_built_by_the_builder_lands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conv_spec = build_conv_spec(tmp_path)
    output = tmp_path / "out" / "conv.vmfb"
    arguments = [str(conv_spec.model_path), "--spec", str(conv_spec.spec_path), "-o", str(output)]
    assert main(["compile", *arguments, "--target", "cpu"]) == 0
    assert capsys.readouterr().out == (
        "landed: @match_conv_2x32x16x16x16x3x3_f32_f32_f32 configured main_dispatch_0\n"
        f"wrote {output}\n"
    )
