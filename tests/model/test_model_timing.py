"""Models timed side by side, each on a device of its own runtime flags, in one real local-task
process (the model timing worker, `model/timing.py`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from ireetune.compile.driver import build_request, run_compile
from ireetune.flags.runtime import spell_runtime_defaults
from ireetune.model.ort_compare import count_local_task_workers
from ireetune.model.timing import (
    SESSION_TIMES,
    ModelComparison,
    ModelRun,
    RuntimeVariants,
    run_models_side_by_side_here,
    write_session_times,
)
from ireetune.targets import parse_target
from ireetune.targets.llvm_cpu.flags import LOCAL_TASK_RUNTIME_OPTIONS
from tests.conftest import MATMUL_MODEL

ONE_WORKER = ("--task_topology_max_group_count=1",)
DEFAULTS = spell_runtime_defaults(LOCAL_TASK_RUNTIME_OPTIONS)


def _compile(folder: Path, name: str, text: str) -> Path:
    source = folder / f"{name}.mlir"
    source.write_text(text)
    binary = folder / f"{name}.vmfb"
    result = run_compile(build_request(parse_target("cpu"), source, binary, timeout_s=120))
    assert result.ok, result.error_line
    return binary


@pytest.fixture(scope="module")
def matmul(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The matmul model's binary and its inputs."""
    folder = tmp_path_factory.mktemp("timing")
    inputs = folder / "inputs.npz"
    rng = np.random.default_rng(0)
    np.savez(inputs, arg0=rng.random((64, 96), np.float32), arg1=rng.random((96, 128), np.float32))
    return _compile(folder, "matmul", MATMUL_MODEL), inputs


def _time(
    matmul: tuple[Path, Path],
    folder: Path,
    models: list[tuple[str, Path]],
    variants: RuntimeVariants,
) -> dict[str, tuple[bool, str, int, int]]:
    runs = run_models_side_by_side_here(
        ModelComparison(
            models, "main", matmul[1], folder, "local-task", rounds=3, repetitions=2,
            runtime_variants=variants,
        )
    )  # fmt: skip
    return {m: (r.ok, r.reason, r.workers, len(r.times_ms)) for m, r in runs.items()}


def test_each_model_runs_under_its_own_runtime_flags_and_the_defaults_come_back(
    matmul: tuple[Path, Path], tmp_path: Path
) -> None:
    # The changed set's device is created first: the defaults' device, created after it, must
    # still run the runtime's default worker count (the flags are global and sticky).
    binary = matmul[0]
    variants = RuntimeVariants(
        {"one": ONE_WORKER, "defaults": (), "spin": ("--task_worker_spin_us=500",)},
        DEFAULTS, "defaults", pause_s=0.001,
    )  # fmt: skip
    runs = _time(
        matmul, tmp_path, [("one", binary), ("defaults", binary), ("spin", binary)], variants
    )
    default_workers = count_local_task_workers(())
    assert runs == {
        "one": (True, "", 1, 6),
        "defaults": (True, "", default_workers, 6),
        "spin": (True, "", default_workers, 6),
    }
    if (os.cpu_count() or 1) >= 2:
        # Skip-proof: with two cores the defaults run more than one worker.
        assert default_workers >= 2


def test_without_the_defaults_spelled_back_a_device_inherits_the_set_before_it(
    matmul: tuple[Path, Path], tmp_path: Path
) -> None:
    # What the defaults guard against, shown: with nothing spelled back, the "defaults" device
    # runs under the one-worker set created before it.
    binary = matmul[0]
    variants = RuntimeVariants({"one": ONE_WORKER, "defaults": ()}, (), "defaults")
    runs = _time(matmul, tmp_path, [("one", binary), ("defaults", binary)], variants)
    assert runs == {"one": (True, "", 1, 6), "defaults": (True, "", 1, 6)}


def test_a_variant_whose_outputs_differ_and_one_that_changes_nothing_are_not_timed(
    matmul: tuple[Path, Path], tmp_path: Path
) -> None:
    binary = matmul[0]
    # The same signature, each output one more than the matmul's.
    shifted = _compile(tmp_path, "shifted", MATMUL_MODEL.replace("0.0 : f32", "1.0 : f32"))
    same_workers = (f"--task_topology_max_group_count={count_local_task_workers(())}",)
    variants = RuntimeVariants(
        {"defaults": (), "shifted": ONE_WORKER, "same": same_workers, "one": ONE_WORKER},
        DEFAULTS, "defaults", skip_at_reference_workers=("same", "one"),
    )  # fmt: skip
    runs = _time(
        matmul, tmp_path,
        [("defaults", binary), ("shifted", shifted), ("same", binary), ("one", binary)], variants,
    )  # fmt: skip
    workers = count_local_task_workers(())
    skipped = (False, f"skipped: {workers} workers, as with defaults", workers, 0)
    assert runs == {
        "defaults": (True, "", workers, 6),
        "shifted": (False, "outputs differ from defaults (output 0: 8192 of 8192 elements differ)", 1, 0),
        "same": skipped,
        # One worker is timed where the defaults run more (CI's two cores and up).
        "one": (True, "", 1, 6) if workers > 1 else skipped,
    }  # fmt: skip


def test_a_session_timed_in_more_batches_keeps_the_rounds_its_times_hold(tmp_path: Path) -> None:
    """A comparison timed again while undecided (`time_pair_until_decided`) holds more rounds
    than it asked for: the session's file counts the rounds its times hold, so the times split
    back into the rounds they were timed in; a model that did not run keeps its reason."""
    comparison = ModelComparison(
        [("default", tmp_path / "a.vmfb"), ("tuned", tmp_path / "b.vmfb")], "main",
        tmp_path / "inputs.npz", tmp_path, "local-task", rounds=2, repetitions=3,
    )  # fmt: skip
    runs = {
        "default": ModelRun("default", (), tuple(float(t) for t in range(12)), ""),
        "tuned": ModelRun("tuned", (), (), "it crashed"),
    }
    write_session_times(comparison, runs)
    record = json.loads((tmp_path / SESSION_TIMES).read_text())
    assert (record["rounds"], record["calls_per_round"]) == (4, 3)
    assert record["times_ms"] == {"default": list(range(12)), "tuned": []}
    assert record["reasons"] == {"tuned": "it crashed"}
