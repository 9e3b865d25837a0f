"""`auto`: the learned cost model's best when one is stored or the database can teach one, else
the space's heuristic (search/learned_order.py); with a model, measured in rounds."""

from __future__ import annotations

from collections.abc import Sequence

from ireetune.core.candidate import Knobs
from ireetune.search.learned_order import propose_ordered
from ireetune.search.strategy import Proposal, SearchInput


def propose(search: SearchInput, pool: Sequence[Knobs]) -> Proposal:
    return propose_ordered(search, pool, "auto")
