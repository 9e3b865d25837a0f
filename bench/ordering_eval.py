"""Replay candidate orderings on recorded spaces: benchmarks needed to get within 2% of the best.

For every recorded space (data/spaces/, written by bench/record_spaces.py) and every strategy:

- random: a seeded shuffle (what `--order random` does to the pool);
- heuristic: the target's hand-weighted score;
- learned: the LightGBM cost model, trained leave-one-problem-out (the problem scored is never
  in the model's training data);
- learned-online: the same model, updated on this problem's measurements between batches of
  `--batch` candidates, the rest re-ranked each time (what the tuner does between rounds).

prints the number of benchmarks needed to measure a candidate within `--tolerance` of the best
of the recorded sample, averaged over `--seeds` seeds, per problem and as a geometric mean, with
each strategy's factor against random. No device and no compiler run: seconds to a minute.

A candidate's time is its binary's re-measured time where the space has one (the median of the
interleaved rounds of bench/remeasure_spaces.py), else its first pass; `--labels first-pass`
ignores the re-measurements. `--split-date` also prints the geometric means of the problems
recorded before and after a date (the problems recorded after the ordering's settings were
chosen are a held-out test of them).

Usage: python bench/ordering_eval.py [--spaces data/spaces/cpu] [--seeds 5] [--batch 8]
           [--tolerance 0.02] [--labels remeasured|first-pass] [--split-date ISO]
           [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ordering_replay import (
    ReplaySpace,
    count_benchmarks,
    count_benchmarks_online,
    replay_space,
)

from ireetune.core.candidate import Knobs
from ireetune.core.features import FactValue, FeatureExtractor
from ireetune.core.target import space_for
from ireetune.search.learned_order import order_with_ranker, rerank_remaining
from ireetune.search.ranker import Ranker, train_ranker
from ireetune.search.ranker_training import group_from_recorded, recorded_features, recorded_request
from ireetune.search.recorded import RecordedSpace, load_recorded_spaces
from ireetune.targets import parse_target

STRATEGIES = ("random", "heuristic", "learned", "learned-online")


def index_order(space: RecordedSpace, ordered: Sequence[tuple[object, float]]) -> list[int]:
    """Map an ordering of knobs back to row indices (a space's rows are distinct knobs)."""
    position = {row.knobs: index for index, row in enumerate(space.rows)}
    return [position[knobs] for knobs, _ in ordered]  # type: ignore[index]


class KnownFeatures(FeatureExtractor):
    """A recorded space's features, every row's computed once (a replay asks for the same
    candidates' features after every batch)."""

    def __init__(self, space: RecordedSpace) -> None:
        extractor = recorded_features(space)
        assert extractor is not None, "recorded targets have features"
        self.extractor = extractor
        self.space = extractor.space
        pool = [row.knobs for row in space.rows]
        self.known = dict(zip(pool, extractor.features(pool), strict=True))

    def machine_facts(self) -> dict[str, FactValue]:
        return self.extractor.machine_facts()

    def features(self, pool: Sequence[Knobs]) -> list[list[float]]:
        return [self.known[k] if k in self.known else self.extractor.features([k])[0] for k in pool]


def evaluate_problem(
    space: RecordedSpace,
    extractor: FeatureExtractor,
    model: Ranker,
    strategy: str,
    seed: int,
    batch: int,
    tolerance: float,
) -> int | None:
    replay = replay_space(space)
    pool = [row.knobs for row in space.rows]
    if strategy == "random":
        order = list(range(len(pool)))
        random.Random(seed).shuffle(order)
        return count_benchmarks(replay, order, tolerance)
    if strategy == "heuristic":
        request = dataclasses.replace(recorded_request(space), seed=seed)
        target = parse_target(space.target_name)
        ordered = space_for(target, space.problem).order(request, pool)
        return count_benchmarks(replay, index_order(space, ordered), tolerance)
    if strategy == "learned":
        ordered = order_with_ranker(extractor, model, pool, seed)
        return count_benchmarks(replay, index_order(space, ordered), tolerance)
    assert strategy == "learned-online"

    def rerank(tried: Sequence[tuple[int, float | None]], remaining: Sequence[int]) -> list[int]:
        measured = [(pool[index], time_ms) for index, time_ms in tried]
        ordered, _ = rerank_remaining(
            extractor, model, [pool[i] for i in remaining], measured, seed
        )
        return index_order(space, ordered)

    return count_benchmarks_online(replay, rerank, batch, tolerance)


def geometric_mean(values: Sequence[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def run(
    spaces: list[RecordedSpace],
    seeds: int,
    batch: int,
    tolerance: float,
    log: Callable[[str], None],
) -> dict[str, object]:
    groups = {space.name: group_from_recorded(space) for space in spaces}
    results: dict[str, dict[str, float]] = {}
    details: dict[str, dict[str, list[int | None]]] = {}
    for space in spaces:
        replay: ReplaySpace = replay_space(space)
        measured = sum(1 for t in replay.times_ms if t is not None)
        within = sum(
            1 for t in replay.times_ms if t is not None and t <= replay.best_ms * (1 + tolerance)
        )
        log(
            f"{space.name}: {len(space.rows)} rows, {measured} measured, {within} within {tolerance:.0%} of the best"
        )
        per_strategy: dict[str, float] = {}
        per_seed: dict[str, list[int | None]] = {}
        extractor = KnownFeatures(space)
        feature_space = extractor.space
        # Leave one problem out: the model never saw the problem it orders.
        models = {
            seed: train_ranker(
                [g for name, g in groups.items() if name != space.name],
                feature_space.family,
                feature_space.names,
                seed=seed,
            )
            for seed in range(seeds)
        }
        for strategy in STRATEGIES:
            counts = [
                evaluate_problem(space, extractor, models[seed], strategy, seed, batch, tolerance)
                for seed in range(seeds)
            ]
            reached = [c for c in counts if c is not None]
            per_strategy[strategy] = statistics.fmean(reached) if reached else math.nan
            per_seed[strategy] = counts
        results[space.name] = per_strategy
        details[space.name] = per_seed
    return {"per_problem": results, "per_seed": details}


def summary_lines(label: str, rows: Sequence[dict[str, float]]) -> list[str]:
    means = {s: geometric_mean([row[s] for row in rows]) for s in STRATEGIES}
    return [
        f"| **{label}** | " + " | ".join(f"**{means[s]:.1f}**" for s in STRATEGIES) + " |",
        f"| **random / strategy{label[len('geometric mean') :]}** | "
        + " | ".join(f"**{means['random'] / means[s]:.2f}x**" for s in STRATEGIES)
        + " |",
    ]


def render_table(
    per_problem: dict[str, dict[str, float]], later: frozenset[str] = frozenset()
) -> str:
    """Render the table; with `later` (names), also the means of earlier and later problems."""
    header = "| problem | " + " | ".join(STRATEGIES) + " |"
    lines = [header, "|---|" + "---:|" * len(STRATEGIES)]
    for name, row in per_problem.items():
        mark = " (later)" if name in later else ""
        lines.append(f"| {name}{mark} | " + " | ".join(f"{row[s]:.1f}" for s in STRATEGIES) + " |")
    lines += summary_lines("geometric mean", list(per_problem.values()))
    if later and set(per_problem) - later:
        earlier = [row for name, row in per_problem.items() if name not in later]
        recent = [row for name, row in per_problem.items() if name in later]
        lines += summary_lines(f"geometric mean, {len(earlier)} earlier", earlier)
        lines += summary_lines(f"geometric mean, {len(recent)} later", recent)
    return "\n".join(lines)


def seed_spread(per_seed: dict[str, dict[str, list[int | None]]]) -> str:
    """Say how far each strategy's factor against random moves between seeds: the factor of the
    geometric means over problems, one seed at a time (a problem a seed never solved is left
    out of that seed's means)."""
    seeds = len(next(iter(per_seed.values()))["random"])
    factors: dict[str, list[float]] = {s: [] for s in STRATEGIES}
    for seed in range(seeds):
        solved = [
            counts for counts in per_seed.values() if all(counts[s][seed] for s in STRATEGIES)
        ]
        means = {s: geometric_mean([float(c[s][seed] or 0) for c in solved]) for s in STRATEGIES}
        for strategy in STRATEGIES:
            factors[strategy].append(means["random"] / means[strategy])
    return ", ".join(
        f"{s} {min(factors[s]):.2f}-{max(factors[s]):.2f}x" for s in STRATEGIES if s != "random"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spaces", type=Path, default=Path("data/spaces/cpu"))
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tolerance", type=float, default=0.02)
    parser.add_argument(
        "--labels", choices=("remeasured", "first-pass"), default="remeasured",
        help="times of re-measured binaries: their rounds' median, or their first pass",
    )  # fmt: skip
    parser.add_argument(
        "--split-date", default="", help="also summarise problems recorded before/after (ISO)"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    arguments = parser.parse_args()
    started = time.perf_counter()
    spaces = load_recorded_spaces(arguments.spaces)
    if arguments.labels == "first-pass":
        spaces = [dataclasses.replace(space, remeasured={}) for space in spaces]
    later = frozenset(
        space.name
        for space in spaces
        if arguments.split_date and str(space.provenance.get("date", "")) >= arguments.split_date
    )
    figures = run(spaces, arguments.seeds, arguments.batch, arguments.tolerance, print)
    seconds = time.perf_counter() - started
    print()
    print(
        f"benchmarks to reach within {arguments.tolerance:.0%} of the best of each recorded "
        f"sample, mean of {arguments.seeds} seeds, leave-one-problem-out, online batch "
        f"{arguments.batch}, "
        f"{'re-measured times where a space has them' if arguments.labels == 'remeasured' else 'first-pass times'}"
        f" ({seconds:.1f} s)"
    )
    print(render_table(figures["per_problem"], later))  # type: ignore[arg-type]
    print(f"\nrandom / strategy, one seed at a time: {seed_spread(figures['per_seed'])}")  # type: ignore[arg-type]
    if arguments.json is not None:
        arguments.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
