"""The command line end to end: a real tuning run, and one clear line for every bad input."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CPU_FLAGS, FAST_RUN_ARGS, IREE_COMPILE

FAST_FLAGS = [
    *FAST_RUN_ARGS,
    "--jobs",
    "2",
]


def _ireetune(
    *arguments: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ireetune.cli", *arguments],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=300,
    )


def test_tune_dispatch_end_to_end_on_a_model(matmul_model: Path, tmp_path: Path) -> None:
    result = _ireetune(
        "tune-dispatch",
        str(matmul_model),
        "--num-candidates",
        "4",
        "--output-dir",
        str(tmp_path),
        *FAST_FLAGS,
    )
    assert result.returncode == 0, result.stderr
    (run_dir,) = tmp_path.iterdir()
    rows = list(csv.DictReader((run_dir / "candidates.csv").open()))
    assert [row["candidate_id"] for row in rows] == ["0", "1", "2", "3", "4"]
    assert rows[0]["is_baseline"] == "yes" and rows[0]["status"] == "measured"
    results = json.loads((run_dir / "results.json").read_text())
    assert results["outcome"] in ("improved", "no-improvement")
    assert results["compile_success_rate"] == 1.0
    assert "problem: matmul_64x128x96_f32_f32_f32   target: cpu" in result.stdout
    assert (run_dir / "summary.txt").read_text() in result.stdout
    if results["outcome"] == "improved":
        best_id = results["best_candidate"]
        assert rows[best_id]["status"] == "verified"
        spec = run_dir / "best_spec.mlir"
        assert spec.read_text() == (run_dir / "specs" / f"{best_id}_spec.mlir").read_text()
        # Plain iree-compile accepts the spec for the original model.
        compiled = subprocess.run(
            [
                IREE_COMPILE,
                str(matmul_model),
                *CPU_FLAGS,
                f"--iree-codegen-tuning-spec-path={spec}",
                "--mlir-disable-threading",
                "-o",
                str(tmp_path / "tuned.vmfb"),
            ],
            capture_output=True,
            text=True,
        )
        assert compiled.returncode == 0, compiled.stderr
    else:
        assert not (run_dir / "best_spec.mlir").exists()


def test_two_runs_started_together_get_their_own_folders(
    matmul_benchmark: Path, tmp_path: Path
) -> None:
    from ireetune.core.run_dir import create_run_dir

    first = create_run_dir(tmp_path, "matmul")
    second = create_run_dir(tmp_path, "matmul")
    assert first != second and first.is_dir() and second.is_dir()


def _assert_one_line_error(result: subprocess.CompletedProcess[str], expected: str) -> None:
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("ireetune: error: ")
    assert expected in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (["tune-dispatch", "missing.mlir"], "input file not found: missing.mlir"),
        (["tune-dispatch", "{model}", "--target", "tpu"], "unknown target 'tpu'"),
        (["tune-dispatch", "{model}", "--num-candidates", "0"], "must be at least 1, got 0"),
        (["tune-dispatch", "{model}", "--num-candidates", "many"], "'many' is not an integer"),
        (["tune-dispatch", "{model}", "--dispatch", "7"], "dispatch index 7 out of range 0..0"),
        (["tune-dispatch", "{garbage}"], "cannot parse"),
        (["tune-dispatch", "{no_root}"], "no root op found"),
        (["tune-dispatch", "{argmax}"], "is not supported yet"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_bad_input_gives_one_clear_line(
    arguments: list[str],
    expected: str,
    matmul_model: Path,
    matmul_benchmark: Path,
    argmax_benchmark: Path,
    tmp_path: Path,
) -> None:
    garbage = tmp_path / "garbage.mlir"
    garbage.write_text("this is not MLIR {")
    no_root = tmp_path / "no_root_benchmark.mlir"
    no_root.write_text(
        matmul_benchmark.read_text().replace(", root_op = #iree_codegen.root_op<set = 0>", "")
    )
    paths = {
        "model": matmul_model,
        "garbage": garbage,
        "no_root": no_root,
        "argmax": argmax_benchmark,
    }
    filled = [a.format(**{k: str(v) for k, v in paths.items()}) for a in arguments]
    result = (
        _ireetune(*filled, "--output-dir", str(tmp_path / "runs"))
        if filled[0] == "tune-dispatch"
        else _ireetune(*filled)
    )
    _assert_one_line_error(result, expected)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_every_candidate_failing_is_an_error_with_its_record_kept(
    matmul_benchmark: Path, tmp_path: Path
) -> None:
    result = _ireetune(
        "tune-dispatch",
        str(matmul_benchmark),
        "--num-candidates",
        "3",
        "--output-dir",
        str(tmp_path),
        *FAST_FLAGS,
        env={
            "IREETUNE_IREE_COMPILE": str(Path(__file__).with_name("fault_compiler.py")),
            "FAULT_REAL_IREE_COMPILE": IREE_COMPILE,
        },
    )
    _assert_one_line_error(result, "no candidate compiled (0 of 3)")
    (run_dir,) = tmp_path.iterdir()
    assert not (run_dir / "best_spec.mlir").exists()
    results = json.loads((run_dir / "results.json").read_text())
    assert results["outcome"] == "failed"
    assert [c["status"] for c in results["candidates"]] == [
        "compiled",
        "compile-failed",
        "compile-failed",
        "compile-failed",
    ]
    assert results["candidates"][1]["reason"] == "error: injected failure for this candidate"
