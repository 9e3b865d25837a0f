"""The benchmark runner with the real runtime worker, and with injected crashes and hangs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ireetune.benchmark.runner import (
    WORKER_COMMAND_VARIABLE,
    BenchmarkJob,
    BenchmarkStatus,
    run_benchmarks,
)
from ireetune.benchmark.stats import compute_stats
from tests.conftest import CPU_FLAGS, IREE_COMPILE

FAULT_WORKER = str(Path(__file__).with_name("fault_worker.py"))


@pytest.fixture(scope="module")
def benchmark_binary(matmul_benchmark: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    output = tmp_path_factory.mktemp("bin") / "matmul.vmfb"
    subprocess.run(
        [
            IREE_COMPILE,
            str(matmul_benchmark),
            *CPU_FLAGS,
            "--compile-from=executable-sources",
            "-o",
            str(output),
        ],
        check=True,
        capture_output=True,
    )
    return output


def test_real_worker_times_every_job_in_order(benchmark_binary: Path) -> None:
    jobs = [
        BenchmarkJob(0, benchmark_binary),
        BenchmarkJob(3, benchmark_binary),
        BenchmarkJob(0, benchmark_binary),
    ]
    outcomes = list(run_benchmarks(jobs, "local-task", repetitions=3, batch=4, timeout_s=60))
    assert [(o.candidate_id, o.status, len(o.times_ms), o.batch) for o in outcomes] == [
        (0, BenchmarkStatus.MEASURED, 3, 4),
        (3, BenchmarkStatus.MEASURED, 3, 4),
        (0, BenchmarkStatus.MEASURED, 3, 4),
    ]
    assert all(t > 0 for o in outcomes for t in o.times_ms)


def test_worker_picks_a_batch_when_asked(benchmark_binary: Path) -> None:
    (outcome,) = run_benchmarks(
        [BenchmarkJob(0, benchmark_binary)], "local-task", 2, 0, 60, min_repetition_s=0.02
    )
    assert outcome.status is BenchmarkStatus.MEASURED
    # A dispatch of microseconds needs many calls per repetition to last 20 ms; the batch doubles
    # from 1. (Timed repetitions are not compared with 20 ms: on a loaded machine the call that
    # chose the batch can be far slower than the ones timed after it.)
    assert outcome.batch > 1 and outcome.batch & (outcome.batch - 1) == 0


def test_unloadable_binary_fails_alone(benchmark_binary: Path, tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.vmfb"
    garbage.write_bytes(b"not a module")
    outcomes = list(
        run_benchmarks(
            [BenchmarkJob(1, garbage), BenchmarkJob(2, benchmark_binary)], "local-task", 2, 2, 60
        )
    )
    assert [(o.candidate_id, o.status) for o in outcomes] == [
        (1, BenchmarkStatus.FAILED),
        (2, BenchmarkStatus.MEASURED),
    ]


def test_crashing_candidate_is_recorded_and_the_rest_still_run(
    benchmark_binary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(WORKER_COMMAND_VARIABLE, json.dumps([sys.executable, FAULT_WORKER]))
    monkeypatch.setenv("IREETUNE_FAULT_CRASH", "2")
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parents[1]))
    jobs = [BenchmarkJob(i, benchmark_binary) for i in (1, 2, 3)]
    outcomes = list(run_benchmarks(jobs, "local-task", 2, 2, 60))
    assert [(o.candidate_id, o.status) for o in outcomes] == [
        (1, BenchmarkStatus.MEASURED),
        (2, BenchmarkStatus.CRASHED),
        (3, BenchmarkStatus.MEASURED),
    ]
    assert "benchmark process died while running (exit -11)" in outcomes[1].reason


def test_hanging_candidate_times_out_and_the_rest_still_run(
    benchmark_binary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(WORKER_COMMAND_VARIABLE, json.dumps([sys.executable, FAULT_WORKER]))
    monkeypatch.setenv("IREETUNE_FAULT_HANG", "1")
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parents[1]))
    jobs = [BenchmarkJob(i, benchmark_binary) for i in (1, 2)]
    outcomes = list(run_benchmarks(jobs, "local-task", 2, 2, timeout_s=3))
    assert [(o.candidate_id, o.status) for o in outcomes] == [
        (1, BenchmarkStatus.TIMED_OUT),
        (2, BenchmarkStatus.MEASURED),
    ]


def test_device_fault_fails_its_candidate_and_the_next_gets_a_fresh_worker(
    benchmark_binary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(WORKER_COMMAND_VARIABLE, json.dumps([sys.executable, FAULT_WORKER]))
    monkeypatch.setenv("IREETUNE_FAULT_DEVICE", "2")
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parents[1]))
    jobs = [BenchmarkJob(i, benchmark_binary) for i in (1, 2, 3, 4)]
    outcomes = list(run_benchmarks(jobs, "local-task", 2, 2, 60))
    assert [(o.candidate_id, o.status) for o in outcomes] == [
        (1, BenchmarkStatus.MEASURED),
        (2, BenchmarkStatus.FAILED),
        (3, BenchmarkStatus.MEASURED),
        (4, BenchmarkStatus.MEASURED),
    ]
    assert outcomes[1].reason == (
        "RuntimeError: injected device fault: an illegal memory access was encountered"
    )


def test_unknown_device_fails_every_job(benchmark_binary: Path) -> None:
    outcomes = list(
        run_benchmarks(
            [BenchmarkJob(1, benchmark_binary), BenchmarkJob(2, benchmark_binary)],
            "nosuchdriver://0",
            2,
            2,
            30,
        )
    )
    assert [(o.candidate_id, o.status) for o in outcomes] == [
        (1, BenchmarkStatus.DEVICE_ERROR),
        (2, BenchmarkStatus.DEVICE_ERROR),
    ]


def test_stats_use_the_median_and_a_robust_noise() -> None:
    stats = compute_stats([1.0, 1.1, 0.9, 1.0, 5.0])
    assert (stats.median_ms, stats.min_ms, stats.max_ms, stats.count) == (1.0, 0.9, 5.0, 5)
    assert stats.spread == pytest.approx(4.1)
    assert stats.noise == pytest.approx(1.4826 * 0.1)
