"""What the profile tests ask of a dumped dispatch: its problem's name and whether it is tunable."""

from __future__ import annotations

from pathlib import Path

from ireetune.core.target import Target
from ireetune.model.profile import describe_dispatch


def describe_problem(
    benchmark_path: Path, target: Target, encoded_mmt4d: bool = False
) -> tuple[str, bool]:
    """Return `describe_dispatch`'s problem name and whether the problem is tunable."""
    problem, tunable, _, _ = describe_dispatch(benchmark_path, target, encoded_mmt4d)
    return problem, tunable
