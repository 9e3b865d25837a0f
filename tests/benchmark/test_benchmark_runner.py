"""The benchmark runner with the real runtime worker, and with injected crashes and hangs."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any

import pytest

from ireetune.benchmark.campaign import CampaignSettings, job_deadlines, run_campaign
from ireetune.benchmark.outcomes import apply_campaign
from ireetune.benchmark.runner import (
    WORKER_COMMAND_VARIABLE,
    BenchmarkJob,
    BenchmarkOutcome,
    BenchmarkSession,
    BenchmarkStatus,
    JobDeadlines,
    JobFeed,
)
from ireetune.benchmark.stats import compute_stats
from ireetune.benchmark.timing import TimingKind
from ireetune.core.records import CandidateRecord, CandidateStatus
from ireetune.executor import LocalExecutor
from tests.conftest import CPU_FLAGS, IREE_COMPILE, REPOSITORY, TESTS

FAULT_WORKER = str(TESTS / "fault_worker.py")


def run_benchmarks(
    jobs: Sequence[BenchmarkJob] | JobFeed, *args: Any, **kwargs: Any
) -> Generator[BenchmarkOutcome, None, None]:
    """Run one benchmark session on the local executor."""
    return LocalExecutor().run_benchmarks(BenchmarkSession(jobs, *args, **kwargs))


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
    # Four dispatches per timed call: the time says it was batched.
    assert {o.timing for o in outcomes} == {TimingKind.BATCHED}


def test_a_job_of_one_dispatch_per_call_is_host_timed(benchmark_binary: Path) -> None:
    jobs = [BenchmarkJob(0, benchmark_binary), BenchmarkJob(1, benchmark_binary, batch=1)]
    outcomes = list(run_benchmarks(jobs, "local-task", repetitions=2, batch=4, timeout_s=60))
    assert [(o.candidate_id, o.batch, o.timing) for o in outcomes] == [
        (0, 4, TimingKind.BATCHED),
        (1, 1, TimingKind.HOST),
    ]


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
    monkeypatch.setenv("PYTHONPATH", str(REPOSITORY))
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
    monkeypatch.setenv("PYTHONPATH", str(REPOSITORY))
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
    monkeypatch.setenv("PYTHONPATH", str(REPOSITORY))
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


def _copies(binary: Path, folder: Path, count: int) -> list[Path]:
    """Distinct paths of the same binary (the worker caches loaded binaries by path)."""
    paths = []
    for index in range(count):
        path = folder / f"{index}.vmfb"
        path.write_bytes(binary.read_bytes())
        paths.append(path)
    return paths


def _log_lines(path: Path) -> list[tuple[int, str, str]]:
    return [
        (int(pid), kind, what)
        for pid, kind, what in (line.split(" ", 2) for line in path.read_text().splitlines())
    ]


def test_one_worker_measures_a_streamed_batch_and_a_crash_costs_only_its_candidate(
    benchmark_binary: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(WORKER_COMMAND_VARIABLE, json.dumps([sys.executable, FAULT_WORKER]))
    monkeypatch.setenv("IREETUNE_FAULT_CRASH", "3")
    monkeypatch.setenv("IREETUNE_FAULT_LOG", str(tmp_path / "log.txt"))
    monkeypatch.setenv("PYTHONPATH", str(REPOSITORY))
    paths = _copies(benchmark_binary, tmp_path, 6)
    feed = JobFeed([BenchmarkJob(1, paths[1])])
    outcomes = run_benchmarks(feed, "local-task", 2, 2, 60)
    statuses = [next(outcomes)]
    # The rest arrive while the worker runs, as candidates do when they finish compiling.
    for candidate_id in (2, 3, 4, 5):
        feed.add(BenchmarkJob(candidate_id, paths[candidate_id]))
    feed.close()
    statuses += list(outcomes)
    assert [(o.candidate_id, o.status) for o in statuses] == [
        (1, BenchmarkStatus.MEASURED),
        (2, BenchmarkStatus.MEASURED),
        (3, BenchmarkStatus.CRASHED),
        (4, BenchmarkStatus.MEASURED),
        (5, BenchmarkStatus.MEASURED),
    ]
    jobs = [
        (pid, int(what)) for pid, kind, what in _log_lines(tmp_path / "log.txt") if kind == "job"
    ]
    # One worker (one open device) for the jobs before the crash, one fresh worker after it.
    pids = {pid for pid, _ in jobs}
    assert len(pids) == 2
    assert [cid for _, cid in jobs] == [1, 2, 3, 4, 5]
    assert jobs[0][0] == jobs[1][0] == jobs[2][0] != jobs[3][0] == jobs[4][0]


def test_one_session_per_device_keeps_the_leaders_loaded_for_the_confirmation(
    benchmark_binary: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(WORKER_COMMAND_VARIABLE, json.dumps([sys.executable, FAULT_WORKER]))
    monkeypatch.setenv("IREETUNE_FAULT_LOG", str(tmp_path / "log.txt"))
    monkeypatch.setenv("PYTHONPATH", str(REPOSITORY))
    paths = _copies(benchmark_binary, tmp_path, 4)
    # Identical binaries of a tiny dispatch: one scheduling hiccup in the first pass can look
    # `hopeless_factor` times slower and stop that candidate early (no leader then); this test is
    # about which binaries stay loaded, so no candidate may be stopped as hopeless.
    settings = CampaignSettings(
        repetitions=2, min_repetition_s=0.005, hopeless_factor=1000.0, confirm_top=2,
        confirm_rounds=3,
    )  # fmt: skip
    result = run_campaign(
        LocalExecutor(), BenchmarkJob(0, paths[0]), [BenchmarkJob(i, paths[i]) for i in (1, 2, 3)],
        ["local-task"], settings,
    )  # fmt: skip
    outcome = {
        cid: (m.status.value, m.stopped_early, m.confirmed) for cid, m in result.candidates.items()
    }
    assert sum(m.confirmed for m in result.candidates.values()) == 2, outcome
    log = _log_lines(tmp_path / "log.txt")
    # Baseline, three candidates, baseline, then three rounds of baseline and two leaders: all
    # in one worker, and every binary loaded once.
    assert len({pid for pid, kind, _ in log if kind == "job"}) == 1
    assert sum(1 for _, kind, _ in log if kind == "job") == 1 + 3 + 1 + 3 * 3
    loads = [what for _, kind, what in log if kind == "load"]
    assert sorted(loads) == sorted(map(str, paths))


def test_a_campaign_none_of_whose_candidates_reach_confirm_above_stops_after_its_first_pass(
    benchmark_binary: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The model flow asks a dispatch for the speedup its share needs to clear the model rule:
    # identical binaries (about 1x) never reach 1000x, so no round confirms a leader.
    monkeypatch.setenv(WORKER_COMMAND_VARIABLE, json.dumps([sys.executable, FAULT_WORKER]))
    monkeypatch.setenv("IREETUNE_FAULT_LOG", str(tmp_path / "log.txt"))
    monkeypatch.setenv("PYTHONPATH", str(REPOSITORY))
    paths = _copies(benchmark_binary, tmp_path, 3)
    settings = CampaignSettings(
        repetitions=2, min_repetition_s=0.005, hopeless_factor=1000.0, confirm_top=2,
        confirm_rounds=3, confirm_above=1000.0,
    )  # fmt: skip
    result = run_campaign(
        LocalExecutor(), BenchmarkJob(0, paths[0]), [BenchmarkJob(i, paths[i]) for i in (1, 2)],
        ["local-task"], settings,
    )  # fmt: skip
    assert [m.confirmed for m in result.candidates.values()] == [False, False]
    assert all(m.speedup is not None for m in result.candidates.values())
    # Baseline, two candidates, baseline: no confirmation round.
    assert sum(1 for _, kind, _ in _log_lines(tmp_path / "log.txt") if kind == "job") == 4


@pytest.mark.parametrize("bracket_every", [2, 0])
def test_a_slow_phase_of_the_machine_is_divided_out_by_the_baseline_timed_between_candidates(
    benchmark_binary: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bracket_every: int
) -> None:
    # Six copies of the default's binary: every candidate's true speedup is 1. The machine slows
    # 3x for the session's jobs 3 to 6. With the baseline timed before every second candidate
    # those are the baseline, candidates 3 and 4 and the baseline again, so each of the two is
    # divided by slow baselines on both sides; timed only before and after all candidates, the
    # slow phase makes candidates 3 to 6 read about 0.33x.
    monkeypatch.setenv(WORKER_COMMAND_VARIABLE, json.dumps([sys.executable, FAULT_WORKER]))
    monkeypatch.setenv("IREETUNE_FAULT_LOG", str(tmp_path / "log.txt"))
    monkeypatch.setenv("IREETUNE_FAULT_PHASE", "3 6 3.0")
    monkeypatch.setenv("PYTHONPATH", str(REPOSITORY))
    paths = _copies(benchmark_binary, tmp_path, 7)
    settings = CampaignSettings(
        repetitions=5, min_repetition_s=0.01, hopeless_factor=1000.0, confirm_rounds=0,
        bracket_every=bracket_every,
    )  # fmt: skip
    result = run_campaign(
        LocalExecutor(), BenchmarkJob(0, paths[0]),
        [BenchmarkJob(i, paths[i]) for i in range(1, 7)], ["local-task"], settings,
    )  # fmt: skip
    speedups = {cid: m.speedup for cid, m in result.candidates.items()}
    baseline = result.baselines["local-task"]
    jobs = [int(what) for _, kind, what in _log_lines(tmp_path / "log.txt") if kind == "job"]
    if bracket_every == 0:
        assert jobs == [0, 1, 2, 3, 4, 5, 6, 0] and baseline.brackets_ms == ()
        assert all(speedups[cid] < 0.5 for cid in (3, 4, 5, 6)), speedups  # type: ignore[operator]
        return
    assert jobs == [0, 1, 2, 0, 3, 4, 0, 5, 6, 0]
    assert len(baseline.brackets_ms) == 2
    # Each candidate is divided by the baseline timings on either side of it.
    first, second = baseline.brackets_ms
    references = {cid: m.reference_ms for cid, m in result.candidates.items()}
    assert references == {
        1: baseline.before_ms + first, 2: baseline.before_ms + first,
        3: first + second, 4: first + second,
        5: second + baseline.after_ms, 6: second + baseline.after_ms,
    }  # fmt: skip
    assert all(0.7 < speedups[cid] < 1.4 for cid in (3, 4)), speedups  # type: ignore[operator]
    # The run's results say how the baseline moved under the first pass, in the order timed.
    records = {cid: CandidateRecord(cid, None, CandidateStatus.COMPILED) for cid in range(7)}
    info: dict[str, Any] = {}
    apply_campaign(records, result, info)
    assert info["baseline_first_pass_ms"] == {
        "local-task": [
            compute_stats(t).median_ms
            for t in (baseline.before_ms, first, second, baseline.after_ms)
        ]
    }


def test_the_host_brackets_every_fourth_candidate_and_an_accelerator_times_before_and_after() -> (
    None
):
    settings = CampaignSettings()
    assert settings.for_device("local-task").bracket_every == 4
    assert settings.for_device("cuda://0").bracket_every == 0
    assert CampaignSettings(bracket_every=0).for_device("local-task").bracket_every == 0


def test_prewarm_loads_the_coming_binaries_in_a_process_of_its_own(
    benchmark_binary: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(WORKER_COMMAND_VARIABLE, json.dumps([sys.executable, FAULT_WORKER]))
    monkeypatch.setenv("IREETUNE_FAULT_LOG", str(tmp_path / "log.txt"))
    # Slow jobs give the prewarm process (which is stopped with the session) time to start.
    monkeypatch.setenv("IREETUNE_FAULT_DELAY", "1.0")
    monkeypatch.setenv("PYTHONPATH", str(REPOSITORY))
    paths = _copies(benchmark_binary, tmp_path, 3)
    jobs = [BenchmarkJob(i, path) for i, path in enumerate(paths)]
    outcomes = list(run_benchmarks(jobs, "local-task", 2, 2, 60, prewarm=1))
    assert [o.status for o in outcomes] == [BenchmarkStatus.MEASURED] * 3
    log = _log_lines(tmp_path / "log.txt")
    worker_pid = next(pid for pid, kind, _ in log if kind == "job")
    prewarmed = [what for pid, kind, what in log if kind == "load" and pid != worker_pid]
    loaded = [what for pid, kind, what in log if kind == "load" and pid == worker_pid]
    # The prewarm process loaded the coming binaries, in order; the worker still loads (and
    # blames) each of its own.
    assert sorted(loaded) == sorted(map(str, paths))
    assert prewarmed and prewarmed == [str(p) for p in paths[: len(prewarmed)]]


def test_a_hanging_candidate_is_stopped_early_at_a_deadline_set_from_the_baseline(
    benchmark_binary: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(WORKER_COMMAND_VARIABLE, json.dumps([sys.executable, FAULT_WORKER]))
    monkeypatch.setenv("IREETUNE_FAULT_SLOW", "2")
    monkeypatch.setenv("PYTHONPATH", str(REPOSITORY))
    paths = _copies(benchmark_binary, tmp_path, 4)
    jobs = [BenchmarkJob(i, path) for i, path in enumerate(paths)]
    settings = CampaignSettings(repetitions=2, hang_slack_s=0.5)
    learned: list[JobDeadlines] = []

    def deadlines(first: BenchmarkOutcome) -> JobDeadlines:
        learned.append(job_deadlines(settings, first))
        return learned[-1]

    # Until the baseline is measured every phase may take 300 s: the slow candidate is stopped
    # long before that, at the first-run deadline its baseline set.
    outcomes = list(
        run_benchmarks(
            jobs, "local-task", 2, 0, 300, min_repetition_s=0.005, hopeless_factor=5.0,
            timeout_after_first=deadlines,
        )
    )  # fmt: skip
    assert [(o.candidate_id, o.status) for o in outcomes] == [
        (0, BenchmarkStatus.MEASURED),
        (1, BenchmarkStatus.MEASURED),
        (2, BenchmarkStatus.TIMED_OUT),
        (3, BenchmarkStatus.MEASURED),
    ]
    assert outcomes[2].stopped_early
    (limits,) = learned
    assert outcomes[2].reason == (
        f"stopped early: its first run passed {limits.first_run_s:.2f} s, set from the baseline's time"
    )
    assert limits.first_run_s < 0.5 + 5 * 1.0  # Slack plus five runs of a sub-second baseline.


def test_deadlines_follow_the_baseline() -> None:
    first = BenchmarkOutcome(
        0, BenchmarkStatus.MEASURED, "", (2.0, 2.0, 3.0), 8, False, "local-task",
        TimingKind.BATCHED, 0.2, 4.0,
    )  # fmt: skip
    settings = CampaignSettings(repetitions=3, hopeless_factor=5.0, min_timeout_s=2.0)
    deadlines = job_deadlines(settings.for_device("cuda://0"), first)
    assert deadlines == JobDeadlines(
        load_s=2.0 + 5 * 0.2, first_run_s=1.0 + 5 * 0.004, per_dispatch_s=5 * 0.002,
        repetitions=3, slack_s=1.0,
    )  # fmt: skip
    # The untimed and the three timed repetitions of 8 dispatches, each allowed 5x the baseline.
    assert deadlines.rest_s(8) == pytest.approx(1.0 + 5 * 0.002 * 4 * 8)
    assert deadlines.rest_s(32) == pytest.approx(1.0 + 5 * 0.002 * 4 * 32)


def test_accelerators_screen_with_a_quarter_batch_and_prewarm() -> None:
    settings = CampaignSettings()
    assert (
        settings.for_device("local-task").screen_fraction,
        settings.for_device("local-task").prewarm,
    ) == (1.0, 0)
    on_gpu = settings.for_device("cuda://0")
    assert on_gpu.screen_fraction == 0.25 and on_gpu.prewarm is not None and on_gpu.prewarm >= 1
    assert on_gpu.hang_slack_s == 1.0
    chosen = CampaignSettings(screen_fraction=0.5, prewarm=0).for_device("cuda://0")
    assert (chosen.screen_fraction, chosen.prewarm) == (0.5, 0)


def test_the_first_pass_screens_with_part_of_the_batch_and_the_confirmation_uses_all(
    benchmark_binary: Path, tmp_path: Path
) -> None:
    paths = _copies(benchmark_binary, tmp_path, 4)
    settings = CampaignSettings(
        repetitions=2, min_repetition_s=0.01, confirm_top=1, confirm_rounds=2, screen_fraction=0.5
    )
    result = run_campaign(
        LocalExecutor(), BenchmarkJob(0, paths[0]), [BenchmarkJob(i, paths[i]) for i in (1, 2, 3)],
        ["local-task"], settings,
    )  # fmt: skip
    full = result.baselines["local-task"].batch
    assert full >= 2
    batches = {(m.confirmed, m.batch) for m in result.candidates.values() if not m.stopped_early}
    assert batches <= {(True, full), (False, full // 2)} and (True, full) in batches
