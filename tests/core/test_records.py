"""Candidate records: CSV form, ranking, and the summary's verdict."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace

from ireetune.core.candidate import make_knobs
from ireetune.core.records import CSV_COLUMNS, CandidateRecord, CandidateStatus, render_csv
from ireetune.report.ranking import rank_candidates
from ireetune.report.summary import SummaryHeading, render_summary


def is_real_improvement(speedup: float, noise: float, threshold: float = 0.01) -> bool:
    """Say whether a speedup exceeds both a minimum gain and the measured noise."""
    return speedup > 1.0 + max(threshold, noise)


BASELINE = CandidateRecord(
    0, make_knobs({"vec_m": 8}), CandidateStatus.MEASURED, median_ms=2.0, speedup=1.0, spread=0.02
)
FAST = CandidateRecord(
    1,
    make_knobs({"vec_m": 4}),
    CandidateStatus.VERIFIED,
    median_ms=1.0,
    speedup=2.0,
    times_ms=(1.0, 1.1),
)
SLOW = CandidateRecord(
    2, make_knobs({"vec_m": 2}), CandidateStatus.MEASURED, median_ms=4.0, speedup=0.5
)
BROKEN = CandidateRecord(
    3, make_knobs({"vec_m": 1}), CandidateStatus.COMPILE_FAILED, reason="error: boom"
)
WRONG = CandidateRecord(
    4, make_knobs({"vec_m": 3}), CandidateStatus.WRONG, median_ms=0.5, speedup=4.0
)


def test_csv_has_one_row_per_candidate_in_id_order() -> None:
    text = render_csv([SLOW, BROKEN, BASELINE, FAST])
    lines = text.splitlines()
    assert lines[0] == ",".join(CSV_COLUMNS)
    assert [line.split(",")[0] for line in lines[1:]] == ["0", "1", "2", "3"]
    assert lines[1].startswith("0,yes,measured,,vec_m=8,,2,")
    assert lines[4].startswith("3,no,compile-failed,error: boom,vec_m=1,")


def test_ranking_excludes_baseline_failures_and_wrong_results() -> None:
    assert [r.candidate_id for r in rank_candidates([BASELINE, SLOW, BROKEN, FAST, WRONG])] == [
        1,
        2,
    ]
    assert rank_candidates([BASELINE, BROKEN]) == []


def test_improvement_must_beat_noise_and_threshold() -> None:
    assert is_real_improvement(1.05, noise=0.02)
    assert not is_real_improvement(1.05, noise=0.06)
    assert not is_real_improvement(1.005, noise=0.0)


def test_summary_reports_the_winner_or_says_the_default_stands() -> None:
    records = [BASELINE, FAST, SLOW, BROKEN]
    won = render_summary(
        SummaryHeading("matmul_8x8x8_f32_f32_f32", "cpu", 2.0, 0.67), records, FAST, ["a note"]
    )
    assert (
        "best: candidate 1, 2.000x over the default (2.0000 -> 1.0000 ms), outputs verified" in won
    )
    assert "compile success: 67%" in won and "note: a note" in won
    lost = render_summary(
        SummaryHeading("matmul_8x8x8_f32_f32_f32", "cpu", 2.0, 1.0), [BASELINE, SLOW], None, []
    )
    assert "best: the compiler's default" in lost


def test_a_candidate_stopped_at_its_deadline_is_kept_as_stopped_early() -> None:
    from ireetune.benchmark.campaign import CandidateMeasurement
    from ireetune.benchmark.outcomes import record_measurement
    from ireetune.benchmark.runner import BenchmarkStatus

    stopped = CandidateMeasurement(
        5, "local-task", BenchmarkStatus.TIMED_OUT,
        "stopped early: its first run passed 0.62 s, set from the baseline's time",
        stopped_early=True,
    )  # fmt: skip
    record = record_measurement(
        CandidateRecord(5, make_knobs({"vec_m": 16}), CandidateStatus.COMPILED), stopped
    )
    (row,) = csv.DictReader(io.StringIO(render_csv([record])))
    assert (row["status"], row["stopped_early"], row["reason"]) == (
        "benchmark-timed-out",
        "yes",
        "stopped early: its first run passed 0.62 s, set from the baseline's time",
    )


def test_each_measurement_says_how_it_was_timed() -> None:
    from ireetune.benchmark.campaign import CandidateMeasurement
    from ireetune.benchmark.outcomes import record_measurement
    from ireetune.benchmark.runner import BenchmarkStatus
    from ireetune.benchmark.timing import TimingKind

    batched = CandidateMeasurement(
        1, "cuda://0", BenchmarkStatus.MEASURED, times_ms=(0.01, 0.011), speedup=1.5,
        timing=TimingKind.BATCHED, batch=4096,
    )  # fmt: skip
    record = record_measurement(CandidateRecord(1, None, CandidateStatus.COMPILED), batched)
    (row,) = csv.DictReader(io.StringIO(render_csv([record])))
    assert (row["timing"], row["batch"]) == ("batched", "4096")
    summary = render_summary(
        SummaryHeading("mmt", "cuda:sm_80", 2.0, 1.0), [BASELINE, record], None, []
    )
    assert (
        "timing: host clock over batches of 4096 dispatches in one call (launch amortised) "
        "(1 measurements)" in summary
    )


def test_a_tiny_dispatch_timed_call_by_call_is_flagged() -> None:
    tiny = CandidateRecord(
        0, None, CandidateStatus.MEASURED, median_ms=0.02, speedup=1.0, timing="host-per-call",
        batch=512,
    )  # fmt: skip
    summary = render_summary(
        SummaryHeading("matmul_8x8x8_f32_f32_f32", "cpu", 0.02, 1.0), [tiny], None, []
    )
    assert (
        "timing: the default takes 20.0 us a call, so launch overhead is a large part of every "
        "time and speedups read smaller than they are" in summary
    )
    batched = render_summary(
        SummaryHeading("matmul_8x8x8_f32_f32_f32", "cpu", 0.02, 1.0),
        [replace(tiny, timing="batched")],
        None,
        [],
    )
    assert "launch overhead is a large part" not in batched


def test_results_json_and_the_database_export_keep_the_checks_where_they_always_were() -> None:
    from ireetune.core.records import record_to_json
    from ireetune.database.exchange import results_to_json
    from ireetune.database.store import ResultKey, StoredResult

    checks = [
        "speedup_low", "speedup_high", "basis", "confirmed", "rounds_ms", "outputs_match",
        "real_input_speedup", "real_input_low", "real_input_high", "verdict",
    ]  # fmt: skip
    assert list(record_to_json(FAST)) == [
        "candidate_id", "knobs", "status", "heuristic_score", "reason", "spec_path",
        "binary_path", "binary_hash", "compile_seconds", "device", "times_ms", "median_ms",
        "min_ms", "max_ms", "spread", "speedup", "stopped_early", "max_abs_error", *checks,
        "timing", "batch",
    ]  # fmt: skip
    stored = StoredResult(
        ResultKey("3.13", "cpu", "local-task", "matmul", "m"), "{}", "", "measured", "", (1.0,),
        1.0, 1.0, 1.0, 0.0, 2.0, 2.0, "s", "now", verdict="winner", rule="paired-bootstrap",
    )  # fmt: skip
    (row,) = json.loads(results_to_json([stored]))["ireetune_results"]
    assert list(row) == [
        "key", "config", "compilation_info", "status", "reason", "times_ms", "median_ms",
        "min_ms", "max_ms", "spread", "baseline_ms", "speedup", "session", "written_at",
        *checks, "rule", "origin",
    ]  # fmt: skip
