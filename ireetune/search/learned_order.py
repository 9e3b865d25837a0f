"""Order candidates with the learned cost model, and re-rank them as measurements arrive.

What the strategies of search/strategies/ share (bench/ordering_eval.py replays each on
recorded spaces):

- `heuristic`: the space's hand-weighted score (`FamilySpace.order`);
- `learned`: the cost ranker's scores, trained on other problems;
- `learned-online`: the same, re-ranked between batches of measurements of this problem
  (`rerank_remaining`), the ranker updated on what was measured.

Ties are broken by a seeded hash of each configuration, never by the pool's order.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from ireetune.core.candidate import Knobs
from ireetune.core.errors import IreetuneError
from ireetune.core.features import FeatureExtractor
from ireetune.core.target import FamilySpace, SpaceRequest, Target
from ireetune.database.keys import describe_target
from ireetune.database.ranker_files import ranker_folder, remember_machine_facts
from ireetune.database.store import TuningDatabase
from ireetune.search.ranker import Ranker, TrainingGroup, update_ranker
from ireetune.search.ranker_training import choose_ranker
from ireetune.search.strategy import Proposal, SearchInput

CURRENT_PROBLEM = "current problem"


def order_with_ranker(
    extractor: FeatureExtractor, ranker: Ranker, pool: Sequence[Knobs], seed: int
) -> list[tuple[Knobs, float]]:
    """Sort a pool by the ranker's score, best first, each with its score."""
    assert extractor.space.family == ranker.family, "ranker fits the target's features"
    scores = ranker.predict(extractor.features(pool))
    ranked = sorted(
        zip(pool, scores, strict=True),
        key=lambda item: (-item[1], random.Random(f"{seed}:{item[0]}").random()),
    )
    return [(knobs, score) for knobs, score in ranked]


def order_pool(
    target: Target,
    space: FamilySpace,
    request: SpaceRequest,
    executable_target: str,
    pool: Sequence[Knobs],
    database: TuningDatabase | None,
    order: str,
) -> tuple[list[tuple[Knobs, float]], str, Ranker | None]:
    """Order a pool of the request's candidates the way `order` asks (`auto`, `learned` or
    `heuristic`); say how it was done, and return the ranker used (None for the heuristic).

    `auto` uses the learned ranker when one is stored beside the database or the database holds
    enough rows to train one (ireetune/search/ranker_training.py), else the heuristic; `learned`
    insists on a ranker.
    """
    target_key = describe_target(target.name, executable_target)
    extractor = target.features(request)
    if database is not None and extractor is not None:
        # Kept whatever the order, so that `ireetune ranker train` can learn from these rows.
        remember_machine_facts(ranker_folder(database.path), target_key, extractor.machine_facts())
    if order == "heuristic":
        return space.order(request, list(pool)), "heuristic", None
    if database is None:
        if order == "learned":
            raise IreetuneError("--order learned needs the tuning database (drop --no-db)")
        return space.order(request, list(pool)), "heuristic: no database", None
    folder = ranker_folder(database.path)
    choice = choose_ranker(target, request, database.all_results(), target_key, folder)
    if choice.ranker is None or extractor is None:
        if order == "learned":
            raise IreetuneError(f"--order learned: no cost model ({choice.reason})")
        return space.order(request, list(pool)), choice.reason, None
    ordered = order_with_ranker(extractor, choice.ranker, pool, request.seed)
    return ordered, choice.reason, choice.ranker


def propose_ordered(search: SearchInput, pool: Sequence[Knobs], order: str) -> Proposal:
    """Propose the budget's best under `order_pool`; with a learned ranker and rounds allowed,
    only the first round, the online search picking the later ones as measurements arrive."""
    request = search.request
    ordered, ordering, ranker = order_pool(
        search.target, search.space, request, str(request.variant_target), pool,
        search.database, order,
    )  # fmt: skip
    rounds = plan_rounds(min(search.num_candidates, len(ordered)))
    extractor = search.target.features(request) if ranker is not None else None
    if ranker is not None and extractor is not None and search.online and len(rounds) > 1:
        online = OnlineSearch(extractor, ranker, ordered, rounds, request.seed)
        ordering = f"{ordering}; online, rounds of {'+'.join(map(str, rounds))}"
        return Proposal(list(online.first_round), ordering, online)
    return Proposal(list(ordered[: search.num_candidates]), ordering)


def rerank_remaining(
    extractor: FeatureExtractor,
    ranker: Ranker,
    remaining: Sequence[Knobs],
    measured: Sequence[tuple[Knobs, float | None]],
    seed: int,
) -> tuple[list[tuple[Knobs, float]], Ranker]:
    """Update the ranker on this problem's measurements so far, then re-rank what remains.

    `measured` holds every candidate tried: its time in ms, or None when it failed to compile or
    run (it ranks below everything that ran). Returns the new order and the updated model; call
    it again with all measurements (not only the new ones) and the ranker trained offline, so the
    result does not depend on how the measurements were batched.
    """
    if not measured:
        return order_with_ranker(extractor, ranker, remaining, seed), ranker
    knobs_measured = [knobs for knobs, _ in measured]
    group = TrainingGroup(
        CURRENT_PROBLEM,
        tuple(tuple(row) for row in extractor.features(knobs_measured)),
        tuple(time_ms for _, time_ms in measured),
    )
    updated = update_ranker(ranker, group)
    return order_with_ranker(extractor, updated, remaining, seed), updated


def plan_rounds(num_candidates: int) -> list[int]:
    """Split a budget into measurement rounds: a quarter, a quarter, the rest.

    Between rounds the ranker learns from what was measured. Below 16 candidates a round would
    teach too little to be worth its extra baseline timings, so there is one round.
    """
    if num_candidates < MIN_ONLINE_CANDIDATES:
        return [num_candidates]
    quarter = num_candidates // 4
    return [quarter, quarter, num_candidates - 2 * quarter]


MIN_ONLINE_CANDIDATES = 16


class OnlineSearch:
    """Pick each round's candidates from the pool, re-ranked with everything measured so far.

    The pool is what the sampler drew; the first round is the ranker's best, and every later
    round the best of what remains under the ranker updated on this problem's measurements
    (`rerank_remaining`, always from the ranker trained offline, so the result does not depend on
    how the measurements were split into rounds).
    """

    def __init__(
        self,
        extractor: FeatureExtractor,
        ranker: Ranker,
        ordered_pool: Sequence[tuple[Knobs, float]],
        rounds: Sequence[int],
        seed: int,
    ) -> None:
        assert rounds and sum(rounds) <= len(ordered_pool), "the pool covers the budget"
        self.extractor = extractor
        self.ranker = ranker
        self.seed = seed
        self.rounds = list(rounds)
        self.first_round = list(ordered_pool[: rounds[0]])
        # What remains of the pool, best first under the ranker as last updated.
        self.ranked = list(ordered_pool[rounds[0] :])
        self.next_index = 1
        self.notes: list[str] = []

    @property
    def rounds_left(self) -> int:
        return len(self.rounds) - self.next_index

    @property
    def untried(self) -> int:
        return sum(self.rounds[self.next_index :])

    def learn(self, measured: Sequence[tuple[Knobs, float | None]]) -> None:
        """Update the ranker on every measurement so far and re-rank what remains of the pool."""
        remaining = [knobs for knobs, _ in self.ranked]
        self.ranked, _ = rerank_remaining(
            self.extractor, self.ranker, remaining, measured, self.seed
        )

    def next_round(self) -> list[tuple[Knobs, float | None]]:
        """Return the next round's candidates, best first, under the ranker as the last `learn`
        left it."""
        assert self.rounds_left > 0, "no round left"
        size = self.rounds[self.next_index]
        self.next_index += 1
        chosen: list[tuple[Knobs, float | None]] = list(self.ranked[:size])
        self.ranked = self.ranked[size:]
        return chosen
