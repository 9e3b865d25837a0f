"""Compile and measure at once: each candidate is timed as soon as its binary is ready.

    compile pool (host cores)   0 1 2 3 4 5 6 ...
    benchmark session (device)     0 . 1 2 . 3 4 ...   (0: the baseline, first compiled)

Binaries are classified as they arrive (not applied, duplicate of one already seen, or new) and
only new ones are handed to the campaign, whose session keeps the device open. The confirmation
round starts once the last compile is in, exactly as it does after a compile-then-measure run.

On a GPU the two sides share nothing but the host; on a CPU target the compiles take the cores
the measurement runs on, so the first pass is timed under load (the confirmation round, which
decides, runs after the last compile): the tuner overlaps there only when asked.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ireetune.benchmark.campaign import (
    CampaignResult,
    CampaignSettings,
    CandidateMeasurement,
    EarlierResult,
    run_campaign,
)
from ireetune.benchmark.runner import BenchmarkJob, JobFeed
from ireetune.compile.pool import CompileBatch
from ireetune.compile.stage import classify_binary, record_compile
from ireetune.core.errors import IreetuneError
from ireetune.core.records import CandidateRecord, CandidateStatus
from ireetune.report.progress import StageProgress
from ireetune.report.recorder import RunRecorder

if TYPE_CHECKING:
    from ireetune.executor.base import Executor


@dataclass
class Timeline:
    """When each compile finished and each first-pass measurement arrived (monotonic seconds)."""

    compiled_at: dict[int, float] = field(default_factory=dict)
    measured_at: dict[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class MeasurePlan:
    """How the new binaries are measured: the job each compiled candidate becomes, the devices
    and settings of the campaign, who sees each first-pass measurement (on the calling thread),
    and the earlier results that take part in the confirmation."""

    make_job: Callable[[CandidateRecord], BenchmarkJob]
    devices: Sequence[str]
    settings: CampaignSettings
    on_measured: Callable[[CandidateMeasurement], None]
    earlier: Sequence[EarlierResult] = ()


def compile_and_measure(
    executor: Executor,
    recorder: RunRecorder,
    batch: CompileBatch,
    plan: MeasurePlan,
    progress: StageProgress,
    timeline: Timeline | None = None,
) -> CampaignResult:
    """Compile every job of the batch and measure each new binary while the others still
    compile, both on `executor`.

    The baseline (candidate 0) must be among the jobs: it is compiled first and its binary is
    the campaign's baseline; a baseline that does not compile stops the run. Every record is
    updated on the calling thread (`plan.on_measured` too) and saved as it changes.
    """
    make_job, on_measured = plan.make_job, plan.on_measured
    compile_jobs = batch.jobs
    assert compile_jobs and compile_jobs[0].candidate_id == 0, "the baseline compiles first"
    timeline = timeline if timeline is not None else Timeline()
    feed = JobFeed()
    measured: queue.Queue[CandidateMeasurement] = queue.Queue()
    results: list[CampaignResult] = []
    failures: list[BaseException] = []
    campaign: threading.Thread | None = None
    seen: dict[str, int] = {}
    waiting: list[int] = []  # Compiled before the baseline was: classified once it is.

    def measure() -> None:
        try:
            results.append(
                run_campaign(
                    executor,
                    make_job(recorder.records[0]),
                    feed,
                    plan.devices,
                    plan.settings,
                    on_measured=measured.put,
                    earlier=plan.earlier,
                )  # fmt: skip
            )
        except BaseException as error:  # Re-raised on the calling thread.
            failures.append(error)

    def deliver() -> None:
        while True:
            try:
                measurement = measured.get_nowait()
            except queue.Empty:
                return
            timeline.measured_at.setdefault(measurement.candidate_id, time.monotonic())
            on_measured(measurement)

    def hand_over(candidate_id: int) -> None:
        if classify_binary(recorder, candidate_id, seen):
            feed.add(make_job(recorder.records[candidate_id]))

    try:
        with progress.stage("compiling (measuring as they compile)", len(compile_jobs)):
            for outcome in executor.compile(batch):
                timeline.compiled_at[outcome.candidate_id] = time.monotonic()
                record_compile(recorder, outcome, set())
                if outcome.candidate_id == 0:
                    baseline = recorder.records[0]
                    if baseline.status is not CandidateStatus.COMPILED:
                        recorder.save()
                        raise IreetuneError(
                            f"the default configuration does not compile: {baseline.reason}"
                        )
                    seen[baseline.binary_hash] = 0
                    campaign = threading.Thread(target=measure, name="campaign", daemon=True)
                    campaign.start()
                    for candidate_id in waiting:
                        hand_over(candidate_id)
                    waiting.clear()
                elif campaign is None:
                    waiting.append(outcome.candidate_id)
                else:
                    hand_over(outcome.candidate_id)
                recorder.save()
                deliver()
                progress.advance()
    finally:
        feed.close()
    assert campaign is not None
    while campaign.is_alive():
        campaign.join(timeout=0.1)
        deliver()
    deliver()
    if failures:
        raise failures[0]
    return results[0]
