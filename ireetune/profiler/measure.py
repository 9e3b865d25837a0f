"""The run phase: verify and profile the compiled dispatches of a manifest; runtime only.

This module needs `iree-base-runtime` and NumPy, not the compiler, so a tree compiled on one
machine is measured on another. Verification runs each dispatch's `@main` on seeded random
inputs (one worker process per operation) and checks the output against the NumPy reference.
Profiling times each dispatch benchmark with the benchmark runner (dispatch-level, median of
repetitions, one worker for all, crashes and hangs recorded per dispatch).
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ireetune.benchmark.runner import BenchmarkJob, BenchmarkSession, BenchmarkStatus
from ireetune.core.input_archive import write_input_archive
from ireetune.profiler.manifest import DispatchEntry, DispatchStatus, Manifest
from ireetune.profiler.operations import Operation, compute_bytes_moved
from ireetune.profiler.peaks import PEAK_DEVICE, lookup_peak_gflops
from ireetune.profiler.reference import (
    DEFAULT_SAMPLES,
    Verification,
    VerificationStatus,
    check_output,
    compute_expected,
)
from ireetune.profiler.report import DispatchResult, compute_throughput, is_memory_bound
from ireetune.profiler.vendor import VendorTiming, time_with_vendor
from ireetune.verify.compare import make_random_inputs
from ireetune.verify.runner import ReferenceBatch

if TYPE_CHECKING:
    from ireetune.executor.base import Executor


@dataclass(frozen=True)
class MeasureOptions:
    """How to verify and profile a compiled tree."""

    generated_dir: Path
    device: str | None = None
    verify: bool = True
    profile: bool = True
    repetitions: int = 5
    min_repetition_s: float = 0.02
    timeout_s: float = 120.0
    samples: int = DEFAULT_SAMPLES
    seed: int = 0
    vendor: bool = True
    peak_gflops: float | None = None
    show_progress: bool | None = None


@contextlib.contextmanager
def _stage(enabled: bool | None, description: str, total: int) -> Iterator[object]:
    """Show a progress bar when asked (rich is imported only then: a bare runtime host may lack it)."""
    from ireetune.report.progress import StageProgress, progress_enabled

    with StageProgress(progress_enabled(enabled)) as progress, progress.stage(description, total):
        yield progress


def verify_dispatches(
    executor: Executor,
    entries: Sequence[DispatchEntry],
    generated_dir: Path,
    device: str,
    samples: int,
    seed: int,
) -> dict[str, Verification]:
    """Run every compiled dispatch's verification binary on `executor` and check it against the
    reference."""
    by_operation: dict[str, list[DispatchEntry]] = {}
    for entry in entries:
        by_operation.setdefault(entry.operation.name, []).append(entry)
    verdicts: dict[str, Verification] = {}
    for operation_entries in by_operation.values():
        operation = operation_entries[0].operation
        folder = generated_dir / Path(operation_entries[0].verify_vmfb).parent / "verify"
        folder.mkdir(exist_ok=True)
        inputs = make_random_inputs(
            [tuple(shape) for shape in operation.input_shapes],
            [t.value for t in operation.input_types],
            seed,
        )
        inputs_path = folder / "inputs.npz"
        write_input_archive(inputs_path, inputs)
        jobs = [
            (index, generated_dir / entry.verify_vmfb, folder / f"{entry.name}_output.npy")
            for index, entry in enumerate(operation_entries)
        ]
        runs = executor.run_reference_programs(
            ReferenceBatch(jobs, device, inputs_path, repetitions=0)
        )
        expected = compute_expected(operation, inputs, samples, seed)
        for index, entry in enumerate(operation_entries):
            run = runs[index]
            if run.output is None:
                verdicts[entry.name] = Verification.unchecked_failure(
                    f"the program failed to run: {run.reason}"
                )
                continue
            verdicts[entry.name] = check_output(operation, expected, run.output)
    return verdicts


def profile_dispatches(
    executor: Executor,
    entries: Sequence[DispatchEntry],
    generated_dir: Path,
    device: str,
    options: MeasureOptions,
) -> dict[str, tuple[float | None, str]]:
    """Time every compiled dispatch benchmark on `executor`; map its name to (median ms or
    None, reason)."""
    jobs = [
        BenchmarkJob(index, generated_dir / entry.profile_vmfb)
        for index, entry in enumerate(entries)
    ]
    times: dict[str, tuple[float | None, str]] = {}
    session = BenchmarkSession(
        jobs,
        device,
        options.repetitions,
        0,
        options.timeout_s,
        min_repetition_s=options.min_repetition_s,
    )
    for outcome in executor.run_benchmarks(session):
        entry = entries[outcome.candidate_id]
        if outcome.status is BenchmarkStatus.MEASURED and outcome.times_ms:
            times[entry.name] = (statistics.median(outcome.times_ms), "")
        else:
            times[entry.name] = (None, f"{outcome.status.value}: {outcome.reason}")
    return times


def _vendor_timings(
    operations: Sequence[Operation], target: str, enabled: bool
) -> dict[str, VendorTiming]:
    if not enabled:
        return {
            op.name: VendorTiming(None, "vendor", "vendor comparison turned off")
            for op in operations
        }
    gpu = not target.startswith("cpu")
    return {op.name: time_with_vendor(op, gpu) for op in operations}


def measure_dispatches(
    executor: Executor, manifest: Manifest, options: MeasureOptions
) -> list[DispatchResult]:
    """Verify and profile the manifest's compiled dispatches on `executor`; return one result
    per dispatch."""
    generated_dir = options.generated_dir.resolve()
    device = options.device or manifest.device
    compiled = [e for e in manifest.dispatches if e.status is DispatchStatus.COMPILED]
    verdicts: dict[str, Verification] = {}
    if options.verify and compiled:
        with _stage(options.show_progress, "verifying", len(compiled)):
            verdicts = verify_dispatches(
                executor, compiled, generated_dir, device, options.samples, options.seed
            )
    timings: dict[str, tuple[float | None, str]] = {}
    if options.profile and compiled:
        with _stage(options.show_progress, "profiling", len(compiled)):
            timings = profile_dispatches(executor, compiled, generated_dir, device, options)
    operations = list({e.operation.name: e.operation for e in compiled}.values())
    vendor = _vendor_timings(operations, manifest.target, options.vendor and options.profile)
    default_ms = {
        e.operation.name: timings[e.name][0]
        for e in compiled
        if e.config_kind == "default" and e.name in timings
    }
    return [
        _result(
            entry,
            manifest.target,
            verdicts.get(entry.name),
            timings.get(entry.name),
            vendor.get(entry.operation.name),
            default_ms.get(entry.operation.name),
            options.peak_gflops,
        )
        for entry in manifest.dispatches
    ]


def _result(
    entry: DispatchEntry,
    target: str,
    verdict: Verification | None,
    timing: tuple[float | None, str] | None,
    vendor: VendorTiming | None,
    default_ms: float | None,
    peak_override: float | None,
) -> DispatchResult:
    operation = entry.operation
    runtime_ms, profile_reason = timing if timing is not None else (None, "")
    status = entry.status.value
    reasons = [entry.reason] if entry.reason else []
    if entry.status is DispatchStatus.COMPILED:
        status = (
            "profiled"
            if runtime_ms is not None
            else ("not profiled" if timing is None else "profile-failed")
        )
        if profile_reason:
            reasons.append(profile_reason)
    flops, bytes_moved = operation.flops, compute_bytes_moved(operation)
    gflops = gbps = peak_percent = None
    if runtime_ms is not None:
        gflops, gbps = compute_throughput(flops, bytes_moved, runtime_ms)
    peak = (
        peak_override
        if peak_override is not None
        else lookup_peak_gflops(target, operation.input_type)
    )
    if peak is None:
        peak_note = f"peak of {target} unknown; give --peak-gflops"
    elif peak_override is not None:
        peak_note = f"of {peak:.0f} GFLOP/s given"
    else:
        peak_note = f"of {PEAK_DEVICE.get(target, target)} peak {peak:.0f} GFLOP/s"
    if gflops is not None and peak is not None:
        peak_percent = 100.0 * gflops / peak
    vendor_ms = vendor.runtime_ms if vendor is not None else None
    vendor_ratio = vendor_ms / runtime_ms if vendor_ms is not None and runtime_ms else None
    speedup = default_ms / runtime_ms if default_ms and runtime_ms else None
    if verdict is None:
        verification, detail = VerificationStatus.NOT_VERIFIED.value, ""
    else:
        verification, detail = verdict.status.value, verdict.detail
    return DispatchResult(
        dispatch=entry.name,
        operation=operation.name,
        kind=operation.kind.value,
        configuration=entry.config_name,
        knobs=entry.knobs,
        arguments=operation.arguments,
        status=status,
        verification=verification,
        verification_detail=detail,
        runtime_ms=runtime_ms,
        gflops=gflops,
        gbps=gbps,
        memory_bound=is_memory_bound(flops, bytes_moved),
        peak_percent=peak_percent,
        peak_note=peak_note,
        speedup_vs_default=speedup,
        vendor_library=vendor.library if vendor is not None else "",
        vendor_ms=vendor_ms,
        vendor_ratio=vendor_ratio,
        vendor_note=vendor.reason if vendor is not None else "not measured",
        reason="; ".join(reasons),
    )
