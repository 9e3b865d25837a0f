"""Each dispatch timed inside runs of the whole model (IREE's HAL profiler), and the profile's
use of those times in place of compiling and timing every dispatch benchmark alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ireetune.compile.driver import build_request, run_compile
from ireetune.core.target import Target
from ireetune.executor import LocalExecutor
from ireetune.executor.base import Executor
from ireetune.frontend.dispatches import DumpedDispatch
from ireetune.model.in_model_times import (
    MAX_PROFILED_CALLS,
    MIN_PROFILED_CALLS,
    InModelTimes,
    profile_model_here,
    profiled_calls,
    read_host_execution_events,
)
from ireetune.model.prepare import ModelUnderTuning, write_model_inputs
from ireetune.model.profile import InModelProfile, profile_dispatches, times_in_model
from ireetune.model.timing import ModelComparison
from ireetune.targets import parse_target
from tests.conftest import REPOSITORY
from tests.flows.model.test_model_tuning import _weighted_model

EXAMPLES = REPOSITORY / "examples"


def _event(key: str | None, duration_ns: int, op: str = "dispatch", valid: bool = True) -> str:
    return json.dumps(
        {
            "record_type": "host_execution_event",
            "op": op,
            "key": key,
            "valid": valid,
            "submission_id": 3,
            "duration_ns": duration_ns,
        }
    )


def test_each_export_keeps_its_median_launch_times_its_launches_per_call() -> None:
    lines = [
        json.dumps({"record_type": "executable_function", "name": "main$async_dispatch_0_x"}),
        # Three calls: dispatch 0 once a call (one slow call), dispatch 1 twice a call.
        *(_event("main$async_dispatch_0_x", ns) for ns in (1_000_000, 9_000_000, 2_000_000)),
        *(_event("main$async_dispatch_1_y", ns) for ns in (400_000,) * 5 + (600_000,)),
        _event(None, 5_000, op="alloca"),
        _event("main$async_dispatch_2_z", 7_000_000, op="execute"),
        _event("main$async_dispatch_0_x", 99_000_000, valid=False),
    ]
    times = read_host_execution_events(lines, calls=3)
    assert times == InModelTimes(
        {"main$async_dispatch_0_x": 2.0, "main$async_dispatch_1_y": 0.8},
        {"main$async_dispatch_0_x": 1, "main$async_dispatch_1_y": 2},
        3,
    )
    empty = read_host_execution_events(lines[:1], calls=3)
    assert (empty.ok, empty.reason) == (
        False,
        "the profile holds no host-execution dispatch events",
    )


def test_the_calls_profiled_cover_a_stretch_within_bounds() -> None:
    assert profiled_calls(100.0) == 15
    assert profiled_calls(1000.0) == MIN_PROFILED_CALLS
    assert profiled_calls(0.001) == MAX_PROFILED_CALLS
    assert profiled_calls(0.0) == MIN_PROFILED_CALLS


def _compiled(target: Target, source: Path, output: Path) -> Path:
    result = run_compile(build_request(target, source, output, timeout_s=120))
    assert result.ok, result.error_line
    return output


def _inputs(source: Path, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    inputs = folder / "inputs.npz"
    write_model_inputs(source, [], 0, inputs, work_dir=folder / "source")
    return inputs


def test_a_whole_model_run_times_every_dispatch_a_call_launches(tmp_path: Path) -> None:
    target = parse_target("cpu")
    source = EXAMPLES / "mlp.mlir"
    vmfb = _compiled(target, source, tmp_path / "mlp.vmfb")
    comparison = ModelComparison(
        [("default", vmfb)], "mlp", _inputs(source, tmp_path), tmp_path, "local-task", 1
    )
    times = profile_model_here(comparison, calls=4)
    assert times.ok, times.reason
    assert times.calls == 4
    assert sorted(name.split("_")[2] for name in times.per_call_ms) == ["0", "1"]
    assert all(name.startswith("mlp_dispatch_") for name in times.per_call_ms)
    assert list(times.launches.values()) == [1, 1]
    assert all(ms > 0 for ms in times.per_call_ms.values())
    # Nothing of the profile is left behind.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inputs.npz", "mlp.vmfb"]

    broken = profile_model_here(
        ModelComparison([("default", vmfb)], "mlp", comparison.inputs_path, tmp_path, "nope", 1), 4
    )
    assert not broken.ok and broken.reason.startswith("profiling the model failed: ")


def _weighted(tmp_path: Path) -> tuple[ModelUnderTuning, Target]:
    target = parse_target("cpu").with_global_flags(("--iree-opt-data-tiling",))
    source = _weighted_model(tmp_path)
    model = ModelUnderTuning(source, "main", _inputs(source, tmp_path), target, False, "local-task")
    return model, target


def test_the_profile_takes_each_dispatchs_time_from_runs_of_the_whole_model(
    tmp_path: Path,
) -> None:
    model, target = _weighted(tmp_path)
    vmfb = _compiled(target, model.mlir_path, tmp_path / "weighted.vmfb")
    comparison = ModelComparison(
        [("default", vmfb)], "main", model.inputs_path, tmp_path, "local-task", 1
    )
    dispatches = profile_dispatches(
        LocalExecutor(), model, tmp_path, 2, timed=True, in_model=InModelProfile(comparison, 500.0)
    )
    # No dispatch benchmark was compiled.
    assert dispatches.binaries == {}
    assert not (tmp_path / "dispatch_binaries").exists()
    calls = MIN_PROFILED_CALLS  # A 500 ms model's 1.5 s.
    assert dispatches.timed_how == (
        f"profile: each dispatch timed inside {calls} calls of the whole model "
        "(IREE's HAL profiler, host-execution events)"
    )
    timed = {p.name: (p.invocations, p.dispatch_ms is not None) for p in dispatches.profiles}
    # The weight's pack runs once, when the model loads: it holds none of a call's time.
    assert timed == {
        "_encoding_0": (0, False),
        "_encoding_1": (1, True),
        "main_dispatch_0": (1, True),
    }


def test_a_profile_of_another_build_falls_back_to_timing_each_benchmark_alone(
    tmp_path: Path,
) -> None:
    model, target = _weighted(tmp_path)
    other = _compiled(parse_target("cpu"), EXAMPLES / "mlp.mlir", tmp_path / "mlp.vmfb")
    comparison = ModelComparison(
        [("default", other)], "mlp", _inputs(EXAMPLES / "mlp.mlir", tmp_path / "mlp"), tmp_path,
        "local-task", 1,
    )  # fmt: skip
    dispatches = profile_dispatches(
        LocalExecutor(), model, tmp_path, 2, timed=True, in_model=InModelProfile(comparison, 1.0)
    )
    assert dispatches.timed_how == (
        "profile: each dispatch benchmark timed alone (the whole model's profile names 0 of the "
        "2 dispatches a run launches)"
    )
    names = {d.index: d.name for d in dispatches.dumped}
    assert sorted(names[i] for i in dispatches.binaries) == ["_encoding_1", "main_dispatch_0"]
    assert all(p.dispatch_ms is not None for p in dispatches.profiles if p.invocations)


def test_an_executor_that_cannot_profile_a_whole_model_says_so() -> None:
    comparison = ModelComparison([], "main", Path("in.npz"), Path("."), "local-task", 1)
    times = Executor.profile_model(LocalExecutor(), comparison, 3)
    assert times.reason == "the local executor does not profile whole models"


def test_a_dispatch_takes_its_exports_time_per_call_over_its_launches(tmp_path: Path) -> None:
    benchmark = tmp_path / "module_main$async_dispatch_3_embedded_elf_x86_64_benchmark.mlir"
    benchmark.write_text(
        "hal.executable.export public @main$async_dispatch_3_matmul_8x8_f32 ordinal(0)\n"
    )
    dumped = [DumpedDispatch(0, "main$async_dispatch_3", benchmark)]
    export = "main$async_dispatch_3_matmul_8x8_f32"
    times = InModelTimes({export: 3.0, "main$async_dispatch_30_x": 1.0}, {export: 2}, 9)
    assert times_in_model(dumped, {"main$async_dispatch_3": 2}, times) == {0: 1.5}
    other = InModelTimes({"main$async_dispatch_30_x": 1.0}, {}, 9)
    assert times_in_model(dumped, {}, other) == (
        "the whole model's profile names 0 of the 1 dispatches a run launches"
    )


def test_local_task_refuses_the_dispatch_events_family(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pins why the profile asks for `host-execution`: IREE 3.13's local devices refuse the
    `dispatch-events` family (device-side timestamps). The day they give it, this fails, and the
    profile can ask for it."""
    from ireetune.model import in_model_times

    target = parse_target("cpu")
    source = EXAMPLES / "mlp.mlir"
    vmfb = _compiled(target, source, tmp_path / "mlp.vmfb")
    comparison = ModelComparison(
        [("default", vmfb)], "mlp", _inputs(source, tmp_path), tmp_path, "local-task", 1
    )
    monkeypatch.setattr(in_model_times, "PROFILING_MODE", "dispatch-events")
    refused = profile_model_here(comparison, calls=2)
    assert not refused.ok
    assert "unsupported local profiling data families" in refused.reason
