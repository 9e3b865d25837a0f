"""The ranker, a learned cost model: ranks candidates of a problem by their predicted speed.

The ranker is LightGBM's LambdaRank over the features a target computes for each candidate
(`FeatureExtractor.features`); a query group is one problem's measured candidates, so the ranker
learns what makes a configuration fast relative to the others of its problem, never absolute
times that differ by orders of magnitude between problems. Training is deterministic for a seed
(one thread, `deterministic`), takes well under a second for a few thousand rows, and the stored
ranker is LightGBM's text form (tens of kilobytes).

As measurements of the problem being tuned arrive, `update_ranker` continues boosting from
the trained ranker on those rows alone: the trees it adds learn where the general ranker is wrong
for this problem.

This module knows nothing about targets: features are numbers with names.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ireetune.core.errors import IreetuneError
from ireetune.core.files import write_text_atomically

if TYPE_CHECKING:
    # Imported where used: LightGBM takes a second to load, and most commands never need it.
    import lightgbm

RANKER_FORMAT = "ireetune-cost-model"
RANKER_VERSION = 1
# A candidate this many times slower than the best of its problem gets relevance 0; one grade
# spans a factor of RELEVANCE_RANGE ** (1 / 15) in time (15% at 8). In the leave-one-problem-out
# replay of the 15 recorded CPU spaces (10 seeds), 8 ranked better than 32 on the ten spaces the
# range was first chosen on and on the five recorded after; 32 had looked better on the ten alone
# with 3 seeds (docs/ordering.md, "Choosing the settings").
RELEVANCE_RANGE = 8.0
RELEVANCE_LEVELS = 16
# Rounds of boosting: from all problems, and added per online update from the current one.
TRAINING_ROUNDS = 120
UPDATE_ROUNDS = 20
# Online updates learn fast: a few dozen measurements must be able to overrule the general
# ranker where this problem behaves differently.
UPDATE_LEARNING_RATE = 0.4


@dataclass(frozen=True)
class TrainingGroup:
    """One problem's candidates: a row of features each, and the measured time (None: failed)."""

    name: str
    features: tuple[tuple[float, ...], ...]
    times_ms: tuple[float | None, ...]

    def __post_init__(self) -> None:
        assert len(self.features) == len(self.times_ms), "one time per row of features"


@dataclass(frozen=True)
class Ranker:
    """A trained ranking model with what it was trained on."""

    family: str
    feature_names: tuple[str, ...]
    model_text: str
    groups: tuple[str, ...]
    rows: int
    seed: int
    trained_at: str
    booster: lightgbm.Booster = field(compare=False, repr=False)

    def predict(self, features: Sequence[Sequence[float]]) -> list[float]:
        """Score candidates; higher is predicted faster. Scores compare only within a problem."""
        if not features:
            return []
        matrix = np.asarray(features, dtype=np.float64)
        assert matrix.shape[1] == len(self.feature_names), "features match the model's"
        return [float(score) for score in self.booster.predict(matrix, num_threads=1)]


def relevance_labels(times_ms: Sequence[float | None]) -> list[int]:
    """Grade candidates of one problem: the fastest gets RELEVANCE_LEVELS - 1, a candidate
    RELEVANCE_RANGE times slower (or a failed one) gets 0, linearly in log time between."""
    measured = [t for t in times_ms if t is not None and t > 0]
    if not measured:
        return [0] * len(times_ms)
    best = min(measured)
    top = RELEVANCE_LEVELS - 1
    labels = []
    for time_ms in times_ms:
        if time_ms is None or time_ms <= 0:
            labels.append(0)
            continue
        closeness = 1.0 - math.log(time_ms / best) / math.log(RELEVANCE_RANGE)
        labels.append(max(0, min(top, math.floor(top * closeness + 1e-9))))
    return labels


def _parameters(seed: int, rows: int) -> dict[str, object]:
    return {
        "objective": "lambdarank",
        "label_gain": [float(2**level - 1) for level in range(RELEVANCE_LEVELS)],
        "lambdarank_truncation_level": 32,
        "num_leaves": 15,
        "learning_rate": 0.08,
        "min_data_in_leaf": max(2, min(20, rows // 20)),
        "feature_fraction": 0.8,
        "bagging_fraction": 0.8,
        "bagging_freq": 1,
        "lambda_l2": 1.0,
        "seed": seed,
        "deterministic": True,
        "force_col_wise": True,
        "num_threads": 1,
        "verbosity": -1,
    }


def _dataset(groups: Sequence[TrainingGroup], feature_names: Sequence[str]) -> lightgbm.Dataset:
    import lightgbm

    rows = [row for group in groups for row in group.features]
    labels = [label for group in groups for label in relevance_labels(group.times_ms)]
    return lightgbm.Dataset(
        np.asarray(rows, dtype=np.float64),
        label=np.asarray(labels, dtype=np.float64),
        group=[len(group.features) for group in groups],
        feature_name=list(feature_names),
        free_raw_data=False,
    )


def _usable(groups: Sequence[TrainingGroup]) -> list[TrainingGroup]:
    """Keep the groups that can teach a ranking: two measured candidates at least."""
    return [g for g in groups if sum(1 for t in g.times_ms if t is not None) >= 2]


def train_ranker(
    groups: Sequence[TrainingGroup],
    family: str,
    feature_names: Sequence[str],
    seed: int = 0,
    rounds: int = TRAINING_ROUNDS,
) -> Ranker:
    """Train a ranking model on measured problems (deterministic for a seed)."""
    import lightgbm

    usable = _usable(groups)
    if not usable:
        raise IreetuneError("no problem with two measured candidates to train a cost model on")
    row_count = sum(len(g.features) for g in usable)
    booster = lightgbm.train(
        _parameters(seed, row_count), _dataset(usable, feature_names), num_boost_round=rounds
    )
    return Ranker(
        family=family,
        feature_names=tuple(feature_names),
        model_text=booster.model_to_string(),
        groups=tuple(g.name for g in usable),
        rows=row_count,
        seed=seed,
        trained_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        booster=booster,
    )


def update_ranker(ranker: Ranker, measured: TrainingGroup, rounds: int = UPDATE_ROUNDS) -> Ranker:
    """Continue boosting from `ranker` on the current problem's measurements (online update).

    The added trees fit the ranking of what was measured so far, starting from the model's own
    scores; with fewer than two measured candidates there is nothing to learn and the ranker is
    returned unchanged.
    """
    import lightgbm

    if not _usable([measured]):
        return ranker
    parameters = _parameters(ranker.seed, len(measured.features))
    parameters["min_data_in_leaf"] = 2
    parameters["num_leaves"] = 4
    parameters["learning_rate"] = UPDATE_LEARNING_RATE
    parameters["bagging_fraction"] = 1.0
    parameters["bagging_freq"] = 0
    booster = lightgbm.Booster(model_str=ranker.model_text)
    updated = lightgbm.train(
        parameters,
        _dataset([measured], ranker.feature_names),
        num_boost_round=rounds,
        init_model=booster,
    )
    return Ranker(
        family=ranker.family,
        feature_names=ranker.feature_names,
        model_text=updated.model_to_string(),
        groups=(*ranker.groups, measured.name),
        rows=ranker.rows + len(measured.features),
        seed=ranker.seed,
        trained_at=ranker.trained_at,
        booster=updated,
    )


def explain_ranker(ranker: Ranker) -> list[tuple[str, float]]:
    """Return each feature's share of the model's total split gain, largest first."""
    gains = ranker.booster.feature_importance(importance_type="gain")
    total = float(sum(gains)) or 1.0
    shares = [
        (name, float(gain) / total) for name, gain in zip(ranker.feature_names, gains, strict=True)
    ]
    return sorted(shares, key=lambda item: (-item[1], item[0]))


def fingerprint_groups(groups: Sequence[TrainingGroup], family: str, seed: int) -> str:
    """Hash training data (and the model's settings) into a short key for a ranker cache."""
    digest = hashlib.sha256()
    settings = (
        f"{RANKER_FORMAT}/{RANKER_VERSION}/{family}/{seed}/{TRAINING_ROUNDS}/{RELEVANCE_RANGE}"
    )
    digest.update(settings.encode())
    for group in sorted(groups, key=lambda g: g.name):
        digest.update(group.name.encode())
        digest.update(json.dumps([group.features, group.times_ms]).encode())
    return digest.hexdigest()[:16]


def save_ranker(ranker: Ranker, path: Path) -> None:
    """Write the ranker (LightGBM text plus what it was trained on) as one JSON file."""
    import lightgbm

    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "format": RANKER_FORMAT,
        "version": RANKER_VERSION,
        "family": ranker.family,
        "feature_names": list(ranker.feature_names),
        "groups": list(ranker.groups),
        "rows": ranker.rows,
        "seed": ranker.seed,
        "trained_at": ranker.trained_at,
        "lightgbm_version": lightgbm.__version__,
        "model": ranker.model_text,
    }
    write_text_atomically(path, json.dumps(document))


def load_ranker(path: Path) -> Ranker:
    """Read a ranker written by `save_ranker`."""
    import lightgbm

    try:
        document = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as error:
        raise IreetuneError(f"cannot read cost model {path}: {error}") from None
    if not isinstance(document, dict) or document.get("format") != RANKER_FORMAT:
        raise IreetuneError(f"{path} is not an ireetune cost model")
    if document.get("version") != RANKER_VERSION:
        raise IreetuneError(
            f"{path}: cost-model version {document.get('version')!r} is not {RANKER_VERSION}"
        )
    try:
        booster = lightgbm.Booster(model_str=document["model"])
        return Ranker(
            family=str(document["family"]),
            feature_names=tuple(str(n) for n in document["feature_names"]),
            model_text=str(document["model"]),
            groups=tuple(str(g) for g in document["groups"]),
            rows=int(document["rows"]),
            seed=int(document["seed"]),
            trained_at=str(document["trained_at"]),
            booster=booster,
        )
    except (KeyError, TypeError, ValueError, lightgbm.basic.LightGBMError) as error:
        raise IreetuneError(f"{path}: damaged cost model ({error})") from None
