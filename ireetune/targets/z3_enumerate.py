"""Lazy, seeded, diverse enumeration of a finite z3 space.

Each query asks for a solution with one variable fixed to a random value of its domain (falling
back to any solution when that is unsatisfiable), then blocks the solution found. A private z3
context per enumeration keeps the sequence reproducible: z3's choices depend on its internal term
ids, which a shared context would carry over from earlier solves.

A space that knows the compiler's default searches its neighbourhood first (`NearDefaultSpace`):
IREE's own choice is usually good, and on real models the configurations that beat it were near
it (docs/ordering.md); a random walk over a large space rarely passes there. The neighbours are
each knob moved one step along its domain, then pairs of such moves, kept only when they satisfy
the space's hard constraints.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Generic, TypeVar

import z3

from ireetune.core.candidate import Knobs, make_knobs

SpaceBuilder = Callable[[z3.Context], tuple[dict[str, z3.ArithRef], list[z3.BoolRef]]]


def parallel_first(
    build: Callable[[bool, z3.Context], tuple[dict[str, z3.ArithRef], list[z3.BoolRef]]],
) -> list[SpaceBuilder]:
    """Return the space that gives every thread work, then, for a problem too small for that, the
    same space without the requirement (`build(require_parallelism, context)`)."""
    return [lambda context: build(True, context), lambda context: build(False, context)]


def one_of(variable: z3.ArithRef, values: Sequence[int]) -> z3.BoolRef:
    """State that an integer knob takes one of `values` (false for none)."""
    if not values:
        return z3.BoolVal(False, variable.ctx)
    return z3.Or([variable == value for value in values])


def divisors(extent: int, limit: int | None = None) -> list[int]:
    """Return the divisors of `extent` up to `limit`."""
    top = extent if limit is None else min(extent, limit)
    return [value for value in range(1, top + 1) if extent % value == 0]


def domain_values(constraints: Sequence[z3.BoolRef], variable: z3.ArithRef) -> list[int]:
    """Read the finite domain `Or(v == a, v == b, ...)` stated for `variable`."""
    for constraint in constraints:
        if z3.is_or(constraint):
            children = constraint.children()
            if children and all(z3.is_eq(c) and c.arg(0).eq(variable) for c in children):
                return [c.arg(1).as_long() for c in children]
    return []


def satisfies(build: SpaceBuilder, knobs: Knobs) -> bool:
    """Say whether one configuration satisfies a space's constraints."""
    context = z3.Context()
    variables, constraints = build(context)
    if {name for name, _ in knobs} != set(variables):
        return False
    solver = z3.Solver(ctx=context)
    solver.add(constraints)
    return solver.check([variables[name] == value for name, value in knobs]) == z3.sat


def enumerate_space(
    builders: Sequence[SpaceBuilder],
    seed: int,
    excluded: Knobs | None = None,
    known: Sequence[Knobs] = (),
    first: Sequence[Knobs] = (),
) -> Iterator[Knobs]:
    """Yield distinct solutions of the first satisfiable space among `builders`, lazily; never
    `excluded` (the default) nor any of `known` (solutions drawn before, stored).

    `first` (already checked by the caller, such as the default's neighbours) come before the
    random walk, which never repeats them; those among `known` are left out.
    """
    known_set = set(known)
    yield from (knobs for knobs in first if knobs not in known_set)
    for build in builders:
        context = z3.Context()
        variables, constraints = build(context)
        solver = z3.Solver(ctx=context)
        solver.set("random_seed", seed)
        solver.add(constraints)
        if solver.check() == z3.sat:
            break
    else:
        return
    names = sorted(variables)
    for blocked in (excluded, *known, *first):
        if blocked is not None and {name for name, _ in blocked} == set(names):
            solver.add(z3.Or([variables[name] != value for name, value in blocked], context))
    rng = random.Random(seed)
    domains = {name: domain_values(constraints, variables[name]) for name in names}
    while True:
        name = rng.choice(names)
        result = z3.unsat
        if domains[name]:
            result = solver.check(variables[name] == rng.choice(domains[name]))
        if result != z3.sat:
            result = solver.check()
            if result != z3.sat:
                return
        model = solver.model()
        knobs = make_knobs({n: model.eval(variables[n]).as_long() for n in names})
        yield knobs
        solver.add(z3.Or([variables[n] != v for n, v in knobs], context))


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
    # A knob the default does not name (one a newer space added) is not stepped.
    for name in sorted(domains.keys() & values.keys()):
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
        return enumerate_space(walk, seed, excluded, known, first=first)
