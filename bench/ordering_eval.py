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
each strategy's factor against random. No device and no compiler run: seconds.

Usage: python bench/ordering_eval.py [--spaces data/spaces/cpu] [--seeds 5] [--batch 8]
           [--tolerance 0.02] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ireetune.search.cost_model import CostModel, train_cost_model
from ireetune.search.evaluation import (
    ReplaySpace,
    count_benchmarks,
    count_benchmarks_online,
    replay_space,
)
from ireetune.search.learned_order import order_with_model, rerank_remaining
from ireetune.search.model_store import group_from_recorded, target_for_recorded
from ireetune.search.recorded import RecordedSpace, load_recorded_spaces

STRATEGIES = ("random", "heuristic", "learned", "learned-online")


def index_order(space: RecordedSpace, ordered: Sequence[tuple[object, float]]) -> list[int]:
    """Map an ordering of knobs back to row indices (a space's rows are distinct knobs)."""
    position = {row.knobs: index for index, row in enumerate(space.rows)}
    return [position[knobs] for knobs, _ in ordered]  # type: ignore[index]


def evaluate_problem(
    space: RecordedSpace,
    model: CostModel,
    strategy: str,
    seed: int,
    batch: int,
    tolerance: float,
) -> int | None:
    replay = replay_space(space)
    target = target_for_recorded(space)
    pool = [row.knobs for row in space.rows]
    if strategy == "random":
        order = list(range(len(pool)))
        random.Random(seed).shuffle(order)
        return count_benchmarks(replay, order, tolerance)
    if strategy == "heuristic":
        ordered = target.order_candidates(space.problem, pool, seed)
        return count_benchmarks(replay, index_order(space, ordered), tolerance)
    if strategy == "learned":
        ordered = order_with_model(target, space.problem, model, pool, seed)
        return count_benchmarks(replay, index_order(space, ordered), tolerance)
    assert strategy == "learned-online"

    def rerank(tried: Sequence[tuple[int, float | None]], remaining: Sequence[int]) -> list[int]:
        measured = [(pool[index], time_ms) for index, time_ms in tried]
        ordered, _ = rerank_remaining(
            target, space.problem, model, [pool[i] for i in remaining], measured, seed
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
        feature_space = target_for_recorded(space).feature_space(space.problem)
        assert feature_space is not None, "recorded targets have features"
        # Leave one problem out: the model never saw the problem it orders.
        models = {
            seed: train_cost_model(
                [g for name, g in groups.items() if name != space.name],
                feature_space.family,
                feature_space.names,
                seed=seed,
            )
            for seed in range(seeds)
        }
        for strategy in STRATEGIES:
            counts = [
                evaluate_problem(space, models[seed], strategy, seed, batch, tolerance)
                for seed in range(seeds)
            ]
            reached = [c for c in counts if c is not None]
            per_strategy[strategy] = statistics.fmean(reached) if reached else math.nan
            per_seed[strategy] = counts
        results[space.name] = per_strategy
        details[space.name] = per_seed
    return {"per_problem": results, "per_seed": details}


def render_table(per_problem: dict[str, dict[str, float]]) -> str:
    header = "| problem | " + " | ".join(STRATEGIES) + " |"
    lines = [header, "|---|" + "---:|" * len(STRATEGIES)]
    for name, row in per_problem.items():
        lines.append(f"| {name} | " + " | ".join(f"{row[s]:.1f}" for s in STRATEGIES) + " |")
    means = {s: geometric_mean([row[s] for row in per_problem.values()]) for s in STRATEGIES}
    lines.append(
        "| **geometric mean** | " + " | ".join(f"**{means[s]:.1f}**" for s in STRATEGIES) + " |"
    )
    lines.append(
        "| **random / strategy** | "
        + " | ".join(f"**{means['random'] / means[s]:.2f}x**" for s in STRATEGIES)
        + " |"
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spaces", type=Path, default=Path("data/spaces/cpu"))
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tolerance", type=float, default=0.02)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    arguments = parser.parse_args()
    started = time.perf_counter()
    spaces = load_recorded_spaces(arguments.spaces)
    figures = run(spaces, arguments.seeds, arguments.batch, arguments.tolerance, print)
    seconds = time.perf_counter() - started
    print()
    print(
        f"benchmarks to reach within {arguments.tolerance:.0%} of the best of each recorded "
        f"sample, mean of {arguments.seeds} seeds, leave-one-problem-out, online batch "
        f"{arguments.batch} ({seconds:.1f} s)"
    )
    print(render_table(figures["per_problem"]))  # type: ignore[arg-type]
    if arguments.json is not None:
        arguments.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
