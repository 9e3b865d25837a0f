"""The split flow on the CPU: compile here, benchmark with the runtime only, finish here.

The benchmark step runs in a subprocess whose imports of `iree.compiler` and `z3` raise, so any
use of the compiler or the solver on that path (its worker processes included) fails the test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ireetune.benchmark.campaign import CampaignSettings, run_campaign
from ireetune.benchmark.runner import WORKER_COMMAND_VARIABLE, BenchmarkJob, BenchmarkStatus
from ireetune.core.errors import IreetuneError
from ireetune.core.records import TIMED_STATUSES, CandidateStatus
from ireetune.executor import LocalExecutor
from ireetune.flows.dispatch.options import References, StopAfter
from ireetune.flows.dispatch.tuner import TuneOptions, tune_dispatch
from ireetune.flows.handoff.benchmark_folder import benchmark_folder
from ireetune.flows.handoff.finish import finish_run, read_run_record
from ireetune.flows.handoff.manifest import (
    MANIFEST_NAME,
    RESULTS_NAME,
    check_results_match_manifest,
    hash_manifest,
    read_manifest,
)
from ireetune.verify.compare import CONFIG_NOT_APPLIED
from tests.conftest import (
    MATMUL_MODEL,
    REPOSITORY,
    TEST_TARGET,
    TESTS,
    compile_matmul_for_device_host,
)

MATMUL = MATMUL_MODEL

IMPORT_BLOCKER = '''
import sys


class _CompilerAndSolverBlocker:
    """Fail any import of what the GPU host's install lacks (docs/gpu.md): the IREE compiler,
    z3, rich and onnx; it has only iree-base-runtime and numpy."""

    blocked = ("z3", "iree.compiler", "rich", "onnx")

    def find_spec(self, name, path=None, target=None):
        if name in self.blocked or name.startswith(tuple(f"{b}." for b in self.blocked)):
            raise ImportError(f"runtime-only path imported {name}")
        return None


sys.meta_path.insert(0, _CompilerAndSolverBlocker())
'''


@pytest.fixture(scope="module")
def compiled_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_matmul_for_device_host(
        tmp_path_factory.mktemp("handoff"), num_candidates=3, repetitions=3,
        min_repetition_s=0.005, confirm_rounds=1, confirm_top=2, references=References.ALL,
    )  # fmt: skip


def runtime_only_environment(tmp_path: Path) -> dict[str, str]:
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(IMPORT_BLOCKER)
    repository = REPOSITORY
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker), str(repository)])}


def test_blocker_stops_compiler_imports(tmp_path: Path) -> None:
    environment = runtime_only_environment(tmp_path)
    for module in ("iree.compiler", "z3", "rich", "onnx"):
        completed = subprocess.run(
            [sys.executable, "-c", f"import {module}"],
            env=environment,
            capture_output=True,
            text=True,
            check=False,
        )
        assert completed.returncode != 0 and "runtime-only path imported" in completed.stderr


def test_folder_is_benchmarked_without_compiler_then_finished(
    compiled_folder: Path, tmp_path: Path
) -> None:
    manifest = read_manifest(compiled_folder)
    assert manifest.target == "cpu" and len(manifest.candidates) >= 1
    # Through the real entry point: the command line must not import the compiler either.
    completed = subprocess.run(
        [sys.executable, "-m", "ireetune.cli", "benchmark-folder", str(compiled_folder), "--devices", "local-task"],
        env=runtime_only_environment(tmp_path), capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout == (
        f"results: {compiled_folder / RESULTS_NAME}\nnext: ireetune continue {compiled_folder}\n"
    )
    results = json.loads((compiled_folder / RESULTS_NAME).read_text())
    assert results["manifest_sha256"] == hash_manifest(compiled_folder)
    check_results_match_manifest(compiled_folder)
    measured = [c for c in results["campaign"]["candidates"] if c["status"] == "measured"]
    assert len(measured) == len(manifest.candidates)
    assert [b["device"] for b in results["campaign"]["baselines"]] == ["local-task"]

    result = finish_run(compiled_folder)
    statuses = {r.status for r in result.records[1:]}
    assert statuses <= TIMED_STATUSES
    assert result.records[0].status is CandidateStatus.MEASURED and result.baseline_ms > 0
    outcome = json.loads((compiled_folder / "results.json").read_text())["outcome"]
    assert outcome == ("improved" if result.best is not None else "no-improvement")
    assert (compiled_folder / "best_spec.mlir").exists() == (result.best is not None)
    verdicts = results["verification"]["verdicts"]
    assert all(v["status"] in ("verified", "wrong", "unverified") for v in verdicts.values())


def test_finish_needs_benchmark_results(tmp_path: Path) -> None:
    with pytest.raises(IreetuneError) as excinfo:
        finish_run(tmp_path)
    assert "handoff.json" in str(excinfo.value)


def test_campaign_spreads_over_devices_and_survives_a_broken_one(compiled_folder: Path) -> None:
    manifest = read_manifest(compiled_folder)
    jobs = [BenchmarkJob(c.candidate_id, compiled_folder / c.vmfb) for c in manifest.candidates] * 2
    jobs = [BenchmarkJob(i + 1, job.vmfb_path) for i, job in enumerate(jobs)]
    settings = CampaignSettings(
        repetitions=2, min_repetition_s=0.002, confirm_top=1, confirm_rounds=1
    )
    result = run_campaign(
        LocalExecutor(),
        compiled_folder / manifest.baseline.vmfb,
        jobs,
        ["local-task", "local-sync", "nowhere://0"],
        settings,
    )
    by_device: dict[str, set[BenchmarkStatus]] = {}
    for measurement in result.candidates.values():
        by_device.setdefault(measurement.device, set()).add(measurement.status)
    assert by_device == {
        "local-task": {BenchmarkStatus.MEASURED},
        "local-sync": {BenchmarkStatus.MEASURED},
        "nowhere://0": {BenchmarkStatus.DEVICE_ERROR},
    }
    assert result.baselines["nowhere://0"].error
    assert not result.baselines["local-sync"].error and result.baselines["local-sync"].before_ms


def _copy_folder(folder: Path, destination: Path) -> Path:
    shutil.copytree(folder, destination)
    return destination


def test_results_of_another_manifest_are_refused(compiled_folder: Path, tmp_path: Path) -> None:
    folder = _copy_folder(compiled_folder, tmp_path / "run")
    (folder / RESULTS_NAME).write_text(json.dumps({"manifest_sha256": hash_manifest(folder)}))
    check_results_match_manifest(folder)
    manifest = json.loads((folder / MANIFEST_NAME).read_text())
    manifest["candidates"] = manifest["candidates"][:1]
    (folder / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(IreetuneError) as excinfo:
        check_results_match_manifest(folder)
    assert "was measured from another handoff.json" in str(excinfo.value)


def test_results_naming_no_manifest_are_refused(compiled_folder: Path, tmp_path: Path) -> None:
    folder = _copy_folder(compiled_folder, tmp_path / "run")
    (folder / RESULTS_NAME).write_text(json.dumps({"campaign": {}}))
    with pytest.raises(IreetuneError) as excinfo:
        check_results_match_manifest(folder)
    assert "names no manifest" in str(excinfo.value)


def test_benchmark_timeout_is_carried_through_the_folder(
    compiled_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _copy_folder(compiled_folder, tmp_path / "run")
    manifest = json.loads((folder / MANIFEST_NAME).read_text())
    manifest["benchmark_timeout_s"] = 1.5
    (folder / MANIFEST_NAME).write_text(json.dumps(manifest))
    hanging = manifest["candidates"][0]["candidate_id"]
    tests = TESTS
    monkeypatch.setenv(
        WORKER_COMMAND_VARIABLE, json.dumps([sys.executable, str(tests / "fault_worker.py")])
    )
    monkeypatch.setenv("IREETUNE_FAULT_HANG", str(hanging))
    monkeypatch.setenv("PYTHONPATH", str(tests.parent))
    results = json.loads(benchmark_folder(folder, ["local-task"]).read_text())
    (reason,) = [
        c["reason"] for c in results["campaign"]["candidates"] if c["candidate_id"] == hanging
    ]
    waited = float(re.search(r"no result within ([0-9.]+) s", reason).group(1))
    assert 1.5 <= waited < 10.0


def test_compile_step_writes_the_benchmark_timeout_into_the_manifest(tmp_path: Path) -> None:
    run_dir = compile_matmul_for_device_host(
        tmp_path, num_candidates=1, min_benchmark_timeout_s=2.5
    )
    assert read_manifest(run_dir).benchmark_timeout_s == 2.5


def test_deferred_references_are_compiled_for_the_leaders_only(tmp_path: Path) -> None:
    # A threshold far below 1x makes every confirmed candidate a contender (a leader).
    run_dir = compile_matmul_for_device_host(
        tmp_path, num_candidates=4, repetitions=3, min_repetition_s=0.005, confirm_rounds=2,
        confirm_top=2, threshold=0.01,
    )  # fmt: skip
    # Compiled once: the dispatch benchmarks, no reference program.
    assert read_manifest(run_dir).references_deferred
    assert sorted(p.name for p in (run_dir / "verify").glob("*.vmfb")) == []

    runtime_only = runtime_only_environment(tmp_path)

    def command(*arguments: str) -> subprocess.CompletedProcess[str]:
        completed = subprocess.run(
            [sys.executable, "-m", "ireetune.cli", *arguments, str(run_dir)],
            env=runtime_only if arguments[0] == "benchmark-folder" else None,
            capture_output=True, text=True, check=False, timeout=600,
        )  # fmt: skip
        assert completed.returncode == 0, completed.stderr
        return completed

    first = command("benchmark-folder", "--devices", "local-task")
    results = json.loads((run_dir / RESULTS_NAME).read_text())
    contenders = results["contenders"]
    assert contenders and results["verification"]["pending"] == [0, *contenders]
    assert "then this command again to check their outputs" in first.stdout
    with pytest.raises(IreetuneError) as excinfo:
        finish_run(run_dir)
    assert "not checked yet" in str(excinfo.value)

    compiled = command("finish")
    assert "compiled the reference programs of candidates" in compiled.stdout
    references = sorted(p.name for p in (run_dir / "verify").glob("reference_*.vmfb"))
    assert references == sorted(f"reference_{cid}.vmfb" for cid in (0, *contenders))

    command("benchmark-folder")
    verified = json.loads((run_dir / RESULTS_NAME).read_text())
    assert "pending" not in verified["verification"]
    assert verified["campaign"] == results["campaign"]  # Checked, not measured again.
    assert sorted(map(int, verified["verification"]["verdicts"])) == sorted(contenders)
    result = finish_run(run_dir)
    assert {r.candidate_id for r in result.records if r.outputs_match is not None} == set(
        contenders
    )


def test_checks_cut_short_are_saved_refused_by_finish_and_checked_without_measuring_again(
    compiled_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """benchmark_results.json is saved after every stage with the stage it reached: a pass
    stopped during the output checks leaves its timings ("measure"), which `finish` refuses and
    the next `benchmark-folder` checks without measuring again."""
    import ireetune.flows.handoff.benchmark_folder as folder_module

    folder = _copy_folder(compiled_folder, tmp_path / "run")
    (folder / RESULTS_NAME).unlink(missing_ok=True)

    def killed(run: object) -> None:
        raise KeyboardInterrupt  # As a kill during the checks: nothing after the stage runs.

    with monkeypatch.context() as patch:
        patch.setattr(folder_module, "check_folder_stage", killed)
        with pytest.raises(KeyboardInterrupt):
            benchmark_folder(folder, ["local-task"])
    measured = json.loads((folder / RESULTS_NAME).read_text())
    assert measured["stage"] == "measure" and measured["verification"] == {"verdicts": {}}
    assert measured["contenders"]
    with pytest.raises(IreetuneError) as excinfo:
        finish_run(folder)
    assert "the output checks did not complete (saved after the measure stage)" in str(
        excinfo.value
    )

    checked = json.loads(benchmark_folder(folder, ["local-task"]).read_text())
    assert checked["stage"] == "check"
    assert checked["campaign"] == measured["campaign"]  # Checked, not measured again.
    assert sorted(map(int, checked["verification"]["verdicts"])) == sorted(measured["contenders"])
    result = finish_run(folder)
    assert {r.candidate_id for r in result.records if r.outputs_match is not None} == set(
        measured["contenders"]
    )


def test_finishing_again_keeps_no_checks_of_the_earlier_verdict(
    compiled_folder: Path, tmp_path: Path
) -> None:
    """A folder finished before carries that verdict's checks in results.json; finishing it again
    after another measurement reaches its verdict afresh, so only this pass's contenders carry
    output checks and verdicts (CI once saw a candidate checked by an earlier finish)."""
    folder = _copy_folder(compiled_folder, tmp_path / "run")
    (folder / RESULTS_NAME).unlink(missing_ok=True)
    contenders = json.loads(benchmark_folder(folder, ["local-task"]).read_text())["contenders"]
    run_path = folder / "results.json"
    run_data = json.loads(run_path.read_text())
    for record in run_data["candidates"]:
        if record["candidate_id"] not in contenders:  # As an earlier finish left them.
            record.update(outputs_match=True, verdict="beaten", max_abs_error=0.5)
    run_path.write_text(json.dumps(run_data))
    result = finish_run(folder)
    assert {r.candidate_id for r in result.records if r.outputs_match is not None} == set(
        contenders
    )
    stale = [r.candidate_id for r in result.records if r.candidate_id not in contenders]
    assert [(cid, result.records[cid].verdict) for cid in stale] == [(cid, "") for cid in stale]


@pytest.fixture(scope="module")
def data_tiled_folder(matmul_benchmark: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder compiled under `--iree-opt-data-tiling` (and the MATERIALIZE_FIRST the llvm-cpu
    target adds), measured and checked: every candidate's reference program compiles to the
    default's own binary (compiled alone, the root op is data-tiled before its configuration
    applies, and the matmul configuration matches nothing; before issue 39 each failed to
    compile; test_dispatch_run_stages.py), so no contender's outputs can be compared."""
    result = tune_dispatch(
        TuneOptions(
            input_path=matmul_benchmark, target=TEST_TARGET, num_candidates=3,
            output_dir=tmp_path_factory.mktemp("data_tiled") / "runs", repetitions=3,
            min_repetition_s=0.005, confirm_rounds=1, stop_after=StopAfter.COMPILE,
            use_database=False, show_progress=False, references=References.ALL,
            extra_flags=("--iree-opt-data-tiling",),
        )
    )  # fmt: skip
    benchmark_folder(result.run_dir, ["local-task"])
    return result.run_dir


def _judged(folder: Path) -> dict[int, dict[str, object]]:
    """Return results.json's record of every candidate the decision judged."""
    info = json.loads((folder / "results.json").read_text())
    judged = {int(cid) for cid in info["decision"]["judgements"]}
    return {c["candidate_id"]: c for c in info["candidates"] if c["candidate_id"] in judged}


def test_finish_calls_contenders_whose_reference_ignored_the_config_unverified(
    data_tiled_folder: Path, tmp_path: Path
) -> None:
    folder = _copy_folder(data_tiled_folder, tmp_path / "run")
    verdicts = json.loads((folder / RESULTS_NAME).read_text())["verification"]["verdicts"]
    contenders = sorted(int(cid) for cid in verdicts)
    assert contenders, "benchmark-folder checked no contender"
    assert verdicts == {
        str(cid): {"status": "unverified", "reason": CONFIG_NOT_APPLIED} for cid in contenders
    }
    result = finish_run(folder)
    not_built = f"outputs not compared with the default's: {CONFIG_NOT_APPLIED}"
    assert {r.candidate_id: (r.status, r.outputs_match, r.reason) for r in result.records if r.verdict} == {
        cid: (CandidateStatus.UNVERIFIED, None, not_built) for cid in contenders
    }  # fmt: skip
    assert {cid: c["status"] for cid, c in _judged(folder).items()} == dict.fromkeys(
        contenders, "unverified"
    )
    csv_statuses = {
        int(line.split(",")[0]): line.split(",")[2]
        for line in (folder / "candidates.csv").read_text().splitlines()[1:]
    }
    assert {cid: csv_statuses[cid] for cid in contenders} == dict.fromkeys(contenders, "unverified")
    assert "wrong" not in csv_statuses.values()
    summary = (folder / "summary.txt").read_text()
    assert f"unverified: {len(contenders)}" in summary.splitlines()[1]
    assert "wrong" not in summary
    ids = ", ".join(map(str, contenders))
    assert f"unverified: candidates {ids} were not picked: {not_built}\n" in summary
    assert result.best is None and not (folder / "best_spec.mlir").exists()


def test_older_files_that_say_wrong_still_read_as_wrong(
    data_tiled_folder: Path, tmp_path: Path
) -> None:
    """An older benchmark-folder wrote `wrong` for a reference that did not build, and an older
    finish wrote `wrong` into results.json: both are read as they were written."""
    folder = _copy_folder(data_tiled_folder, tmp_path / "run")
    results_path = folder / RESULTS_NAME
    results = json.loads(results_path.read_text())
    verdicts = results["verification"]["verdicts"]
    for verdict in verdicts.values():
        verdict["status"] = "wrong"
    results_path.write_text(json.dumps(results))
    contenders = sorted(int(cid) for cid in verdicts)
    result = finish_run(folder)
    assert {r.candidate_id: (r.status, r.outputs_match) for r in result.records if r.verdict} == {
        cid: (CandidateStatus.WRONG, False) for cid in contenders
    }
    assert f"wrong: {len(contenders)}" in (folder / "summary.txt").read_text().splitlines()[1]
    # The results.json that finish wrote says `wrong`, as an older finish did: read back as such.
    _, records = read_run_record(folder)
    assert {cid: (records[cid].status, records[cid].outputs_match) for cid in contenders} == {
        cid: (CandidateStatus.WRONG, False) for cid in contenders
    }
    # The same folder's benchmark results rewritten as this version writes them: unverified.
    for verdict in verdicts.values():
        verdict["status"] = "unverified"
    results_path.write_text(json.dumps(results))
    again = finish_run(folder)
    assert {r.candidate_id: r.status for r in again.records if r.verdict} == dict.fromkeys(
        contenders, CandidateStatus.UNVERIFIED
    )
