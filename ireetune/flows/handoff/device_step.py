"""The device half of a split model run: do whatever the run folder says is due, runtime only.

    ireetune measure RUN_DIR [--devices cuda://0,cuda://1]
    python -m ireetune.cli measure RUN_DIR [--devices ...]   (the same, without the console script)

Reads `device_step.json` (flows/handoff/model_folder.py), checks every file it names against its
hash, then runs the tasks it lists, in order:
    flags      the flag phase's binaries (one per distinct flag set) interleaved with the
               default, a first session and a confirmation (the variants' two sessions)
    profile    the default model on its inputs and each dispatch benchmark, on the first device
    folders    each dispatch-level benchmark folder (ireetune.flows.handoff.benchmark_folder), on every device
    variants   model variants interleaved with the default, a first session and a confirmation
and writes `device/results_<round trip>.json` after each task. A step that is stopped (killed,
a machine lost) is run again with the same command: finished tasks and measured folders are kept.

Nothing on this path may import the IREE compiler or z3 (tests/flows/model/test_split_flow.py checks).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ireetune.core.errors import IreetuneError
from ireetune.core.files import write_text_atomically
from ireetune.database.run_files import RunFileError, dump_document, read_json_file
from ireetune.flows.handoff.benchmark_folder import benchmark_folder, log_step
from ireetune.flows.handoff.manifest import check_results_match_manifest
from ireetune.flows.handoff.model_folder import (
    RESULTS_FORMAT,
    DeviceManifest,
    DeviceResultsFile,
    ProfileTask,
    VariantTask,
    check_listed_files,
    hash_device_manifest,
    read_device_manifest,
    results_name,
)
from ireetune.model.dispatch_times import time_dispatch_benchmarks
from ireetune.model.in_model_times import PROFILING_MODE, profiled_calls, times_by_exports
from ireetune.model.timing import ModelComparison
from ireetune.model.variant_sessions import SessionPlan, sessions_document, time_variant_sessions

if TYPE_CHECKING:
    from ireetune.executor.base import Executor


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    write_text_atomically(path, dump_document(DeviceResultsFile, payload))


def _earlier_results(path: Path, manifest_hash: str) -> dict[str, Any] | None:
    """Return what an interrupted step of this same manifest already wrote, else None."""
    try:
        data = read_json_file(path)
    except RunFileError:
        return None
    if isinstance(data, dict) and data.get("manifest_sha256") == manifest_hash:
        return data
    return None


def run_device_step(run_dir: Path, devices: Sequence[str] = ()) -> Path:
    """Run the tasks of the folder's device manifest on this host; return the path of the
    results file."""
    from ireetune.executor.base import LocalExecutor

    executor = LocalExecutor()
    started = time.monotonic()
    manifest = read_device_manifest(run_dir)
    manifest_hash = hash_device_manifest(run_dir)
    check_listed_files(run_dir, manifest)
    chosen = tuple(devices) or manifest.devices
    results_path = run_dir / results_name(manifest.round_trip)
    results_path.parent.mkdir(exist_ok=True)
    results = _earlier_results(results_path, manifest_hash) or {
        "format": RESULTS_FORMAT,
        "manifest_sha256": manifest_hash,
        "round_trip": manifest.round_trip,
        "devices": list(chosen),
        "seconds": {},
        "folders": {},
        "done": False,
    }
    if results["devices"] != list(chosen):
        # Timings on other devices can not be mixed with these: start the step afresh.
        results.update(devices=list(chosen), seconds={}, folders={}, done=False)
        for task in ("flags", "profile", "variants"):
            results.pop(task, None)
    results["seconds"]["check"] = time.monotonic() - started
    step_dir = run_dir / "device" / f"step_{manifest.round_trip}"
    step_dir.mkdir(parents=True, exist_ok=True)
    if manifest.flags is not None and "flags" not in results:
        log_step(f"timing {len(manifest.flags.variants)} flag sets' binaries against the default")
        part_started = time.monotonic()
        results["flags"] = _time_variants(
            executor, run_dir, manifest, manifest.flags, chosen[0], step_dir / "flags"
        )
        results["seconds"]["flags"] = time.monotonic() - part_started
        _write_json(results_path, results)
    if manifest.profile is not None and "profile" not in results:
        log_step(
            f"profiling the model and {len(manifest.profile.dispatches)} dispatches on {chosen[0]}"
        )
        part_started = time.monotonic()
        results["profile"] = _profile(
            executor, run_dir, manifest, manifest.profile, chosen[0], step_dir
        )
        results["seconds"]["profile"] = time.monotonic() - part_started
        _write_json(results_path, results)
    for folder in manifest.folders:
        part_started = time.monotonic()
        results["folders"][folder] = _measure_folder(run_dir / folder, chosen)
        results["seconds"]["folders"] = (
            results["seconds"].get("folders", 0.0) + time.monotonic() - part_started
        )
        _write_json(results_path, results)
    if manifest.variants is not None and "variants" not in results:
        log_step(f"timing {len(manifest.variants.variants)} model variants against the default")
        part_started = time.monotonic()
        results["variants"] = _time_variants(
            executor, run_dir, manifest, manifest.variants, chosen[0], step_dir
        )
        results["seconds"]["variants"] = time.monotonic() - part_started
    results["done"] = True
    results["seconds"]["total"] = sum(v for k, v in results["seconds"].items() if k != "total")
    _write_json(results_path, results)
    return results_path


def _profile(
    executor: Executor,
    run_dir: Path,
    manifest: DeviceManifest,
    task: ProfileTask,
    device: str,
    step_dir: Path,
) -> dict[str, Any]:
    """Time the default model and keep its outputs; time each dispatch inside runs of the
    whole model where the task names the dispatches' exports and the device's profiler names
    them (model/in_model_times.py), else each dispatch benchmark alone; say which."""
    comparison = ModelComparison(
        [("default", run_dir / manifest.default_model)], manifest.function,
        run_dir / manifest.inputs, step_dir, device, task.rounds,
        parameters=[run_dir / p for p in manifest.parameters],
    )  # fmt: skip
    runs = executor.run_models_side_by_side(comparison)
    default = runs["default"]
    if not default.ok:
        raise IreetuneError(f"the default model does not run on {device}: {default.reason}")
    model_ms = statistics.median(default.times_ms)
    dispatch_ms: dict[str, float | None] | None = None
    how = "profile: each dispatch benchmark timed alone"
    if task.exports:
        calls = profiled_calls(model_ms)
        times = executor.profile_model(replace(comparison, rounds=1), calls)
        launched = {d.label: task.exports.get(d.label, ()) for d in task.dispatches}
        matched = times_by_exports(launched, task.launches, times) if times.ok else times.reason
        if isinstance(matched, str):
            how += f" ({matched})"
        else:
            dispatch_ms = {d.label: matched.get(d.label) for d in task.dispatches}
            how = (
                f"profile: each dispatch timed inside {times.calls} calls of the whole model "
                f"(IREE's HAL profiler, {PROFILING_MODE} events)"
            )
    if dispatch_ms is None:
        timings = time_dispatch_benchmarks(
            executor, {index: run_dir / d.vmfb for index, d in enumerate(task.dispatches)}, device,
            {index: task.launches.get(d.label, 1) for index, d in enumerate(task.dispatches)},
        )  # fmt: skip
        dispatch_ms = {d.label: timings.get(index) for index, d in enumerate(task.dispatches)}
    return {
        "device": device,
        "model_times_ms": list(default.times_ms),
        "model_ms": model_ms,
        "default_outputs": str((step_dir / "default_outputs.npz").relative_to(run_dir)),
        "dispatch_ms": dispatch_ms,
        "timed_how": how,
    }


def _measure_folder(folder: Path, devices: Sequence[str]) -> str:
    """Benchmark one dispatch folder unless its results are already there; say how it went."""
    try:
        check_results_match_manifest(folder)
        log_step(f"{folder.name}: measured before, kept")
        return "measured"
    except IreetuneError:
        pass
    log_step(f"benchmarking {folder.name} on {', '.join(devices)}")
    try:
        benchmark_folder(folder, devices)
    except (ValueError, IreetuneError) as error:
        # One dispatch that can not be measured never stops the others.
        return f"failed: {error}"
    return "measured"


def _time_variants(
    executor: Executor,
    run_dir: Path,
    manifest: DeviceManifest,
    task: VariantTask,
    device: str,
    work_dir: Path,
) -> dict[str, Any]:
    """Time every variant beside the default, pre-select, and confirm in a fresh session
    (sessions under `work_dir`)."""
    by_label = {v.label: v.vmfb for v in task.variants}

    def session_for(labels: Sequence[str], folder: str, rounds: int, calls: int) -> ModelComparison:
        (work_dir / folder).mkdir(parents=True, exist_ok=True)
        return ModelComparison(
            [("default", run_dir / manifest.default_model),
             *((label, run_dir / by_label[label]) for label in labels)],
            manifest.function, run_dir / manifest.inputs, work_dir / folder, device, rounds,
            calls, parameters=[run_dir / p for p in manifest.parameters],
        )  # fmt: skip

    sessions = time_variant_sessions(
        executor, session_for, list(by_label),
        SessionPlan(task.rounds, task.calls_per_round, task.confirm_top, task.confirm_rounds,
                    task.threshold),
        announce=log_step,
    )  # fmt: skip
    return sessions_document(sessions, work_dir, run_dir, device)
