"""The search strategies, one module each (search/strategy.py says what one is): `--order`
takes their names, and a run calls the one it names.

A strategy's module is named after it and defines `propose`. Adding a strategy is adding its
module: it is found here by name, without being imported until a run asks for it (so that the
command line stays quick to start).
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING

from ireetune.core.errors import IreetuneError

if TYPE_CHECKING:
    from ireetune.search.strategy import Strategy

# The order `--order` lists the strategies in (the first is the default); others follow by name.
LISTED_FIRST = ("auto", "learned", "heuristic", "random")


def strategy_names() -> tuple[str, ...]:
    """Name every strategy, in the order `--order` lists them."""
    names = [info.name for info in pkgutil.iter_modules(__path__) if not info.ispkg]
    return tuple(
        sorted(
            names,
            key=lambda name: (
                LISTED_FIRST.index(name) if name in LISTED_FIRST else len(LISTED_FIRST),
                name,
            ),
        )
    )


def find_strategy(name: str) -> Strategy:
    """Return the strategy called `name`; raise an IreetuneError naming the others if none is."""
    names = strategy_names()
    if name not in names:
        raise IreetuneError(f"unknown search strategy '{name}'; choose from {', '.join(names)}")
    strategy: Strategy = importlib.import_module(f"{__name__}.{name}").propose
    return strategy
