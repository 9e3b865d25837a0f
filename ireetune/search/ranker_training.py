"""Where rankers come from: trained from the tuning database (kept beside it, in the files of
`database/ranker_files.py`), or trained on purpose from the database and recorded spaces.

With neither a ranker trained on purpose nor enough rows to train one, the tuner orders with the
target's heuristic.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ireetune.core.candidate import Knobs
from ireetune.core.errors import IreetuneError
from ireetune.core.features import FactValue, FeatureExtractor, FeatureSpace
from ireetune.core.records import (
    FAILED_STATUSES,
    TIMED_STATUSES,
    CandidateStatus,
    status_values,
)
from ireetune.core.target import SpaceRequest, Target
from ireetune.database.ranker_files import (
    auto_ranker_path,
    pinned_ranker_path,
    remembered_machine_facts,
)
from ireetune.database.store import StoredResult
from ireetune.problem.root_op import Problem, problem_from_fields
from ireetune.search.ranker import (
    Ranker,
    TrainingGroup,
    fingerprint_groups,
    load_ranker,
    save_ranker,
    train_ranker,
)
from ireetune.search.recorded import RecordedSpace
from ireetune.targets import parse_target

logger = logging.getLogger(__name__)

# The database teaches a ranker once it holds this many problems of a target with this many
# candidates measured each; below that, the heuristic orders.
MIN_PROBLEMS = 3
MIN_MEASURED_PER_PROBLEM = 16
MEASURED = status_values(TIMED_STATUSES)
# What a ranker learns from: timed candidates, and those that did not build, did not run or did not
# apply (the space's dead ends).
LEARNED = MEASURED | status_values({*FAILED_STATUSES, CandidateStatus.NOT_APPLIED})


@dataclass(frozen=True)
class RankerChoice:
    """The ranker the tuner orders with (None: the heuristic), and why, in one line."""

    ranker: Ranker | None
    reason: str


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
    """Say whether the groups hold enough measurements to teach a ranker."""
    rich = [
        g for g in groups if sum(1 for t in g.times_ms if t is not None) >= MIN_MEASURED_PER_PROBLEM
    ]
    return len(rich) >= MIN_PROBLEMS


def choose_ranker(
    target: Target,
    request: SpaceRequest,
    results: Iterable[StoredResult],
    target_key: str,
    folder: Path,
    seed: int = 0,
) -> RankerChoice:
    """Pick the ranker to order the request's candidates with (see the module docstring)."""
    extractor = target.features(request)
    if extractor is None:
        return RankerChoice(None, f"heuristic: {target.name} has no features for a learned model")
    space, facts = extractor.space, extractor.machine_facts()
    pinned = pinned_ranker_path(folder, space.family)
    if pinned.is_file():
        ranker = load_ranker(pinned)
        if ranker.family == space.family and ranker.feature_names == space.names:
            return RankerChoice(
                ranker, f"learned: {pinned} ({len(ranker.groups)} problems, {ranker.rows} rows)"
            )
        logger.warning("%s was trained on other features; not used", pinned)
    groups = [
        group
        for group_space, group in groups_from_results(results, target, target_key, facts)
        if group_space == space
    ]
    if not has_enough_rows(groups):
        return RankerChoice(
            None,
            f"heuristic: the database holds {len(groups)} problems for this target; a learned "
            f"model needs {MIN_PROBLEMS} with {MIN_MEASURED_PER_PROBLEM} measured candidates each",
        )
    fingerprint = fingerprint_groups(groups, space.family, seed)
    cached = auto_ranker_path(folder, space.family, fingerprint)
    if cached.is_file():
        ranker = load_ranker(cached)
    else:
        ranker = train_ranker(groups, space.family, space.names, seed)
        try:
            save_ranker(ranker, cached)
        except OSError as error:
            logger.warning("could not keep the trained ranker in %s: %s", folder, error)
    return RankerChoice(
        ranker,
        f"learned: trained on the database ({len(ranker.groups)} problems, {ranker.rows} rows)",
    )


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


def train_pinned_rankers(
    results: Sequence[StoredResult],
    folder: Path,
    spaces: Sequence[RecordedSpace],
    seed: int = 0,
) -> list[tuple[Path, Ranker]]:
    """Train one ranker per feature family from the database (the rows of every target key whose
    machine facts are known) and recorded spaces; keep each as the family's pinned ranker."""
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
        ranker = train_ranker(family_groups, feature_space.family, feature_space.names, seed)
        path = pinned_ranker_path(folder, feature_space.family)
        save_ranker(ranker, path)
        trained.append((path, ranker))
    return trained
