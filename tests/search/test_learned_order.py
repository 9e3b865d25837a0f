"""The learned ordering: CPU features, where models come from, and the tuner using one."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from ireetune.core.candidate import Knobs, make_knobs
from ireetune.core.errors import IreetuneError
from ireetune.core.features import FactValue, FeatureExtractor
from ireetune.core.target import SpaceRequest, space_for
from ireetune.database.keys import describe_target
from ireetune.database.ranker_files import (
    pinned_ranker_path,
    remember_machine_facts,
    remembered_machine_facts,
)
from ireetune.database.store import (
    ResultKey,
    StoredResult,
    TuningDatabase,
    compiler_version,
    config_key,
    problem_key,
)
from ireetune.problem.contraction import ContractionProblem
from ireetune.problem.family import Problem
from ireetune.search.learned_order import (
    OnlineSearch,
    order_pool,
    order_with_ranker,
    plan_rounds,
    rerank_remaining,
)
from ireetune.search.ranker import load_ranker
from ireetune.search.ranker_training import (
    choose_ranker,
    groups_from_results,
    train_pinned_rankers,
)
from ireetune.targets.llvm_cpu.common import CpuFacts
from ireetune.targets.llvm_cpu.features import FEATURE_FAMILY, FEATURE_NAMES
from ireetune.targets.llvm_cpu.target import LlvmCpuTarget

FACTS = CpuFacts("znver4", 64, 32, 32768, 1048576, 2, 32768)
TARGET_KEY = "cpu#test"
COMPILER = compiler_version()
DEVICE = "local-task (test cpu, 2 cores)"


def _matmul(m: int, n: int, k: int) -> ContractionProblem:
    return ContractionProblem(
        op_name="linalg.matmul", loop_sizes=(m, n, k), batch_dims=(), m_dims=(0,), n_dims=(1,),
        k_dims=(2,), lhs_type="f32", rhs_type="f32", output_type="f32",
        indexing_maps=("(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d2, d1)", "(d0, d1, d2) -> (d0, d1)"),
        lhs_shape=(m, k), rhs_shape=(k, n), output_shape=(m, n),
    )  # fmt: skip


RECORDED_FACTS: dict[str, FactValue] = {
    "cpu": FACTS.cpu,
    "native_vector_bytes": FACTS.native_vector_bytes,
    "vector_registers": FACTS.vector_registers,
    "l1_bytes": FACTS.l1_bytes,
    "l2_bytes": FACTS.l2_bytes,
    "threads": FACTS.threads,
    "max_vector_bytes": FACTS.max_vector_bytes,
}


def _target() -> LlvmCpuTarget:
    return LlvmCpuTarget(threads=2)


def _request(problem: Problem) -> SpaceRequest:
    """A problem's request on the recorded machine (no executable target to read facts from)."""
    return SpaceRequest(problem, None, None, 0, RECORDED_FACTS)


def _features(problem: Problem) -> FeatureExtractor:
    extractor = _target().features(_request(problem))
    assert extractor is not None
    return extractor


def _knobs(vec_m: int, vec_k: int, dist_m: int = 64) -> Knobs:
    return make_knobs({"dist_m": dist_m, "dist_n": 64, "vec_k": vec_k, "vec_m": vec_m, "vec_n": 16})


POOL = [_knobs(vec_m, vec_k) for vec_m in (1, 2, 4, 8) for vec_k in (1, 2, 4, 8, 16)]


def _time(knobs: Knobs) -> float:
    """A made-up law: more accumulator rows and longer K tiles are faster."""
    values = dict(knobs)
    return 1.0 / (int(values["vec_m"]) * math.log2(2 * int(values["vec_k"])))


def _stored(key: ResultKey, knobs: Knobs, status: str, speedup: float | None) -> StoredResult:
    return StoredResult(
        key, config_key(knobs), "", status, "", (1.0,), 1.0, 1.0, 1.0, 0.0, 1.0, speedup,
        "session", "2026-11-23T00:00:00+00:00",
    )  # fmt: skip


def _database_rows(problems: list[ContractionProblem]) -> list[StoredResult]:
    rows = []
    for problem in problems:
        # A problem's signature parses its maps in a fresh context: worth computing once.
        key = ResultKey(COMPILER, TARGET_KEY, DEVICE, problem_key(problem), problem.signature)
        for knobs in POOL:
            rows.append(_stored(key, knobs, "measured", _time(POOL[0]) / _time(knobs)))
        rows.append(_stored(key, _knobs(16, 16), "compile-failed", None))
    return rows


PROBLEMS = [_matmul(128, 128, 256), _matmul(256, 128, 128), _matmul(64, 256, 512)]


def test_contraction_features_describe_the_register_block_and_the_tiling() -> None:
    (features,) = _features(_matmul(256, 384, 512)).features([_knobs(8, 16)])
    named = dict(zip(FEATURE_NAMES, features, strict=True))
    assert {
        name: named[name]
        for name in ("is_convolution", "log_m", "log_vec_m", "vec_n_registers",
                     "accumulator_registers", "register_use", "padding_m", "tiles_log", "imbalance")
    } == {
        "is_convolution": 0.0, "log_m": 8.0, "log_vec_m": 3.0, "vec_n_registers": 1.0,
        "accumulator_registers": 8.0, "register_use": 10 / 32, "padding_m": 0.0,
        "tiles_log": math.log2(4 * 6), "imbalance": 0.0,
    }  # fmt: skip


def test_machine_facts_that_are_not_a_cpus_are_refused() -> None:
    with pytest.raises(IreetuneError) as excinfo:
        facts: dict[str, FactValue] = {"cpu": "znver4", "native_vector_bytes": "wide"}
        LlvmCpuTarget().features(SpaceRequest(PROBLEMS[0], None, None, 0, facts))
    assert str(excinfo.value) == "CPU fact native_vector_bytes must be int, got 'wide'"


def test_database_rows_become_one_group_per_problem_with_relative_times() -> None:
    groups = groups_from_results(
        _database_rows(PROBLEMS[:1]), _target(), TARGET_KEY, RECORDED_FACTS
    )
    ((space, group),) = groups
    assert space.family == FEATURE_FAMILY
    assert group.name == f"{PROBLEMS[0].signature} on {DEVICE} ({compiler_version()})"
    assert len(group.features) == len(POOL) + 1
    assert group.times_ms[-1] is None
    assert min(t for t in group.times_ms if t is not None) == pytest.approx(
        _time(_knobs(8, 16)) / _time(POOL[0])
    )


def test_rows_of_another_target_are_not_learned_from() -> None:
    assert (
        groups_from_results(_database_rows(PROBLEMS), _target(), "cpu#other", RECORDED_FACTS) == []
    )


def test_too_few_problems_leave_the_heuristic_in_charge(tmp_path: Path) -> None:
    choice = choose_ranker(
        _target(), _request(PROBLEMS[0]), _database_rows(PROBLEMS[:2]), TARGET_KEY, tmp_path
    )
    assert choice.ranker is None
    assert choice.reason == (
        "heuristic: the database holds 2 problems for this target; a learned model needs 3 "
        "with 16 measured candidates each"
    )


def test_enough_rows_train_a_model_once_and_reuse_it(tmp_path: Path) -> None:
    rows = _database_rows(PROBLEMS)
    first = choose_ranker(_target(), _request(PROBLEMS[0]), rows, TARGET_KEY, tmp_path)
    assert first.ranker is not None
    assert first.reason == "learned: trained on the database (3 problems, 63 rows)"
    (cached,) = tmp_path.glob("*-auto-*.json")
    modified = cached.stat().st_mtime_ns
    second = choose_ranker(_target(), _request(PROBLEMS[0]), rows, TARGET_KEY, tmp_path)
    assert second.ranker is not None and second.ranker.model_text == first.ranker.model_text
    assert cached.stat().st_mtime_ns == modified
    # A grown database trains a new model.
    choose_ranker(
        _target(),
        _request(PROBLEMS[0]),
        [*rows, *_database_rows([_matmul(32, 32, 32)])],
        TARGET_KEY,
        tmp_path,
    )
    assert len(list(tmp_path.glob("*-auto-*.json"))) == 2


def test_the_learned_order_puts_what_the_database_taught_first(tmp_path: Path) -> None:
    choice = choose_ranker(
        _target(), _request(PROBLEMS[0]), _database_rows(PROBLEMS), TARGET_KEY, tmp_path
    )
    assert choice.ranker is not None
    unseen = _matmul(512, 256, 256)
    ordered = order_with_ranker(_features(unseen), choice.ranker, POOL, seed=0)
    fastest = sorted(POOL, key=_time)[:3]
    assert (
        [knobs for knobs, _ in ordered[:3]]
        == fastest
        == [_knobs(8, 16), _knobs(8, 8), _knobs(8, 4)]
    )


def test_rerank_learns_from_the_current_problem(tmp_path: Path) -> None:
    choice = choose_ranker(
        _target(), _request(PROBLEMS[0]), _database_rows(PROBLEMS), TARGET_KEY, tmp_path
    )
    assert choice.ranker is not None
    # On this problem one accumulator row is fastest, the opposite of the database's law.
    measured = [(knobs, float(dict(knobs)["vec_m"])) for knobs in POOL[::2]]
    remaining = POOL[1::2]
    before = order_with_ranker(_features(_matmul(512, 256, 256)), choice.ranker, remaining, seed=0)
    after, updated = rerank_remaining(
        _features(_matmul(512, 256, 256)), choice.ranker, remaining, measured, seed=0
    )
    assert 1 not in [dict(knobs)["vec_m"] for knobs, _ in before[:3]]
    assert [dict(knobs)["vec_m"] for knobs, _ in after[1:3]] == [1, 1]
    assert updated.groups[-1] == "current problem"


def test_a_budget_is_split_into_rounds_when_it_is_large_enough() -> None:
    assert [plan_rounds(n) for n in (1, 15, 16, 32, 33)] == [
        [1], [15], [4, 4, 8], [8, 8, 16], [8, 8, 17]
    ]  # fmt: skip


def test_online_search_takes_each_round_from_what_is_left(tmp_path: Path) -> None:
    choice = choose_ranker(
        _target(), _request(PROBLEMS[0]), _database_rows(PROBLEMS), TARGET_KEY, tmp_path
    )
    assert choice.ranker is not None
    problem = _matmul(512, 256, 256)
    ordered = order_with_ranker(_features(problem), choice.ranker, POOL, seed=0)
    search = OnlineSearch(_features(problem), choice.ranker, ordered, [4, 4, 8], seed=0)
    assert search.first_round == ordered[:4]
    # Here one accumulator row is fastest: after the first round says so, the next prefers it.
    measured = [(knobs, float(dict(knobs)["vec_m"])) for knobs, _ in search.first_round]
    measured += [
        (knobs, float(dict(knobs)["vec_m"])) for knobs in POOL if dict(knobs)["vec_m"] == 1
    ][:3]
    search.learn(measured)
    second = search.next_round()
    search.learn(measured)
    third = search.next_round()
    assert search.rounds_left == 0
    assert (len(second), len(third)) == (4, 8)
    picked = [k for k, _ in (*search.first_round, *second, *third)]
    assert len(set(picked)) == 16
    assert dict(second[0][0])["vec_m"] == 1


def test_a_pinned_model_wins_over_the_database(tmp_path: Path) -> None:
    rows = _database_rows(PROBLEMS)
    remember_machine_facts(tmp_path, TARGET_KEY, _features(PROBLEMS[0]).machine_facts())
    assert remembered_machine_facts(tmp_path) == {
        TARGET_KEY: _features(PROBLEMS[0]).machine_facts()
    }
    ((path, model),) = train_pinned_rankers(rows, tmp_path, [])
    assert path == pinned_ranker_path(tmp_path, FEATURE_FAMILY)
    choice = choose_ranker(_target(), _request(PROBLEMS[0]), [], TARGET_KEY, tmp_path)
    assert choice.ranker is not None and choice.ranker.model_text == model.model_text
    assert choice.reason == f"learned: {path} (3 problems, 63 rows)"
    assert load_ranker(path).groups == model.groups


def test_training_with_nothing_to_learn_from_is_refused(tmp_path: Path) -> None:
    with pytest.raises(IreetuneError) as excinfo:
        train_pinned_rankers([], tmp_path, [])
    assert str(excinfo.value).startswith("nothing to train on:")


def test_the_learned_order_needs_a_model(tmp_path: Path) -> None:
    target, request = _target(), _request(PROBLEMS[0])
    space = space_for(target, PROBLEMS[0])
    with TuningDatabase(tmp_path / "tuning.sqlite") as database:
        with pytest.raises(IreetuneError) as excinfo:
            order_pool(target, space, request, "exe", POOL, database, "learned")
        ordered, reason, model = order_pool(target, space, request, "exe", POOL, database, "auto")
    assert str(excinfo.value).startswith(
        "--order learned: no cost model (heuristic: the database holds 0 problems"
    )
    assert reason.startswith("heuristic: the database holds 0 problems")
    assert model is None
    assert ordered == space.order(request, POOL)


def test_machine_facts_are_kept_whatever_orders_the_pool(tmp_path: Path) -> None:
    target, request = _target(), _request(PROBLEMS[0])
    space = space_for(target, PROBLEMS[0])
    with TuningDatabase(tmp_path / "tuning.sqlite") as database:
        order_pool(target, space, request, "exe", POOL, database, "heuristic")
    assert remembered_machine_facts(tmp_path / "models") == {
        describe_target("cpu", "exe"): _features(PROBLEMS[0]).machine_facts()
    }


def _ireetune(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ireetune.cli", *arguments],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_tuner_orders_with_the_model_the_database_taught(
    matmul_model: Path, tmp_path: Path
) -> None:
    database_path = tmp_path / "tuning.sqlite"
    # A first run learns this machine's target key; the database then gets three problems' rows
    # under that key (made up here: no test can afford to measure them).
    fast = ["--repetitions", "1", "--confirm-rounds", "0", "--min-repetition-time", "0.005"]
    first = _ireetune("tune-dispatch", str(matmul_model), "--num-candidates", "1", "--db", str(database_path), "--output-dir", str(tmp_path / "a"), "--no-progress", *fast)  # fmt: skip
    assert first.returncode == 0, first.stderr
    (run_dir,) = (tmp_path / "a").iterdir()
    info = json.loads((run_dir / "results.json").read_text())
    assert info["ordering"].startswith("heuristic: the database holds 0 problems")
    with TuningDatabase(database_path) as database:
        (stored,) = {r.key.target for r in database.all_results()}
        for row in _database_rows(PROBLEMS):
            database.write(
                StoredResult(
                    ResultKey(row.key.compiler_version, stored, row.key.device, row.key.problem, row.key.signature),
                    *[getattr(row, name) for name in ("config", "compilation_info", "status", "reason", "times_ms", "median_ms", "min_ms", "max_ms", "spread", "baseline_ms", "speedup", "session", "written_at")],
                )
            )  # fmt: skip
    # Sixteen candidates are measured in rounds of 4, 4 and 8, the model re-ranking between them;
    # the rounds' results join the last one's in one confirmation and one decision.
    online = _ireetune("tune-dispatch", str(matmul_model), "--num-candidates", "16", "--retune", "--db", str(database_path), "--output-dir", str(tmp_path / "c"), "--no-progress", "--repetitions", "1", "--confirm-rounds", "1", "--min-repetition-time", "0.005")  # fmt: skip
    assert online.returncode == 0, online.stderr
    (run_dir,) = (tmp_path / "c").iterdir()
    info = json.loads((run_dir / "results.json").read_text())
    # The tuned problem itself has one measured candidate: too few to teach a ranking.
    assert info["ordering"] == (
        "learned: trained on the database (3 problems, 63 rows); online, rounds of 4+4+8"
    )
    (model_path,) = (tmp_path / "models").glob("*-auto-*.json")
    assert model_path.stat().st_size < 1024 * 1024
    explained = _ireetune("model", "explain", "--db", str(database_path))
    assert explained.returncode == 0, explained.stderr
    assert explained.stdout.startswith(f"{model_path.name}: {FEATURE_FAMILY}, trained ")
    records = {c["candidate_id"]: c for c in info["candidates"]}
    assert sorted(records) == list(range(17))
    assert all(records[cid]["status"] not in ("generated", "compiled") for cid in records)
    assert len({json.dumps(c["knobs"], sort_keys=True) for c in records.values()}) == 17
    assert info["outcome"] in ("improved", "no-improvement")
