"""The searched flag phase with real compiles and timings, and runtime flags in the timing worker
(llvm-cpu, local-task, a small matmul model)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ireetune.compile.pool import CompileBatch, CompileOutcome
from ireetune.core.budget import SHARES
from ireetune.core.errors import IreetuneError
from ireetune.core.flag_space import (
    DEFAULT_FLAGS,
    FlagSet,
    FlagSpace,
    RuntimeOption,
    TunedOption,
    make_flag_set,
    propose_flag_sets,
    spell_configuration,
)
from ireetune.core.input_files import read_input_text
from ireetune.decision.rules import DecisionRule
from ireetune.decision.stats import Basis, estimate_speedup, split_rounds
from ireetune.executor import LocalExecutor
from ireetune.flags.file import write_flag_files
from ireetune.flags.model_search import search_model_flags
from ireetune.flags.runtime import (
    RuntimeFlagResult,
    RuntimeTrial,
    best_kept,
    runtime_row,
    search_runtime_flags,
)
from ireetune.flags.strategy import Budget, StrategySettings
from ireetune.flags.trials import (
    FLAG_RULE,
    FlagSearchResult,
    ModelFlagSearch,
    TrialStatus,
    compile_flag_sets,
)
from ireetune.model.timing import (
    SESSION_TIMES,
    ModelComparison,
    ModelRun,
    run_models_side_by_side_here,
)
from ireetune.targets.llvm_cpu.flags import CPU_FLAG_SPACE, CPU_TUNED_OPTIONS
from tests.conftest import CPU_FLAGS


def read_runtime_flags_file(path: Path) -> tuple[str, ...]:
    """Read a runtime flags file (`write_flag_files`): one `--name=value` per line."""
    words = read_input_text(path, "runtime flags file", allow_empty=True).split()
    for word in words:
        if not word.startswith("--") or len(word) == 2:
            raise IreetuneError(f"{path}: {word!r} is not a runtime flag (--name[=value])")
    return tuple(words)


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
    one = runtime[("--task_topology_max_group_count=1",)]
    assert one["workers"] == 1
    if (os.cpu_count() or 1) > 1:
        # Timed beside the defaults in the first session, which gives its first interval.
        assert one["first_speedup"] is not None and one["first_low"] <= one["first_high"]
        # As many workers as the defaults' (one per core): nothing to time.
        skipped = runtime[("--task_topology_max_group_count=64",)]
        assert skipped["verdict"].startswith("skipped:") and skipped["speedup"] is None
    # Every set in one session (one process), the best again in a second one at most.
    sessions = sorted(path.name for path in (tmp_path / "runtime").iterdir())
    assert (
        sessions == ["session_1", "session_2"][: 1 + any(r["confirmed"] for r in runtime.values())]
    )
    assert result.runtime_flags == tuple(recorded["runtime"]["winner"])
    # The first session's raw times stay in its folder, the defaults' among them.
    first = json.loads((tmp_path / "runtime" / "session_1" / SESSION_TIMES).read_text())
    assert sorted(first["times_ms"]) == ["defaults", "set_1", "set_2"]
    assert len(first["times_ms"]["defaults"]) == first["rounds"] * first["calls_per_round"]


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


class PlantedTimesExecutor(LocalExecutor):
    """Compile and run for real; scale each binary's times by a planted factor of its flags (the
    timing of a tiny model on a loaded machine cannot rank sets reliably, the search logic is
    what is tested)."""

    def __init__(self, factors: dict[str, float]) -> None:
        self.factors = factors
        self.flags_of: dict[Path, tuple[str, ...]] = {}

    def compile(self, batch: CompileBatch) -> Iterator[CompileOutcome]:
        for job in batch.jobs:
            self.flags_of[job.request.output_path] = job.request.phase_flags
        return super().compile(batch)

    def run_models_side_by_side(self, comparison: ModelComparison) -> dict[str, ModelRun]:
        runs = super().run_models_side_by_side(comparison)
        paths = dict(comparison.models)
        planted = {}
        for model_id, run in runs.items():
            factor = math.prod(self.factors.get(f, 1.03) for f in self.flags_of[paths[model_id]])
            # A constant time per call: the planted factor alone decides.
            planted[model_id] = replace(run, times_ms=tuple(factor for _ in run.times_ms))
        return planted


def test_the_search_finds_a_planted_best_outside_the_old_list_on_a_real_model(
    matmul_model: Path, matmul_inputs: Path, tmp_path: Path
) -> None:
    ukernels = "--iree-llvmcpu-enable-ukernels"
    planted = {
        "--iree-opt-data-tiling": 0.6, f"{ukernels}=mmt4d": 0.9,
        f"{DISTRIBUTION}=32": 0.85, "--iree-llvmcpu-number-of-threads=2": 0.9,
    }  # fmt: skip
    # The old list's best set as the seed, and four of the CPU options with fewer values (each
    # changes this model's binary): a handful of real compiles.
    values = {
        "--iree-opt-data-tiling": ("true",), ukernels: ("mmt4d", "all"),
        DISTRIBUTION: ("32", "128"), "--iree-llvmcpu-number-of-threads": ("2",),
    }  # fmt: skip
    space = FlagSpace(
        options=(),
        combinations=(("--iree-opt-data-tiling", f"{ukernels}=mmt4d"),),
        tuned=tuple(
            replace(o, values=values[o.name]) for o in CPU_TUNED_OPTIONS if o.name in values
        ),
    )
    assert frozenset(planted) not in {
        frozenset(s.flags) for s in propose_flag_sets(CPU_FLAG_SPACE, 100)
    }
    search = _search(
        matmul_model, matmul_inputs, space, rule=DecisionRule(threshold=1.0),
        strategy=StrategySettings(rung_rounds=(1, 2)),
    )  # fmt: skip
    result = search_model_flags(PlantedTimesExecutor(planted), search, tmp_path)
    assert frozenset(result.winner.flags) == frozenset(planted)
    assert result.winner_binary is not None and result.winner_binary.is_file()
    # The sets not kept lost their binaries; the default's and the winner's stay.
    assert {p.name for p in tmp_path.glob("*.vmfb")} == {"0.vmfb", result.winner_binary.name}
    # Every compile was real: the winner's binary differs from the default's.
    assert result.trials[0].binary_hash != next(
        t.binary_hash for t in result.trials if t.flag_set == result.winner
    )


CONV_MATMUL_MODEL = """
func.func @main(%img: tensor<1x8x18x18xf32>, %filt: tensor<16x8x3x3xf32>, %w: tensor<256x64xf32>) -> tensor<16x64xf32> {
  %zero = arith.constant 0.0 : f32
  %ce = tensor.empty() : tensor<1x16x16x16xf32>
  %cz = linalg.fill ins(%zero : f32) outs(%ce : tensor<1x16x16x16xf32>) -> tensor<1x16x16x16xf32>
  %c = linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
       ins(%img, %filt : tensor<1x8x18x18xf32>, tensor<16x8x3x3xf32>) outs(%cz : tensor<1x16x16x16xf32>) -> tensor<1x16x16x16xf32>
  %flat = tensor.collapse_shape %c [[0, 1], [2, 3]] : tensor<1x16x16x16xf32> into tensor<16x256xf32>
  %me = tensor.empty() : tensor<16x64xf32>
  %mz = linalg.fill ins(%zero : f32) outs(%me : tensor<16x64xf32>) -> tensor<16x64xf32>
  %m = linalg.matmul ins(%flat, %w : tensor<16x256xf32>, tensor<256x64xf32>) outs(%mz : tensor<16x64xf32>) -> tensor<16x64xf32>
  %s = linalg.softmax dimension(1) ins(%m : tensor<16x64xf32>) outs(%me : tensor<16x64xf32>) -> tensor<16x64xf32>
  return %s : tensor<16x64xf32>
}
"""


def test_the_declared_defaults_are_the_compilers(tmp_path: Path) -> None:
    # Each CPU option with a value for default (not a boolean, not the vectorization strategy's
    # heuristic), spelled at its declared default with what it depends on, must compile to the
    # default's binary.
    model = tmp_path / "model.mlir"
    model.write_text(CONV_MATMUL_MODEL)
    options = [o for o in CPU_TUNED_OPTIONS if o.default not in ("false", "heuristic")]
    assert len(options) == 13
    flag_sets = {0: DEFAULT_FLAGS, 1: FlagSet(("--iree-opt-data-tiling",))}
    for index, option in enumerate(options, start=2):
        dependencies = {name: value for name, value in option.depends_on}
        flags = spell_configuration({**dependencies, option.name: option.default}, options)
        flag_sets[index] = make_flag_set(
            f"{option.name}={option.default}" if f == option.name else f for f in flags.flags
        )
    trials = compile_flag_sets(
        LocalExecutor(), model, tuple(CPU_FLAGS), flag_sets, tmp_path, 2, 120
    )
    assert [t.reason for t in trials] == [""] * len(trials)
    expected = {
        index: trials[1 if option.depends_on else 0].binary_hash
        for index, option in enumerate(options, start=2)
    }
    assert {i: trials[i].binary_hash for i in expected} == expected


class ClockedExecutor(PlantedTimesExecutor):
    """PlantedTimesExecutor on a fake clock that a timing session moves 100 s forward."""

    def __init__(self, factors: dict[str, float]) -> None:
        super().__init__(factors)
        self.now = 0.0

    def run_models_side_by_side(self, comparison: ModelComparison) -> dict[str, ModelRun]:
        runs = super().run_models_side_by_side(comparison)
        self.now += 100.0
        return runs


SEED = ("--iree-opt-data-tiling", "--iree-llvmcpu-enable-ukernels=mmt4d")


def _search_with_a_spent_budget(
    model: Path, inputs: Path, space: FlagSpace, work_dir: Path
) -> FlagSearchResult:
    """Search `space` with a 100 s budget on a clock that each timing session moves 100 s (the
    seed's binary made twice as fast): the first session spends the whole budget."""
    executor = ClockedExecutor({"--iree-opt-data-tiling": 0.5})
    search = _search(
        model, inputs, space, rule=DecisionRule(threshold=1.0),
        strategy=StrategySettings(rung_rounds=(1,)), time_budget_s=100.0,
        clock=lambda: executor.now,
    )  # fmt: skip
    return search_model_flags(executor, search, work_dir)


def test_a_budget_spent_while_searching_still_confirms_the_best_set_found(
    matmul_model: Path, matmul_inputs: Path, tmp_path: Path
) -> None:
    # The first timing session (the seed against the default) spends the whole budget: the set it
    # found faster must still be confirmed and kept, not dropped for the budget.
    space = FlagSpace(
        options=(),
        combinations=(SEED,),
        tuned=(TunedOption(DISTRIBUTION, ("4",), "64", "a real change"),),
    )
    result = _search_with_a_spent_budget(matmul_model, matmul_inputs, space, tmp_path)
    assert frozenset(result.winner.flags) == frozenset(SEED)
    assert result.estimate is not None and result.estimate.speedup > 1.5
    assert "time budget spent: the 1 best set(s) found were confirmed anyway" in result.notes


class CompileClockExecutor(LocalExecutor):
    """Compile and run for real on a fake clock that each compile batch moves 10 s forward;
    record each batch's size."""

    def __init__(self) -> None:
        self.now = 0.0
        self.batch_sizes: list[int] = []
        self.timeouts: list[float] = []

    def compile(self, batch: CompileBatch) -> Iterator[CompileOutcome]:
        self.batch_sizes.append(len(batch.jobs))
        self.timeouts.append(batch.timeout_s)
        self.now += 10.0
        return super().compile(batch)


def test_the_flag_search_compiles_no_more_sets_once_its_budget_is_spent(
    matmul_model: Path, matmul_inputs: Path, tmp_path: Path
) -> None:
    # Exploring may use 80% of 31.25 s: 25 s. The default's compile ends at 10 s, the first two
    # seeds' at 20 and 30 s; the other two seeds are not compiled (a whole batch compiled after
    # the deadline took ShuffleNet's dispatch phase a minute and a half).
    executor = CompileClockExecutor()
    seeds = tuple((f"{DISTRIBUTION}={size}",) for size in (4, 8, 16, 32))
    space = FlagSpace(options=(), combinations=seeds, tuned=())
    search = _search(
        matmul_model, matmul_inputs, space, jobs=1, time_budget_s=31.25,
        strategy=StrategySettings(rung_rounds=(1,)), clock=lambda: executor.now,
    )  # fmt: skip
    result = search_model_flags(executor, search, tmp_path)
    assert [t.flag_set.flags for t in result.trials[1:]] == [seeds[0], seeds[1]]
    assert executor.batch_sizes == [1, 1, 1]
    assert "time budget spent: 2 proposed set(s) were not compiled" in result.notes


def test_a_flag_set_s_compile_ends_with_the_flag_phase(
    matmul_model: Path, matmul_inputs: Path, tmp_path: Path
) -> None:
    # The phase ends at 31.25 s; the seeds' compiles start at 10 and 20 s, so each may run until
    # then at the latest, not its usual 120 s (inception_v2's 226 s compile of one set took the
    # dispatch phase's time). The default's, at 0 s, is never cut: without it there is no search.
    executor = CompileClockExecutor()
    seeds = tuple((f"{DISTRIBUTION}={size}",) for size in (4, 8))
    space = FlagSpace(options=(), combinations=seeds, tuned=())
    search = _search(
        matmul_model, matmul_inputs, space, jobs=1, time_budget_s=31.25, compile_timeout_s=120.0,
        strategy=StrategySettings(rung_rounds=(1,)), clock=lambda: executor.now,
    )  # fmt: skip
    search_model_flags(executor, search, tmp_path)
    assert executor.timeouts == [120.0, 21.25, 11.25]
    # Without a budget, the usual timeout.
    unbounded = CompileClockExecutor()
    search = replace(search, time_budget_s=None, clock=lambda: unbounded.now)
    search_model_flags(unbounded, search, tmp_path / "unbounded")
    assert unbounded.timeouts == [120.0] * 3


def test_the_runtime_options_keep_a_share_of_a_spent_flag_budget() -> None:
    # No budget: no deadline. A flag phase that has spent its budget (deadline 100 passed at
    # 250) still gives the runtime options SHARES.flag_runtime of it from now; one with time left
    # keeps its own deadline.
    assert SHARES.runtime_deadline(None, None, 250.0) is None
    assert SHARES.runtime_deadline(100.0, 100.0, 250.0) == 250.0 + SHARES.flag_runtime * 100.0
    assert SHARES.runtime_deadline(300.0, 100.0, 250.0) == 300.0


def test_a_flag_search_that_spent_its_budget_still_times_the_runtime_options(
    matmul_model: Path, matmul_inputs: Path, tmp_path: Path
) -> None:
    # Each session moves the clock 100 s: the seed's session spends the flag phase's whole
    # budget (100 s), and its confirmation runs past it. The runtime search still runs its first
    # session on the share it keeps.
    space = FlagSpace(
        options=(),
        combinations=(SEED,),
        runtime=(RuntimeOption("--task_worker_spin_us", ("500",), "0", "spin"),),
    )
    result = _search_with_a_spent_budget(matmul_model, matmul_inputs, space, tmp_path)
    assert "time budget spent: runtime defaults kept" not in result.notes
    runtime = json.loads(result.trials_path.read_text())["runtime"]
    assert [t["flags"] for t in runtime["trials"]] == [["--task_worker_spin_us=500"]]
    assert (tmp_path / "runtime" / "session_1").is_dir()


class SessionsExecutor(LocalExecutor):
    """Run every comparison for real and keep it with its runs; a session moves the clock
    `now` 100 s forward (for the budget)."""

    def __init__(self) -> None:
        self.sessions: list[tuple[ModelComparison, dict[str, ModelRun]]] = []
        self.now = 0.0

    def run_models_side_by_side(self, comparison: ModelComparison) -> dict[str, ModelRun]:
        runs = super().run_models_side_by_side(comparison)
        self.sessions.append((comparison, runs))
        self.now += 100.0
        return runs


def _default_binary(model: Path, inputs: Path, folder: Path) -> Path:
    search = _search(model, inputs, FlagSpace(()))
    compile_flag_sets(LocalExecutor(), model, search.base_flags, {0: DEFAULT_FLAGS}, folder, 1, 120)
    return folder / "0.vmfb"


def _paired(runs: dict[str, ModelRun], model_id: str) -> object:
    """The paired estimate of one session's run against the same session's defaults."""
    return estimate_speedup(
        split_rounds(runs["defaults"].times_ms, 2), split_rounds(runs[model_id].times_ms, 2),
        Basis.MODEL,
    )  # fmt: skip


RUNTIME_SPACE_OPTIONS = (
    RuntimeOption("--task_topology_max_group_count", ("1", "64"), "64", "workers"),
    RuntimeOption("--task_worker_spin_us", ("500",), "0", "spin"),
)


def test_the_runtime_search_times_every_set_beside_the_defaults_then_confirms_the_best(
    matmul_model: Path, matmul_inputs: Path, tmp_path: Path
) -> None:
    binary = _default_binary(matmul_model, matmul_inputs, tmp_path)
    # Every timed set clears a threshold of 0: both are confirmed, and both are kept.
    search = _search(
        matmul_model, matmul_inputs, FlagSpace((), runtime=RUNTIME_SPACE_OPTIONS),
        rule=DecisionRule(threshold=0.0),
    )  # fmt: skip
    executor = SessionsExecutor()
    result = search_runtime_flags(executor, search, binary, tmp_path / "runtime", Budget())
    one, all_cores, spin = (
        ("--task_topology_max_group_count=1",), ("--task_topology_max_group_count=64",),
        ("--task_worker_spin_us=500",),
    )  # fmt: skip
    (first, first_runs), (second, second_runs) = executor.sessions
    # The first session: the defaults and every set, each on a device of its own.
    assert first.models == [(m, binary) for m in ("defaults", "set_1", "set_2", "set_3")]
    assert first.runtime_variants is not None
    assert dict(first.runtime_variants.flags) == {
        "defaults": (), "set_1": one, "set_2": all_cores, "set_3": spin,
    }  # fmt: skip
    assert first.runtime_variants.defaults == (
        "--task_topology_max_group_count=64", "--task_worker_spin_us=0",
    )  # fmt: skip
    assert (first.runtime_variants.pause_s, first.rounds) == (0.02, 2)
    by_flags = {t.flags: t for t in result.trials}
    assert by_flags[one].workers == 1
    if (os.cpu_count() or 1) > 1:
        assert by_flags[all_cores].workers > 1
        assert by_flags[all_cores].verdict.startswith("skipped:")
        assert by_flags[all_cores].estimate is None
    # Each set's first interval pairs its rounds with the defaults' rounds of the same session.
    assert (by_flags[one].first, by_flags[spin].first) == (
        _paired(first_runs, "set_1"), _paired(first_runs, "set_3"),
    )  # fmt: skip
    assert by_flags[one].first is not None and by_flags[one].first.rounds == 2
    # The second session, a fresh process: the defaults and the two timed sets, best first.
    assert second.rounds == 10
    assert second.runtime_variants is not None
    confirmed = dict(second.runtime_variants.flags)
    assert sorted(confirmed.values()) == sorted([(), one, spin])
    ids = {flags: model_id for model_id, flags in confirmed.items()}
    assert (by_flags[one].estimate, by_flags[spin].estimate) == (
        _paired(second_runs, ids[one]), _paired(second_runs, ids[spin]),
    )  # fmt: skip
    assert [(t.verdict, t.confirmed) for t in (by_flags[one], by_flags[spin])] == [
        ("kept", True), ("kept", True),
    ]  # fmt: skip
    best = max(
        (by_flags[one], by_flags[spin]), key=lambda t: t.estimate.speedup if t.estimate else 0
    )
    assert (result.flags, result.estimate) == (best.flags, best.estimate)
    row = runtime_row(result)
    assert row["winner"] == list(best.flags)
    assert [r["flags"] for r in row["trials"]] == [list(one), list(all_cores), list(spin)]  # type: ignore[index,union-attr]


def test_a_budget_spent_by_the_first_runtime_session_confirms_nothing(
    matmul_model: Path, matmul_inputs: Path, tmp_path: Path
) -> None:
    binary = _default_binary(matmul_model, matmul_inputs, tmp_path)
    search = _search(
        matmul_model, matmul_inputs, FlagSpace((), runtime=RUNTIME_SPACE_OPTIONS[1:]),
        rule=DecisionRule(threshold=0.0),
    )  # fmt: skip
    executor = SessionsExecutor()
    budget = Budget(50.0, lambda: executor.now)
    result = search_runtime_flags(executor, search, binary, tmp_path / "runtime", budget)
    assert len(executor.sessions) == 1
    assert (result.flags, result.estimate) == ((), None)
    assert [(t.verdict, t.confirmed) for t in result.trials] == [
        ("not confirmed: time budget spent", False)
    ]
    assert result.notes == ("time budget spent: 1 runtime set(s) not confirmed",)
    # Once spent, no session starts at all.
    assert search_runtime_flags(executor, search, binary, tmp_path / "again", budget) == (
        RuntimeFlagResult(notes=("time budget spent: runtime defaults kept",))
    )
    assert len(executor.sessions) == 1


def test_the_kept_runtime_set_with_the_highest_lower_bound_wins() -> None:
    # One set bimodal (4.5x in three rounds, 2.2x in one), one steady at 4.4x: the flag phase's
    # rule keeps the steady one, a rule ranking by the point the bimodal one.
    base = [[10.0, 10.1], [10.2, 10.0], [9.9, 10.0], [10.1, 9.9]]
    bimodal = [[t * f for t in r] for r, f in zip(base, (0.22, 0.45, 0.22, 0.22), strict=True)]
    steady = [[t * 0.227 for t in r] for r in base]
    trials = [
        RuntimeTrial(("--task_worker_spin_us=50",), 2,
                     estimate_speedup(base, bimodal, Basis.MODEL), "kept"),
        RuntimeTrial(("--task_worker_spin_us=500",), 2,
                     estimate_speedup(base, steady, Basis.MODEL), "kept"),
        RuntimeTrial(("--task_topology_favor=latency",), 2, None, "rejected"),
    ]  # fmt: skip
    assert best_kept(trials, FLAG_RULE) == trials[1]
    assert best_kept(trials, DecisionRule(threshold=1.01)) == trials[0]
    assert best_kept(trials[2:], FLAG_RULE) is None
