"""Lazy, seeded, diverse enumeration of a finite z3 space.

Each query asks for a solution with one variable fixed to a random value of its domain (falling
back to any solution when that is unsatisfiable), then blocks the solution found. A private z3
context per enumeration keeps the sequence reproducible: z3's choices depend on its internal term
ids, which a shared context would carry over from earlier solves.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence

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
