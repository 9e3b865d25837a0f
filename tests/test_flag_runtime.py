"""The searched flag phase with real compiles and timings, and runtime flags in the timing worker
(llvm-cpu, local-task, a small matmul model)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from ireetune.core.flag_space import DEFAULT_FLAGS, FlagSpace, RuntimeOption, TunedOption
from ireetune.errors import IreetuneError
from ireetune.executor import LocalExecutor
from ireetune.flags.file import read_runtime_flags_file, write_flag_files
from ireetune.flags.model_search import ModelFlagSearch, search_model_flags
from ireetune.flags.strategy import StrategySettings
from ireetune.flags.trials import TrialStatus, compile_flag_sets
from ireetune.model.timing import ModelComparison, run_models_side_by_side_here
from tests.conftest import CPU_FLAGS

ONE_WORKER = "--task_topology_max_group_count=1"
IM2COL = "--iree-global-opt-use-im2col-for-convs"
DISTRIBUTION = "--iree-llvmcpu-distribution-size"


@pytest.fixture(scope="module")
def matmul_inputs(matmul_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(0)
    inputs = tmp_path_factory.mktemp("matmul_inputs") / "inputs.npz"
    np.savez(
        inputs,
        arg0=rng.standard_normal((64, 96)).astype(np.float32),
        arg1=rng.standard_normal((96, 128)).astype(np.float32),
    )
    return inputs


def _search(model: Path, inputs: Path, space: FlagSpace, **fields: object) -> ModelFlagSearch:
    return ModelFlagSearch(
        source_path=model, function="main", inputs_path=inputs, base_flags=tuple(CPU_FLAGS),
        user_flags=(), device="local-task", space=space, rounds=2, repetitions=2,
        **fields,  # type: ignore[arg-type]
    )  # fmt: skip


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two cores to see one worker less")
def test_runtime_flags_reach_the_timing_worker(
    matmul_model: Path, matmul_inputs: Path, tmp_path: Path
) -> None:
    binary = tmp_path / "matmul.vmfb"
    search = _search(matmul_model, matmul_inputs, FlagSpace(()))
    compile_flag_sets(
        LocalExecutor(), matmul_model, search.base_flags, {0: DEFAULT_FLAGS}, tmp_path, 1, 120
    )
    (tmp_path / "0.vmfb").rename(binary)
    workers = {}
    for name, flags in {"defaults": (), "one": (ONE_WORKER,)}.items():
        runs = run_models_side_by_side_here(
            ModelComparison(
                [("model", binary)], "main", matmul_inputs, tmp_path, "local-task", 2,
                runtime_flags=flags,
            )
        )  # fmt: skip
        assert runs["model"].ok and len(runs["model"].times_ms) == 2
        workers[name] = runs["model"].workers
    assert workers["one"] == 1 and workers["defaults"] > 1


def test_the_searched_phase_steps_through_options_and_searches_runtime_flags(
    matmul_model: Path, matmul_inputs: Path, tmp_path: Path
) -> None:
    space = FlagSpace(
        options=(),
        tuned=(
            # No convolution in a matmul model: the binary equals the default's.
            TunedOption(IM2COL, ("true",), "false", "no effect here"),
            # Distribution tiles of 4 elements: a different binary (measured 2.4x slower).
            TunedOption(DISTRIBUTION, ("4",), "64", "a real change"),
        ),
        runtime=(RuntimeOption("--task_topology_max_group_count", ("1", "64"), "64", "workers"),),
    )
    settings = StrategySettings(rung_rounds=(2, 3), min_gain=1.0e9)
    result = search_model_flags(
        LocalExecutor(), _search(matmul_model, matmul_inputs, space, strategy=settings), tmp_path
    )
    by_flags = {t.flag_set.flags: t for t in result.trials}
    assert [t.status for t in result.trials] == [
        TrialStatus.DEFAULT, TrialStatus.NO_EFFECT, TrialStatus.TIMED,
    ]  # fmt: skip
    assert by_flags[(IM2COL,)].times_ms == ()
    assert len(by_flags[(f"{DISTRIBUTION}=4",)].times_ms) in (4, 6)
    recorded = json.loads(result.trials_path.read_text())
    # No seeds here: the default's single changes, then no move (min_gain).
    assert recorded["notes"][0].startswith("step 1: 2 single changes of default; best ")
    assert {tuple(row["flags"]) for row in recorded["search"]} == {
        (),
        (IM2COL,),
        (f"{DISTRIBUTION}=4",),
    }
    runtime = {tuple(row["flags"]): row for row in recorded["runtime"]["trials"]}
    assert runtime[("--task_topology_max_group_count=1",)]["workers"] == 1
    if (os.cpu_count() or 1) > 1:
        # As many workers as the defaults' (one per core): nothing to time.
        skipped = runtime[("--task_topology_max_group_count=64",)]
        assert skipped["verdict"].startswith("skipped:") and skipped["speedup"] is None
    assert result.runtime_flags == tuple(recorded["runtime"]["winner"])


def test_a_spent_budget_stops_the_search_after_the_default(
    matmul_model: Path, matmul_inputs: Path, tmp_path: Path
) -> None:
    space = FlagSpace(
        options=(),
        tuned=(TunedOption(DISTRIBUTION, ("4", "128"), "64", "a real change"),),
        runtime=(RuntimeOption("--task_topology_max_group_count", ("1",), "64", "workers"),),
    )
    result = search_model_flags(
        LocalExecutor(), _search(matmul_model, matmul_inputs, space, run_budget_s=0.0), tmp_path
    )
    assert [t.status for t in result.trials] == [TrialStatus.DEFAULT]
    assert (result.winner.flags, result.runtime_flags) == ((), ())
    assert result.notes == (
        "time budget spent: the search stopped there",
        "time budget spent: runtime defaults kept",
    )
    assert not (tmp_path / "runtime").exists() or not any((tmp_path / "runtime").iterdir())


def test_the_runtime_flags_file_sits_beside_the_compile_flags(tmp_path: Path) -> None:
    assert write_flag_files(tmp_path, ("--iree-opt-data-tiling",), (ONE_WORKER,)) == (
        tmp_path / "tuned_flags.txt"
    )
    assert read_runtime_flags_file(tmp_path / "runtime_flags.txt") == (ONE_WORKER,)
    assert write_flag_files(tmp_path / "none", (), ()) is None
    (tmp_path / "bad.txt").write_text("task_worker_spin_us=5\n")
    with pytest.raises(IreetuneError) as excinfo:
        read_runtime_flags_file(tmp_path / "bad.txt")
    assert "is not a runtime flag" in str(excinfo.value)
