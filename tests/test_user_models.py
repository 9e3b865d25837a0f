"""Models as users have them: integer and bf16 inputs, a module of several functions, a dynamic
batch fixed by `--input`, and a run whose later phase fails after its flag phase decided.

Each model is built here (onnx.helper graphs, tiny .mlir) and goes through the real `ireetune
tune --target cpu --no-flag-search` with the fast settings, or through the smallest real code
path that covers it.
"""

from __future__ import annotations

from pathlib import Path

from tests.test_model_resume import USER_FLAG, after_flags, model  # noqa: F401  (fixtures)


def test_the_flag_phase_keeps_tuned_flags_the_moment_it_decides(
    after_flags: Path,  # noqa: F811
) -> None:
    # Killed once the flag phase was saved, before any later phase ran: the flags are there.
    assert (after_flags / "tuned_flags.txt").read_text().splitlines() == [USER_FLAG]
