"""Where cost models come from: trained from the tuning database, kept beside it.

Models live in `<database folder>/models/`, one JSON file each (a few tens of kilobytes):

- `<family>.json`: a model trained on purpose with `ireetune model train` (from the database
  and, optionally, recorded spaces); when present, the tuner uses it;
- `<family>-auto-<fingerprint>.json`: a model the tuner trained by itself from the database's
  rows for this target, once there were enough; the fingerprint is a hash of the training rows,
  so a grown database trains a new one (in a second) and an unchanged one reuses the file;
- `facts/<target>.json`: the machine facts of each target key the tuner has run on, so that
  `ireetune model train` can compute the features of the database's rows without a dispatch.

With neither, the tuner orders with the target's heuristic.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ireetune.core.candidate import Knobs
from ireetune.core.errors import IreetuneError
from ireetune.core.features import FactValue, FeatureExtractor, FeatureSpace
from ireetune.core.files import write_text_atomically
from ireetune.core.records import (
    FAILED_STATUSES,
    TIMED_STATUSES,
    CandidateStatus,
    status_values,
)
from ireetune.core.target import SpaceRequest, Target
from ireetune.database.store import StoredResult
from ireetune.problem.root_op import Problem, problem_from_fields
from ireetune.search.cost_model import (
    CostModel,
    TrainingGroup,
    fingerprint_groups,
    load_cost_model,
    save_cost_model,
    train_cost_model,
)
from ireetune.search.recorded import RecordedSpace
from ireetune.targets import parse_target

logger = logging.getLogger(__name__)

# The database teaches a model once it holds this many problems of a target with this many
# candidates measured each; below that, the heuristic orders.
MIN_PROBLEMS = 3
MIN_MEASURED_PER_PROBLEM = 16
MEASURED = status_values(TIMED_STATUSES)
# What a model learns from: timed candidates, and those that did not build, did not run or did not
# apply (the space's dead ends).
LEARNED = MEASURED | status_values({*FAILED_STATUSES, CandidateStatus.NOT_APPLIED})


@dataclass(frozen=True)
class ModelChoice:
    """The model the tuner orders with (None: the heuristic), and why, in one line."""

    model: CostModel | None
    reason: str


def model_folder(database_path: Path) -> Path:
    """Return the folder beside the database where its models are kept."""
    return database_path.parent / "models"


def _file_stem(family: str) -> str:
    return family.replace("/", "_")


def pinned_model_path(folder: Path, family: str) -> Path:
    """Return where `ireetune model train` keeps the model of a feature family."""
    return folder / f"{_file_stem(family)}.json"


def relative_time(result: StoredResult) -> float | None:
    """Return a stored candidate's time relative to its session's default (1/speedup), None
    when it failed; a config that did not apply runs as the default does."""
    if result.status in MEASURED and result.speedup:
        return 1.0 / result.speedup
    if result.status == CandidateStatus.NOT_APPLIED.value:
        return 1.0
    return None


def groups_from_results(
    results: Iterable[StoredResult],
    target: Target,
    target_key: str,
    facts: Mapping[str, FactValue],
) -> list[tuple[FeatureSpace, TrainingGroup]]:
    """Turn the database's rows for one target into training groups, one per problem, device
    and compiler version; features are computed with the target's machine facts (rows of the
    same target key were compiled for the same executable target), each with its feature space.
    Duplicates and the default teach nothing of their own and are left out, as are problems the
    target has no features for."""
    by_group: dict[tuple[str, str, str], list[tuple[Knobs, float | None]]] = defaultdict(list)
    signatures: dict[tuple[str, str, str], str] = {}
    for result in results:
        knobs = result.knobs
        if result.key.target != target_key or knobs is None:
            continue
        if result.status not in LEARNED:
            continue
        group_key = (result.key.problem, result.key.device, result.key.compiler_version)
        by_group[group_key].append((knobs, relative_time(result)))
        signatures[group_key] = result.key.signature
    groups = []
    for group_key, rows in sorted(by_group.items()):
        try:
            problem: Problem = problem_from_fields(json.loads(group_key[0]))
            extractor = target.features(SpaceRequest(problem, None, None, 0, facts))
            if extractor is None:
                continue
            space = extractor.space
            features = extractor.features([knobs for knobs, _ in rows])
        except (IreetuneError, KeyError, ValueError) as error:
            logger.info("no features for %s: %s", signatures[group_key], error)
            continue
        name = f"{signatures[group_key]} on {group_key[1]} ({group_key[2]})"
        group = TrainingGroup(
            name, tuple(tuple(row) for row in features), tuple(time for _, time in rows)
        )
        groups.append((space, group))
    return groups


def has_enough_rows(groups: Sequence[TrainingGroup]) -> bool:
    """Say whether the groups hold enough measurements to teach a model."""
    rich = [
        g for g in groups if sum(1 for t in g.times_ms if t is not None) >= MIN_MEASURED_PER_PROBLEM
    ]
    return len(rich) >= MIN_PROBLEMS


def choose_model(
    target: Target,
    request: SpaceRequest,
    results: Iterable[StoredResult],
    target_key: str,
    folder: Path,
    seed: int = 0,
) -> ModelChoice:
    """Pick the model to order the request's candidates with (see the module docstring)."""
    extractor = target.features(request)
    if extractor is None:
        return ModelChoice(None, f"heuristic: {target.name} has no features for a learned model")
    space, facts = extractor.space, extractor.machine_facts()
    pinned = pinned_model_path(folder, space.family)
    if pinned.is_file():
        model = load_cost_model(pinned)
        if model.family == space.family and model.feature_names == space.names:
            return ModelChoice(
                model, f"learned: {pinned} ({len(model.groups)} problems, {model.rows} rows)"
            )
        logger.warning("%s was trained on other features; not used", pinned)
    groups = [
        group
        for group_space, group in groups_from_results(results, target, target_key, facts)
        if group_space == space
    ]
    if not has_enough_rows(groups):
        return ModelChoice(
            None,
            f"heuristic: the database holds {len(groups)} problems for this target; a learned "
            f"model needs {MIN_PROBLEMS} with {MIN_MEASURED_PER_PROBLEM} measured candidates each",
        )
    fingerprint = fingerprint_groups(groups, space.family, seed)
    cached = folder / f"{_file_stem(space.family)}-auto-{fingerprint}.json"
    if cached.is_file():
        model = load_cost_model(cached)
    else:
        model = train_cost_model(groups, space.family, space.names, seed)
        try:
            save_cost_model(model, cached)
        except OSError as error:
            logger.warning("could not keep the trained model in %s: %s", folder, error)
    return ModelChoice(
        model, f"learned: trained on the database ({len(model.groups)} problems, {model.rows} rows)"
    )


def _facts_path(folder: Path, target_key: str) -> Path:
    digest = hashlib.sha256(target_key.encode()).hexdigest()[:16]
    return folder / "facts" / f"{digest}.json"


def remember_machine_facts(folder: Path, target_key: str, facts: Mapping[str, FactValue]) -> None:
    """Keep a target key's machine facts beside the models (best effort: a cache)."""
    if not facts:
        return
    path = _facts_path(folder, target_key)
    text = json.dumps({"target": target_key, "facts": dict(facts)}, sort_keys=True)
    try:
        if path.is_file() and path.read_text() == text:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(path, text)
    except OSError as error:
        logger.warning("could not keep machine facts in %s: %s", folder, error)


def remembered_machine_facts(folder: Path) -> dict[str, dict[str, FactValue]]:
    """Return the machine facts kept for each target key."""
    known: dict[str, dict[str, FactValue]] = {}
    for path in sorted((folder / "facts").glob("*.json")):
        try:
            document = json.loads(path.read_text())
            known[str(document["target"])] = dict(document["facts"])
        except (OSError, ValueError, KeyError, TypeError):
            logger.warning("ignoring damaged machine facts %s", path)
    return known


def recorded_request(space: RecordedSpace) -> SpaceRequest:
    """Return the request of a recorded space: its problem, on the recorded machine's facts."""
    return SpaceRequest(space.problem, None, None, 0, space.facts)


def recorded_features(space: RecordedSpace) -> FeatureExtractor | None:
    """Return the features of a recorded space's target, on the recorded machine's facts."""
    return parse_target(space.target_name).features(recorded_request(space))


def group_from_recorded(space: RecordedSpace) -> TrainingGroup:
    """Turn a recorded space into a training group of its target's features."""
    extractor = recorded_features(space)
    assert extractor is not None, "recorded spaces are of problems with features"
    features = extractor.features([row.knobs for row in space.rows])
    return TrainingGroup(
        f"{space.name} (recorded)",
        tuple(tuple(row) for row in features),
        tuple(space.effective_times()),
    )


def train_pinned_models(
    results: Sequence[StoredResult],
    folder: Path,
    spaces: Sequence[RecordedSpace],
    seed: int = 0,
) -> list[tuple[Path, CostModel]]:
    """Train one model per feature family from the database (the rows of every target key whose
    machine facts are known) and recorded spaces; keep each as the family's pinned model."""
    groups: dict[FeatureSpace, list[TrainingGroup]] = defaultdict(list)
    for space in spaces:
        extractor = recorded_features(space)
        if extractor is not None:
            groups[extractor.space].append(group_from_recorded(space))
    for target_key, facts in remembered_machine_facts(folder).items():
        target = parse_target(target_key.split("#")[0])
        for feature_space, group in groups_from_results(results, target, target_key, facts):
            groups[feature_space].append(group)
    if not groups:
        raise IreetuneError(
            "nothing to train on: no recorded spaces given and no database rows of a target "
            "the tuner has run on with this database"
        )
    trained = []
    for feature_space, family_groups in sorted(groups.items(), key=lambda item: item[0].family):
        model = train_cost_model(family_groups, feature_space.family, feature_space.names, seed)
        path = pinned_model_path(folder, feature_space.family)
        save_cost_model(model, path)
        trained.append((path, model))
    return trained
