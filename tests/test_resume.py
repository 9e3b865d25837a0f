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

TESTS = Path(__file__).parent


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
        "--repetitions",
        "2",
        "--confirm-rounds",
        "1",
        "--min-repetition-time",
        "0.005",
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
    return {
        c: r for c, r in rows.items() if r[0] in ("measured", "verified", "wrong") and c != "null"
    }


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
