"""The compiler's default configuration and its neighbourhood, searched first.

IREE's own choice is usually good, and on real models the configurations that beat it were
near it (docs/ordering.md); a random walk over a large space rarely passes there. A space that
knows the default proposes its neighbours first: each knob moved one step along its domain, then
pairs of such moves, kept only when they satisfy the space's hard constraints.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Generic, TypeVar

import z3

from ireetune.core.candidate import Knobs, make_knobs
from ireetune.targets.z3_enumerate import SpaceBuilder, parallel_first, satisfies
from ireetune.targets.z3_enumerate import enumerate_space as enumerate_z3_space

Sizes = TypeVar("Sizes")
Facts = TypeVar("Facts")


def with_values(domains: Mapping[str, Sequence[int]], knobs: Knobs) -> dict[str, list[int]]:
    """Return the domains with the knobs' own values added (the default must lie in its space)."""
    values = dict(knobs)
    return {
        name: sorted({*domain, *([int(values[name])] if name in values else [])})
        for name, domain in domains.items()
    }


def domain_constraints(
    variables: Mapping[str, z3.ArithRef],
    domains: Mapping[str, Sequence[int]],
    default: Knobs | None,
) -> list[z3.BoolRef]:
    """State that each knob takes a value of its domain; a known default's own values join their
    domains, so that its neighbours can lie there too."""
    if default is not None:
        domains = with_values(domains, default)
    return [
        z3.Or([variables[name] == value for value in values]) for name, values in domains.items()
    ]


def default_neighbours(
    default: Knobs,
    domains: Mapping[str, Sequence[int]],
    hard_constraints: SpaceBuilder,
    limit: int,
) -> list[Knobs]:
    """Return up to `limit` neighbours of `default` that satisfy `hard_constraints`: single
    steps first, then pairs of steps on different knobs."""
    values = {name: int(value) for name, value in default}
    steps: list[tuple[str, int]] = []
    for name in sorted(domains):
        current = values[name]
        lower = [x for x in domains[name] if x < current]
        higher = [x for x in domains[name] if x > current]
        steps += [(name, lower[-1])] if lower else []
        steps += [(name, higher[0])] if higher else []
    singles = [make_knobs({**values, name: value}) for name, value in steps]
    pairs = [
        make_knobs({**values, first: first_value, second: second_value})
        for index, (first, first_value) in enumerate(steps)
        for second, second_value in steps[index + 1 :]
        if first != second
    ]
    found: list[Knobs] = []
    for knobs in dict.fromkeys((*singles, *pairs)):
        if len(found) >= limit:
            break
        if knobs != default and satisfies(hard_constraints, knobs):
            found.append(knobs)
    return found


def distance_to(knobs: Knobs, default: Knobs) -> float:
    """Count how far a configuration is from another: log2 steps summed over the knobs."""
    reference = dict(default)
    return sum(
        abs(math.log2(max(int(value), 1) / max(int(reference.get(name, value)), 1)))
        for name, value in knobs
    )


@dataclass(frozen=True)
class Neighbourhood:
    """How a space searches near the default: the knobs' domains, how many neighbours to
    propose, and where to centre them (the default itself unless `centre` moves it)."""

    domains: Mapping[str, Sequence[int]]
    limit: int
    centre: Callable[[Knobs], Knobs] | None = None


@dataclass(frozen=True)
class NearDefaultSpace(Generic[Sizes, Facts]):
    """A space of a problem's sizes on a target's facts, searched near the default first: its
    constraints, `constraints(sizes, facts, require_parallelism, context, default)`, and the
    neighbourhood it searches first."""

    constraints: Callable[
        [Sizes, Facts, bool, z3.Context, Knobs | None],
        tuple[dict[str, z3.ArithRef], list[z3.BoolRef]],
    ]
    neighbourhood: Callable[[Sizes, Facts], Neighbourhood]

    def enumerate(
        self,
        sizes: Sizes,
        facts: Facts,
        seed: int,
        excluded: Knobs | None = None,
        known: Sequence[Knobs] = (),
    ) -> Iterator[Knobs]:
        """Yield valid configurations lazily and reproducibly for a seed: when the default
        (`excluded`) is known, a centre (the default itself unless the neighbourhood's `centre`
        moves it) and up to `limit` of its neighbours that satisfy the default's space, then a
        seeded walk over the space that gives every thread work, or, for a problem too small
        for that, the space without that requirement. Never the default itself (it is the
        baseline) nor any of `known`."""
        build = partial(self.constraints, sizes, facts)
        neighbourhood = self.neighbourhood(sizes, facts)
        first: list[Knobs] = []
        if excluded is not None:

            def hard(context: z3.Context) -> tuple[dict[str, z3.ArithRef], list[z3.BoolRef]]:
                return build(False, context, excluded)

            centre = neighbourhood.centre
            middle = centre(excluded) if centre is not None else excluded
            if middle != excluded and satisfies(hard, middle):
                first.append(middle)
            domains = with_values(neighbourhood.domains, excluded)
            near = default_neighbours(middle, domains, hard, neighbourhood.limit)
            first += [knobs for knobs in near if knobs != excluded]
        walk = parallel_first(lambda parallel, context: build(parallel, context, None))
        return enumerate_z3_space(walk, seed, excluded, known, first=first)
