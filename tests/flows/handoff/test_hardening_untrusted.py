"""Run folders read as untrusted data (issue 22, defects 4 and 5): one reading path for every
JSON file a folder holds, with a size limit, a depth limit and typed fields, and the global
flags a folder may carry. The command-level refusals are cases of tests/commands/test_bad_inputs.py."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from ireetune.cli import main
from ireetune.core.errors import IreetuneError
from ireetune.core.flag_space import list_tuned_flags, propose_flag_sets
from ireetune.database.run_files import (
    DispatchRunFile,
    RunFileError,
    measure_depth,
    read_json_file,
    read_model_file,
)
from ireetune.flows.dispatch.options import References
from ireetune.flows.handoff.folder_flags import check_folder_flags
from ireetune.flows.handoff.model_folder import read_device_manifest
from ireetune.targets.gpu.flags import CUDA_FLAG_SPACE, ROCM_FLAG_SPACE
from ireetune.targets.llvm_cpu.flags import CPU_FLAG_SPACE
from tests.conftest import compile_matmul_for_device_host

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


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_file_that_is_not_plain_is_refused_without_opening_it(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "results.json"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    with pytest.raises(RunFileError) as excinfo:
        read_json_file(path)
    assert str(excinfo.value) == f"cannot read {path}: not a plain file"


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
        # And every value of the options the search changes one at a time.
        check_folder_flags(sorted(list_tuned_flags(space.tuned)), "test")


@pytest.mark.parametrize(
    "flag",
    [
        "--iree-llvmcpu-keep-linker-artifacts",
        "--iree-llvmcpu-keep-linker-artifacts=true",
        # A value the searched option never takes (its default, O0, is never written).
        "--iree-opt-level=O0",
        "--iree-llvmcpu-distribution-size=7",
    ],
)
def test_a_flag_the_search_never_writes_is_refused(flag: str) -> None:
    with pytest.raises(IreetuneError) as excinfo:
        check_folder_flags((flag,), "handoff.json: global_flags")
    assert str(excinfo.value).startswith(
        f"handoff.json: global_flags: {flag!r} is not a flag a run folder may carry"
    )


@pytest.fixture(scope="module")
def benchmarked_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real folder: compiled by `tune-dispatch --stop-after compile`, then benchmarked."""
    run_dir = compile_matmul_for_device_host(
        tmp_path_factory.mktemp("benchmarked"), num_candidates=2, repetitions=2,
        min_repetition_s=0.002, confirm_rounds=1, confirm_top=1, references=References.ALL,
    )  # fmt: skip
    assert main(["measure", str(run_dir)]) == 0
    return run_dir


def test_finish_refuses_a_winner_whose_spec_lies_outside_the_folder(
    benchmarked_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(benchmarked_folder, run_dir)
    outside = tmp_path / "outside_spec.mlir"
    shutil.copyfile(run_dir / "specs" / "1_spec.mlir", outside)
    results_path = run_dir / "results.json"
    run = json.loads(results_path.read_text())
    for record in run["candidates"]:
        record["spec_path"] = str(outside)
    results_path.write_text(json.dumps(run))
    capsys.readouterr()

    status = main(["finish", str(run_dir)])

    assert (status, capsys.readouterr().err) == (
        2,
        f"ireetune: error: {results_path}: candidates[0].spec_path must be a path inside the run "
        f'folder, got "{outside}"\n',
    )
    assert not (run_dir / "best_spec.mlir").exists()


def test_an_untampered_benchmarked_folder_still_finishes(
    benchmarked_folder: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(benchmarked_folder, run_dir)
    assert main(["finish", str(run_dir)]) == 0
    assert json.loads((run_dir / "results.json").read_text())["outcome"] in (
        "improved",
        "no-improvement",
    )


DEVICE_MANIFEST = {
    "format": "ireetune-model-folder/1", "round_trip": 1, "target": "cpu",
    "devices": ["local-task"], "function": "main", "inputs": "inputs.npz",
    "default_model": "model.vmfb", "files": {"inputs.npz": "a" * 64, "model.vmfb": "b" * 64},
    "profile": None, "folders": [], "variants": None,
}  # fmt: skip


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        ({"files": {"/etc/passwd": "a" * 64}}, 'files["/etc/passwd"] must be a path inside'),
        (
            {"files": {"inputs.npz": "short"}},
            'files["inputs.npz"] must have at least 64 characters',
        ),
        ({"round_trip": True}, "round_trip must be an integer, got true"),
        ({"devices": []}, "devices must hold at least 1 items"),
        ({"inputs": "../inputs.npz"}, 'inputs must be a path inside the run folder, got "../'),
    ],
)
def test_a_tampered_device_manifest_is_refused_in_one_line(
    tmp_path: Path, edit: dict[str, object], problem: str
) -> None:
    path = tmp_path / "device_step.json"
    path.write_text(json.dumps({**DEVICE_MANIFEST, **edit}))
    with pytest.raises(IreetuneError) as excinfo:
        read_device_manifest(tmp_path)
    assert str(excinfo.value).startswith(f"{path}: {problem}")


def test_a_device_manifest_as_written_reads_back(tmp_path: Path) -> None:
    (tmp_path / "device_step.json").write_text(json.dumps(DEVICE_MANIFEST))
    manifest = read_device_manifest(tmp_path)
    assert (manifest.inputs, manifest.default_model, manifest.devices) == (
        "inputs.npz",
        "model.vmfb",
        ("local-task",),
    )
