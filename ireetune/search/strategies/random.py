"""`random`: the pool's first candidates, a baseline for the others (the sampler's own order is
already a seeded random walk over the space)."""

from __future__ import annotations

from collections.abc import Sequence

from ireetune.core.candidate import Knobs
from ireetune.search.strategy import Proposal, SearchInput


def propose(search: SearchInput, pool: Sequence[Knobs]) -> Proposal:
    return Proposal([(knobs, None) for knobs in pool[: search.num_candidates]], "random")
