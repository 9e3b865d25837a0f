"""`learned`: the learned cost model's best, measured in rounds; refused without a model."""

from __future__ import annotations

from collections.abc import Sequence

from ireetune.core.candidate import Knobs
from ireetune.search.learned_order import propose_ordered
from ireetune.search.strategy import Proposal, SearchInput


def propose(search: SearchInput, pool: Sequence[Knobs]) -> Proposal:
    return propose_ordered(search, pool, "learned")
