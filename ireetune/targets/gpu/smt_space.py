"""Sample the compiler's SMT search spaces with z3: lazily, reproducibly and with diversity.

Enumerating a whole space first is slow (a 1024x1280x1280 f16 matmul has about 5000 solutions
over two pipelines and took 10-15 s), and z3's own order of solutions walks one corner of the
space. Instead each solution is drawn as follows: the knobs are visited in a seeded random order
and a few random knobs are pinned, as assumptions, above or below random thresholds drawn
log-uniformly (tile sizes and counts spread over orders of magnitude); pins are dropped at random
until the rest are satisfiable, and the model found is yielded and blocked. Computing each knob's
exact domain first would be more uniform but costs seconds: z3 is slow to prove that a knob of
these nonlinear problems has no further value. Spaces (pipelines) take turns, so a pool of any size covers all of them.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import z3

# Pins are thresholds drawn log-uniformly from [1, MAX_PIN_VALUE]: tile sizes, counts and thread
# numbers of every space seen so far lie in that range.
MAX_PIN_VALUE = 4096
# Knobs pinned per solution. A few pins already spread the solutions over the space; each costs
# at most one query when it has to be dropped.
PINS_PER_SOLUTION = 3


@dataclass(frozen=True)
class SmtSpace:
    """One SMT-LIB problem and the names of its knobs (the variables a configuration needs)."""

    label: str
    smtlib: str
    knob_names: tuple[str, ...]


class _SpaceSampler:
    """Draw distinct solutions of one space; see the module docstring for the method."""

    def __init__(self, space: SmtSpace, seed: int, excluded: Sequence[dict[str, int]]) -> None:
        # A private context: z3's choices depend on term ids, so a shared one would make the
        # sequence depend on whatever was solved before.
        self.context = z3.Context()
        self.rng = random.Random(f"{seed}:{space.label}")
        self.solver = z3.Solver(ctx=self.context)
        self.solver.set("random_seed", seed)
        self.solver.add(z3.parse_smt2_string(space.smtlib, ctx=self.context))
        self.variables = {name: z3.Int(name, self.context) for name in space.knob_names}
        # Knobs seen with one value only are not worth pinning (fixed sizes, stage counts).
        self.seen: dict[str, set[int]] = {name: set() for name in space.knob_names}
        for values in excluded:
            if set(values) == set(self.variables):
                self._block(values)
        self.exhausted = False

    def _block(self, values: dict[str, int]) -> None:
        self.solver.add(z3.Or([self.variables[name] != value for name, value in values.items()]))

    def _random_pin(self, name: str) -> z3.BoolRef:
        threshold = round(2 ** self.rng.uniform(0.0, math.log2(MAX_PIN_VALUE)))
        variable = self.variables[name]
        return variable >= threshold if self.rng.random() < 0.5 else variable <= threshold

    def next(self) -> dict[str, int] | None:
        if self.exhausted:
            return None
        names = [name for name, seen in self.seen.items() if len(seen) != 1] or list(self.seen)
        chosen = self.rng.sample(names, min(PINS_PER_SOLUTION, len(names)))
        pins = [self._random_pin(name) for name in chosen]
        while self.solver.check(*pins) != z3.sat:
            if not pins:
                self.exhausted = True
                return None
            pins.pop(self.rng.randrange(len(pins)))
        model = self.solver.model()
        values = {
            name: model.eval(variable, model_completion=True).as_long()
            for name, variable in self.variables.items()
        }
        for name, value in values.items():
            self.seen[name].add(value)
        self._block(values)
        return values


def sample_spaces(
    spaces: Sequence[SmtSpace],
    seed: int,
    excluded: dict[str, dict[str, int]] | None = None,
    known: Mapping[str, Sequence[dict[str, int]]] | None = None,
) -> Iterator[tuple[int, dict[str, int]]]:
    """Yield (space index, knob values) lazily, taking the spaces in turn until all run dry.

    `excluded` maps a space's label to one solution never to yield (the default configuration);
    `known` to solutions already drawn (stored ones), never yielded again either. The same seed
    gives the same sequence.
    """
    samplers: dict[int, _SpaceSampler] = {}
    live = list(range(len(spaces)))
    while live:
        for index in list(live):
            if index not in samplers:
                space = spaces[index]
                blocked = [excluded[space.label]] if excluded and space.label in excluded else []
                blocked.extend(known.get(space.label, ()) if known else ())
                samplers[index] = _SpaceSampler(space, seed, blocked)
            values = samplers[index].next()
            if values is None:
                live.remove(index)
                continue
            yield index, values


def explain_unsatisfiable(smtlib: str, messages: tuple[str, ...]) -> str | None:
    """Return None when a space has a solution, else the constraints that conflict: the
    compiler's messages of an unsat core (`m_tile must be divisible by ...`), or a plain "no
    solution" when the messages do not line up with the SMT-LIB asserts."""
    context = z3.Context()
    asserts = list(z3.parse_smt2_string(smtlib, ctx=context))
    solver = z3.Solver(ctx=context)
    if len(messages) != len(asserts):
        solver.add(asserts)
        return None if solver.check() == z3.sat else "its constraints admit no configuration"
    tracked = {}
    for position, term in enumerate(asserts):
        indicator = z3.Bool(f"assert_{position}", context)
        tracked[str(indicator)] = messages[position]
        solver.assert_and_track(term, indicator)
    if solver.check() == z3.sat:
        return None
    core = sorted(tracked[str(literal)] for literal in solver.unsat_core())
    return "no configuration satisfies: " + "; ".join(core[:4])
