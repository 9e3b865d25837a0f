"""The learned cost model: labels, deterministic training, ranking, online updates, storage."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from ireetune.core.errors import IreetuneError
from ireetune.search.ranker import (
    TrainingGroup,
    explain_ranker,
    fingerprint_groups,
    load_ranker,
    relevance_labels,
    save_ranker,
    train_ranker,
    update_ranker,
)

NAMES = ("tile", "noise")


def _group(name: str, seed: int, best_tile: float, rows: int = 60) -> TrainingGroup:
    """A problem whose time grows with the distance of `tile` from `best_tile`; `noise` is
    unrelated to the time."""
    rng = random.Random(seed)
    features = []
    times: list[float | None] = []
    for _ in range(rows):
        tile = float(rng.randrange(1, 17))
        features.append((tile, rng.random()))
        times.append(1.0 + abs(tile - best_tile) * 0.5)
    return TrainingGroup(name, tuple(features), tuple(times))


GROUPS = [_group(f"problem {i}", i, best_tile=8.0) for i in range(4)]


def test_relevance_grades_closeness_to_the_best_in_log_time() -> None:
    # Best: 15; 8x slower or failed: 0; 2x slower: two thirds of the way up (log scale).
    assert relevance_labels([1.0, 2.0, 4.0, 8.0, 16.0, None, 1.02]) == [15, 10, 5, 0, 0, 0, 14]


def test_relevance_of_a_problem_where_nothing_ran_is_zero() -> None:
    assert relevance_labels([None, None]) == [0, 0]


def test_training_is_deterministic_for_a_seed() -> None:
    first = train_ranker(GROUPS, "toy/v1", NAMES, seed=3)
    second = train_ranker(GROUPS, "toy/v1", NAMES, seed=3)
    assert first.model_text == second.model_text
    assert first.groups == ("problem 0", "problem 1", "problem 2", "problem 3")
    assert first.rows == 240


def test_the_model_ranks_an_unseen_problem_by_what_it_learned() -> None:
    model = train_ranker(GROUPS, "toy/v1", NAMES)
    scores = model.predict([(8.0, 0.3), (4.0, 0.9), (1.0, 0.5), (16.0, 0.1)])
    ranking = sorted(range(4), key=lambda i: -scores[i])
    assert ranking[0] == 0
    assert ranking[-2:] in ([2, 3], [3, 2])


def test_explanation_puts_the_informative_feature_first() -> None:
    model = train_ranker(GROUPS, "toy/v1", NAMES)
    shares = explain_ranker(model)
    assert [name for name, _ in shares] == ["tile", "noise"]
    assert shares[0][1] > 0.8
    assert sum(share for _, share in shares) == pytest.approx(1.0)


def test_an_online_update_follows_the_current_problems_measurements() -> None:
    model = train_ranker(GROUPS, "toy/v1", NAMES)
    # On this problem small tiles are fast: the opposite of what the model learned.
    rng = random.Random(99)
    tiles = [float(rng.randrange(1, 17)) for _ in range(24)]
    measured = TrainingGroup(
        "current", tuple((t, 0.5) for t in tiles), tuple(1.0 + 0.5 * (t - 1.0) for t in tiles)
    )
    updated = update_ranker(model, measured)
    before = model.predict([(1.0, 0.5), (8.0, 0.5)])
    after = updated.predict([(1.0, 0.5), (8.0, 0.5)])
    assert before[0] < before[1]
    assert after[0] > after[1]
    assert updated.groups == (*model.groups, "current")


def test_an_update_with_fewer_than_two_measurements_changes_nothing() -> None:
    model = train_ranker(GROUPS, "toy/v1", NAMES)
    lone = TrainingGroup("current", ((3.0, 0.5), (4.0, 0.5)), (2.0, None))
    assert update_ranker(model, lone) is model


def test_training_without_two_measured_candidates_anywhere_is_refused() -> None:
    with pytest.raises(IreetuneError) as excinfo:
        train_ranker([TrainingGroup("empty", ((1.0, 0.0),), (None,))], "toy/v1", NAMES)
    assert str(excinfo.value) == "no problem with two measured candidates to train a cost model on"


def test_a_stored_model_predicts_as_the_trained_one_and_is_small(tmp_path: Path) -> None:
    model = train_ranker(GROUPS, "toy/v1", NAMES)
    path = tmp_path / "models" / "toy.json"
    save_ranker(model, path)
    loaded = load_ranker(path)
    rows = [(float(t), 0.5) for t in range(1, 17)]
    assert loaded.predict(rows) == model.predict(rows)
    assert (loaded.family, loaded.feature_names, loaded.groups) == ("toy/v1", NAMES, model.groups)
    assert path.stat().st_size < 1024 * 1024


def test_a_damaged_model_file_is_refused_in_one_line(tmp_path: Path) -> None:
    model = train_ranker(GROUPS, "toy/v1", NAMES)
    path = tmp_path / "toy.json"
    save_ranker(model, path)
    document = json.loads(path.read_text())
    document["model"] = "tree\nnot a model"
    path.write_text(json.dumps(document))
    with pytest.raises(IreetuneError) as excinfo:
        load_ranker(path)
    assert str(excinfo.value).startswith(f"{path}: damaged cost model (")


def test_the_fingerprint_changes_with_the_data_and_not_with_group_order() -> None:
    first = fingerprint_groups(GROUPS, "toy/v1", 0)
    assert fingerprint_groups(list(reversed(GROUPS)), "toy/v1", 0) == first
    assert fingerprint_groups(GROUPS[:3], "toy/v1", 0) != first
    assert fingerprint_groups(GROUPS, "toy/v1", 1) != first


def test_the_fingerprint_changes_with_the_relevance_range(monkeypatch: pytest.MonkeyPatch) -> None:
    # A model trained under other labels must not be taken from the cache.
    first = fingerprint_groups(GROUPS, "toy/v1", 0)
    monkeypatch.setattr("ireetune.search.ranker.RELEVANCE_RANGE", 32.0)
    assert fingerprint_groups(GROUPS, "toy/v1", 0) != first
