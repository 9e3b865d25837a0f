"""Run folders read as untrusted data (issue 22, defects 4 and 5): one reading path for every
JSON file a folder holds, with a size limit, a depth limit and typed fields, and the global
flags a folder may carry. The command-level refusals are cases of tests/test_bad_inputs.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ireetune.errors import IreetuneError
from ireetune.flags.space import propose_flag_sets
from ireetune.handoff.folder_flags import check_folder_flags
from ireetune.run_files import (
    DispatchRunFile,
    RunFileError,
    measure_depth,
    read_json_file,
    read_model_file,
)
from ireetune.targets.gpu.flags import CUDA_FLAG_SPACE, ROCM_FLAG_SPACE
from ireetune.targets.llvm_cpu.flags import CPU_FLAG_SPACE

BASELINE = {"candidate_id": 0, "knobs": None, "status": "measured", "spec_path": "specs/0.mlir"}


def test_depth_counts_brackets_outside_strings_only() -> None:
    assert measure_depth('{"a": "[[[[{{", "b": [[1], {"c": "]]"}]}', 32) == 3


def test_depth_stops_past_the_limit_without_recursion() -> None:
    assert measure_depth("[" * 1_000_000, 32) == 33


def test_a_deep_file_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(RunFileError) as excinfo:
        read_json_file(path)
    assert str(excinfo.value) == (f"{path} nests deeper than 32 levels: not a file ireetune wrote")


def test_an_oversized_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_text('{"candidates": []}')
    with pytest.raises(RunFileError) as excinfo:
        read_json_file(path, max_bytes=8)
    assert str(excinfo.value) == (
        f"{path} is 18 bytes, more than the 8 a run folder's file may hold"
    )


def test_a_file_that_is_not_text_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(RunFileError) as excinfo:
        read_json_file(path)
    assert str(excinfo.value) == f"cannot read {path}: not UTF-8 text (invalid start byte)"


def _write_run(run_dir: Path, spec_path: str) -> Path:
    path = run_dir / "results.json"
    forged = {
        "candidate_id": 1,
        "knobs": {"vec_m": 8},
        "status": "measured",
        "spec_path": spec_path,
    }
    path.write_text(json.dumps({"candidates": [BASELINE, forged]}))
    return path


@pytest.mark.parametrize(
    ("spec_path", "problem"),
    [
        ("/etc/hostname", 'must be a path inside the run folder, got "/etc/hostname"'),
        ("specs/../../x.mlir", 'must be a path inside the run folder, got "specs/../../x.mlir"'),
        ("specs/link.mlir", 'leads outside the run folder, got "specs/link.mlir"'),
    ],
)
def test_a_spec_path_must_stay_inside_the_folder(
    tmp_path: Path, spec_path: str, problem: str
) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "specs").mkdir(parents=True)
    (tmp_path / "outside.mlir").write_text("module {}\n")
    (run_dir / "specs" / "link.mlir").symlink_to(tmp_path / "outside.mlir")
    path = _write_run(run_dir, spec_path)
    with pytest.raises(RunFileError) as excinfo:
        read_model_file(path, DispatchRunFile, run_dir)
    assert str(excinfo.value) == f"{path}: candidates[1].spec_path {problem}"


def test_a_run_record_inside_its_folder_reads_back(tmp_path: Path) -> None:
    path = _write_run(tmp_path, "specs/1_spec.mlir")
    run = read_model_file(path, DispatchRunFile, tmp_path)
    assert [(c.candidate_id, c.spec_path) for c in run.candidates] == [
        (0, "specs/0.mlir"),
        (1, "specs/1_spec.mlir"),
    ]


def test_every_flag_the_flag_search_proposes_may_travel_in_a_folder() -> None:
    for space in (CPU_FLAG_SPACE, CUDA_FLAG_SPACE, ROCM_FLAG_SPACE):
        for flag_set in propose_flag_sets(space, 1000):
            check_folder_flags(flag_set.flags, "test")


@pytest.mark.parametrize(
    "flag",
    [
        "--iree-llvmcpu-keep-linker-artifacts",
        "--iree-llvmcpu-keep-linker-artifacts=true",
        "--iree-opt-level=O1",
    ],
)
def test_a_flag_the_search_never_writes_is_refused(flag: str) -> None:
    with pytest.raises(IreetuneError) as excinfo:
        check_folder_flags((flag,), "handoff.json: global_flags")
    assert str(excinfo.value).startswith(
        f"handoff.json: global_flags: {flag!r} is not a flag a run folder may carry"
    )
