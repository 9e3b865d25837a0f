"""bench/space_sweep.py: every dispatch of a model through the space steps, faults counted."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from ireetune.core.errors import IreetuneError
from tests.conftest import CONV_MODEL, MATMUL_MODEL, REPOSITORY

sys.path.insert(0, str(REPOSITORY / "bench"))

import space_sweep  # noqa: E402


@pytest.fixture(scope="module")
def swept_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model of a matmul and a convolution, whose dumps the tests below share."""
    folder = tmp_path_factory.mktemp("sweep")
    model = folder / "two.mlir"
    matmul = MATMUL_MODEL.replace("@main", "@matmul")
    model.write_text(f"module {{\n{matmul}\n{CONV_MODEL}\n}}\n")
    return model


def _sweep(model: Path, flags: str = "default,dt", *more: str) -> int:
    """Run the script on `model` for haswell (any host), in the model's folder's dumps."""
    return space_sweep.main(
        [str(model), "--target", "cpu:haswell", "--flag-sets", flags, "--candidates", "8",
         "--work-dir", str(model.parent / "work"), *more]
    )  # fmt: skip


def test_every_dispatch_goes_through_every_step(
    swept_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = _sweep(swept_model)
    lines = capsys.readouterr().out.splitlines()
    # Data tiling adds a dispatch for each of the matmul's operands, packed.
    assert (status, lines) == (
        0,
        [
            "two cpu:haswell default: 2 through every step, 0 refused, 0 fault(s)",
            "two cpu:haswell dt: 4 through every step, 0 refused, 0 fault(s)",
        ],
    )


def test_a_fault_is_printed_with_its_stage_and_fails_the_sweep(
    swept_model: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def divide(*_: Any) -> None:
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(space_sweep, "build_configuration_spec", divide)
    status = _sweep(swept_model, "default")
    out = capsys.readouterr().out
    faults = [line for line in out.splitlines() if line.startswith("FAULT")]
    assert status == 1
    assert len(faults) == 2
    assert "at spec: ZeroDivisionError: float division by zero" in faults[0]
    assert (
        out.splitlines()[-1]
        == "two cpu:haswell default: 0 through every step, 0 refused, 2 fault(s)"
    )


def test_a_refusal_in_the_tuners_own_words_is_no_fault(
    swept_model: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*_: Any) -> None:
        raise IreetuneError("not tuned here")

    monkeypatch.setattr(space_sweep, "build_configuration_spec", refuse)
    status = _sweep(swept_model, "default", "--refusals")
    assert status == 0
    assert capsys.readouterr().out.splitlines() == [
        "REFUSED two default module_main_dispatch_0_embedded_elf_x86_64_benchmark.mlir at spec: "
        "not tuned here",
        "REFUSED two default module_matmul_dispatch_0_embedded_elf_x86_64_benchmark.mlir at spec: "
        "not tuned here",
        "two cpu:haswell default: 0 through every step, 2 refused, 0 fault(s)",
    ]


def test_an_unknown_flag_set_is_one_line(
    swept_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _sweep(swept_model, "default,fast") == 2
    assert capsys.readouterr().err == "error: unknown flag set(s) ['fast']\n"
