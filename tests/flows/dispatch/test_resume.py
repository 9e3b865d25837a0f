"""Kill a real tuning process with SIGKILL at several points; the same command then resumes.

Nothing measured before the kill is measured again (its row keeps its session and timings) and
nothing measured is lost. The fault worker only adds a delay before each benchmark job, so that
the kill lands inside the benchmark stage; everything else is the real tuner.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ireetune.core.records import TIMED_STATUSES, status_values
from tests.conftest import FAST_RUN_ARGS, TESTS

MEASURED_STATUSES = status_values(TIMED_STATUSES)


def _command(benchmark: Path, output: Path, database: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "ireetune.cli",
        "tune-dispatch",
        str(benchmark),
        "--num-candidates",
        "6",
        "--output-dir",
        str(output),
        "--db",
        str(database),
        *FAST_RUN_ARGS,
        "--jobs",
        "1",
    ]


def _rows(database: Path) -> dict[str, tuple[str, str, str]]:
    if not database.exists():
        return {}
    connection = sqlite3.connect(database, timeout=30)
    try:
        rows = connection.execute(
            "SELECT config, status, session, times_ms FROM results"
        ).fetchall()
    except sqlite3.OperationalError:
        return {}
    finally:
        connection.close()
    return {config: (status, session, times) for config, status, session, times in rows}


def _measured(rows: dict[str, tuple[str, str, str]]) -> dict[str, tuple[str, str, str]]:
    return {c: r for c, r in rows.items() if r[0] in MEASURED_STATUSES and c != "null"}


@pytest.mark.parametrize(
    ("moment", "ready"),
    [
        ("while compiling", lambda rows: len(rows) >= 2),
        ("while benchmarking", lambda rows: len(_measured(rows)) >= 2),
        ("while confirming and verifying", lambda rows: len(_measured(rows)) >= 5),
    ],
)
def test_killed_run_resumes_without_losing_or_remeasuring(
    moment: str, ready: object, matmul_benchmark: Path, tmp_path: Path
) -> None:
    database = tmp_path / "resume.sqlite"
    environment = {
        **os.environ,
        "IREETUNE_BENCHMARK_WORKER": json.dumps([sys.executable, str(TESTS / "fault_worker.py")]),
        "IREETUNE_FAULT_DELAY": "0.25",
        "PYTHONPATH": str(TESTS.parent),
        # A killed run cannot remove its scratch folders: they stay in the test's folder.
        "TMPDIR": str(tmp_path),
    }
    process = subprocess.Popen(
        _command(matmul_benchmark, tmp_path / "first", database),
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    assert callable(ready)
    while not ready(_rows(database)):
        assert process.poll() is None, f"the run ended before the kill point ({moment})"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    before = _measured(_rows(database))

    resumed = subprocess.run(
        _command(matmul_benchmark, tmp_path / "second", database),
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr
    after = _rows(database)
    for config, (_status, session, times) in before.items():
        assert after[config][1:] == (session, times), f"{config} was measured again ({moment})"
    (run_dir,) = (tmp_path / "second").iterdir()
    results = json.loads((run_dir / "results.json").read_text())
    restored = results.get("restored_from_database", [])
    assert len(restored) >= len(before)
    final = [c["status"] for c in results["candidates"]]
    assert "generated" not in final and "compiled" not in final


def test_killed_during_the_checks_resumes_into_the_same_verdict(
    matmul_benchmark: Path, tmp_path: Path
) -> None:
    """The campaign is stored before the checks run; a kill there loses only the verdicts.

    The state a kill during the checks leaves (every timing stored, no verdict) is made from a
    finished run's database; the resumed run must reach the finished run's verdict, and measure
    nothing again.
    """
    database = tmp_path / "done.sqlite"
    command = [*_command(matmul_benchmark, tmp_path / "first", database)]
    command[command.index("--confirm-rounds") + 1] = "3"
    finished = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr
    (first_dir,) = (tmp_path / "first").iterdir()
    first = json.loads((first_dir / "results.json").read_text())

    connection = sqlite3.connect(database)
    connection.execute(
        "UPDATE results SET verdict = '', rule = '', outputs_match = NULL, "
        "real_input_speedup = NULL, real_input_low = NULL, real_input_high = NULL, "
        "status = CASE WHEN status IN ('verified', 'wrong') THEN 'measured' ELSE status END"
    )
    connection.commit()
    connection.close()
    before = _measured(_rows(database))

    command[command.index("--output-dir") + 1] = str(tmp_path / "second")
    resumed = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    (second_dir,) = (tmp_path / "second").iterdir()
    second = json.loads((second_dir / "results.json").read_text())
    after = _rows(database)
    for config, (_status, session, times) in before.items():
        assert after[config][1:] == (session, times), f"{config} was measured again"
    assert "resumed" in " ".join(second["notes"])
    assert second["decision"]["winner"] == first["decision"]["winner"]
    assert second["decision"].get("speedup") == first["decision"].get("speedup")
    assert {c: j["verdict"] for c, j in second["decision"]["judgements"].items()} == {
        c: j["verdict"] for c, j in first["decision"]["judgements"].items()
    }


# Resumed from the run folder (`ireetune continue RUN_DIR`, flows/dispatch/resume.py): no database, so
# nothing but the folder carries the killed run's work.


def _folder_command(benchmark: Path, output: Path) -> list[str]:
    command = _command(benchmark, output, output / "unused.sqlite")
    at = command.index("--db")
    return [*command[:at], "--no-db", *command[at + 2 :], "--seed", "3", "--no-progress"]


def _tune_whole(benchmark: Path, output: Path) -> Path:
    """Run the same tuning to its end, not killed, in `output`; return its run folder."""
    whole = subprocess.run(
        _folder_command(benchmark, output),
        env={**os.environ, "PYTHONPATH": str(TESTS.parent)}, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert whole.returncode == 0, whole.stderr
    (run_dir,) = output.iterdir()
    return run_dir


def _saved_stage(output: Path) -> str | None:
    for results in output.glob("*/results.json"):
        try:
            done = json.loads(results.read_text()).get("progress", {}).get("done", [])
            return done[-1] if done else None
        except ValueError:
            return None
    return None


def _compiled(run_dir: Path) -> tuple[list[tuple[object, ...]], list[list[int]]]:
    """Every candidate as compiled: its configuration and spec, and which candidates compiled
    to the same binary (a binary embeds its folder's path, so hashes differ between folders)."""
    results = json.loads((run_dir / "results.json").read_text())
    candidates = results["candidates"]
    specs = [
        (c["candidate_id"], json.dumps(c["knobs"], sort_keys=True), (run_dir / c["spec_path"]).read_text() if c["spec_path"] else "")
        for c in candidates
    ]  # fmt: skip
    alike: dict[str, list[int]] = {}
    for c in candidates:
        assert c["binary_hash"] or c["status"] == "failed"
        alike.setdefault(c["binary_hash"], []).append(c["candidate_id"])
    return specs, sorted(alike.values())


@pytest.mark.parametrize("killed_after", ["specs", "compile"])
def test_run_killed_after_a_stage_resumes_from_its_folder(
    killed_after: str, matmul_benchmark: Path, tmp_path: Path
) -> None:
    environment = {
        **os.environ,
        "IREETUNE_BENCHMARK_WORKER": json.dumps([sys.executable, str(TESTS / "fault_worker.py")]),
        "IREETUNE_FAULT_DELAY": "0.5",
        "PYTHONPATH": str(TESTS.parent),
        # A killed run cannot remove its scratch folders: they stay in the test's folder.
        "TMPDIR": str(tmp_path),
    }
    killed = tmp_path / "killed"
    process = subprocess.Popen(
        _folder_command(matmul_benchmark, killed), env=environment,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while _saved_stage(killed) != killed_after:
        assert process.poll() is None, f"the run ended before its {killed_after} stage was saved"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    (run_dir,) = killed.iterdir()
    saved = json.loads((run_dir / "results.json").read_text())
    assert saved["outcome"] == "running" and saved["progress"]["done"][-1] == killed_after
    binaries = {p.name: p.stat().st_mtime_ns for p in (run_dir / "binaries").iterdir()}

    resumed = subprocess.run(
        [sys.executable, "-m", "ireetune.cli", "continue", str(run_dir)],
        env=environment, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    results = json.loads((run_dir / "results.json").read_text())
    assert results["progress"]["done"][-1] == "decide" and results["outcome"] in (
        "improved",
        "no-improvement",
    )
    assert (run_dir / "best_spec.mlir").exists() == (results["outcome"] == "improved")
    if killed_after == "compile":
        # Continued at measure: nothing was compiled again.
        assert {p.name: p.stat().st_mtime_ns for p in (run_dir / "binaries").iterdir()} == binaries

    whole_dir = _tune_whole(matmul_benchmark, tmp_path / "whole")
    assert _compiled(run_dir) == _compiled(whole_dir)
    statuses = {c["status"] for c in results["candidates"]}
    assert not statuses & {"generated", "compiled"}


def test_run_saved_after_measuring_resumes_with_its_timings(
    matmul_benchmark: Path, tmp_path: Path
) -> None:
    """A run whose measure stage was saved (its folder as a kill during the checks leaves it:
    made from a finished run's) is checked and decided again with the timings it took: the
    candidates are not measured again, the leaders are confirmed again beside the default."""
    run_dir = _tune_whole(matmul_benchmark, tmp_path / "runs")
    saved = json.loads((run_dir / "results.json").read_text())
    saved.update(progress={"done": ["specs", "compile", "measure"]}, outcome="running")
    (run_dir / "results.json").write_text(json.dumps(saved))
    (run_dir / "best_spec.mlir").unlink(missing_ok=True)
    timed = {
        c["candidate_id"]: c["times_ms"]
        for c in saved["candidates"]
        if c["candidate_id"] and c["status"] in MEASURED_STATUSES
    }
    assert timed

    resumed = subprocess.run(
        [sys.executable, "-m", "ireetune.cli", "continue", str(run_dir)],
        env={**os.environ, "PYTHONPATH": str(TESTS.parent)}, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    results = json.loads((run_dir / "results.json").read_text())
    assert results["progress"]["done"][-1] == "decide" and results["outcome"] in (
        "improved",
        "no-improvement",
    )
    assert (run_dir / "best_spec.mlir").exists() == (results["outcome"] == "improved")
    after = {c["candidate_id"]: c for c in results["candidates"]}
    # The first pass is not timed again; only the leaders are confirmed again, side by side
    # with the default timed anew (the facts are not saved).
    retimed = {cid for cid, times in timed.items() if after[cid]["times_ms"] != times}
    assert retimed and all(after[cid]["confirmed"] for cid in retimed)
    assert retimed < set(timed) or len(timed) <= 4  # --confirm-top is 4: the rest keep theirs.
