"""A time budget's parts as rounds (search/climb.py): before each part, the fastest candidate
that beats the default has its untried neighbours tried next, in place of the last waiting."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from iree.compiler import ir

from ireetune.core.candidate import Knobs
from ireetune.core.target import FamilySpace, SpaceRequest
from ireetune.frontend.load import load_dispatch
from ireetune.search.climb import ClimbingParts
from ireetune.targets import parse_target
from tests.conftest import TEST_TARGET


@pytest.fixture
def matmul_space(matmul_benchmark: Path, tmp_path: Path) -> tuple[FamilySpace, SpaceRequest]:
    """The CPU's space of the matmul dispatch, and the request its candidates are drawn for."""
    dispatch = load_dispatch(
        matmul_benchmark, None, parse_target(TEST_TARGET), tmp_path, ir.Context()
    )
    request = SpaceRequest(dispatch.problem, dispatch.variant_target, dispatch.default_knobs, 0)
    return dispatch.space, request


def test_a_leader_s_untried_neighbours_go_first_and_as_many_wait_as_before(
    matmul_space: tuple[FamilySpace, SpaceRequest],
) -> None:
    """The moved neighbours are one or two knobs, each at most a factor of two, away from the
    leader, none tried before; the parts hold as many candidates as before; a leader is climbed
    from once, and a leader slower than the default moves nothing."""
    space, request = matmul_space
    ordered = space.order(request, list(itertools.islice(space.generate(request), 24)))
    slow, fast = ordered[0][0], ordered[1][0]
    waiting: list[tuple[Knobs, float | None]] = list(ordered[2:8])
    parts = ClimbingParts(space, request, waiting, 2, [slow, fast])
    assert (parts.rounds_left, parts.untried) == (3, 6)

    parts.learn([(slow, 2.0), (fast, 0.5)])
    part = parts.next_round()

    after = part + parts.waiting
    moved = [knobs for knobs, score in after if (knobs, score) not in waiting]
    assert len(after) == len(waiting) and [knobs for knobs, _ in after[: len(moved)]] == moved
    tried = (slow, fast, request.default_knobs)
    fresh = [knobs for knobs in space.near(request, fast) if knobs not in tried]
    assert len(moved) == 6 < len(fresh)
    centre = dict(fast)
    for knobs in moved:
        changed = [(centre[name], value) for name, value in knobs if centre[name] != value]
        assert 1 <= len(changed) <= 2, knobs
        assert all(max(a, b) <= 2 * min(a, b) or max(a, b) <= 1 for a, b in changed), knobs
        assert knobs not in tried
    assert parts.notes == [
        f"the fastest candidate after 2 (2.000x) led: 6 of its {len(fresh)} untried neighbours "
        "go next"
    ]
    assert parts.climbed == [fast]

    # The same leader again, or a leader slower than the default: nothing moves.
    rest = list(parts.waiting)
    parts.learn([(slow, 2.0), (fast, 0.5)])
    assert parts.next_round() == rest[:2] and parts.notes == []
    parts.climbed.clear()
    parts.learn([(fast, 1.5)])
    assert parts.next_round() == rest[2:4] and parts.notes == []
    assert parts.rounds_left == 0


def test_a_space_that_cannot_draw_around_its_leader_leaves_the_order(
    matmul_space: tuple[FamilySpace, SpaceRequest],
) -> None:
    """A broken `near` never stops a run: the waiting candidates keep their order, and the
    notes say why."""
    _, request = matmul_space

    class Broken:
        def near(self, request: object, centre: object) -> list[object]:
            raise ValueError("no solver\nhere")

    leader: Knobs = (("tile", 4),)
    waiting: list[tuple[Knobs, float | None]] = [((("tile", 8),), 1.0), ((("tile", 16),), 0.5)]
    parts = ClimbingParts(Broken(), request, waiting, 1, [leader])  # type: ignore[arg-type]
    parts.learn([(leader, 0.5)])
    assert parts.next_round() == waiting[:1] and parts.waiting == waiting[1:]
    assert parts.notes == [
        "the fastest candidate after 1 (2.000x) led, but its neighbours could not be drawn "
        "(ValueError: no solver here): the order is kept"
    ]


def test_a_leader_with_one_untried_neighbour_says_so_in_the_singular(
    matmul_space: tuple[FamilySpace, SpaceRequest],
) -> None:
    _, request = matmul_space
    leader: Knobs = (("tile", 4),)
    neighbour: Knobs = (("tile", 8),)

    class OneNeighbour:
        def near(self, request: object, centre: object) -> list[Knobs]:
            return [leader, neighbour]

        def order(self, request: object, pool: list[Knobs]) -> list[tuple[Knobs, float]]:
            return [(knobs, 1.0) for knobs in pool]

    waiting: list[tuple[Knobs, float | None]] = [((("tile", 16),), 0.5), ((("tile", 32),), 0.4)]
    parts = ClimbingParts(OneNeighbour(), request, waiting, 1, [leader])  # type: ignore[arg-type]
    parts.learn([(leader, 0.8)])
    assert parts.next_round() == [(neighbour, 1.0)] and parts.waiting == waiting[:1]
    assert parts.notes == [
        "the fastest candidate after 1 (1.250x) led: its one untried neighbour goes next"
    ]
