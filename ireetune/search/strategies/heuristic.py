"""`heuristic`: the space's hand-weighted score orders the pool (`FamilySpace.order`)."""

from __future__ import annotations

from collections.abc import Sequence

from ireetune.core.candidate import Knobs
from ireetune.search.learned_order import propose_ordered
from ireetune.search.strategy import Proposal, SearchInput


def propose(search: SearchInput, pool: Sequence[Knobs]) -> Proposal:
    return propose_ordered(search, pool, "heuristic")
