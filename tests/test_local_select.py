"""The in-process variants phase: which spec variants the whole model is tried with."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ireetune.model.timing import ModelRun
from ireetune.model.variants import plan_variants
from ireetune.model_run.local_select import _compile_order, _fastest_per_dispatch

OUTPUTS = (np.arange(4, dtype=np.float32),)
WRONG = (np.arange(4, dtype=np.float32) + 1,)


def _run(label: str, ms: float, outputs: tuple[np.ndarray, ...] = OUTPUTS) -> ModelRun:
    # Six rounds of one call, a little spread so that the interval has a width.
    return ModelRun(label, outputs, tuple(ms * (1 + 0.01 * (i % 3)) for i in range(6)), "")


PLANS = plan_variants(
    [("a", [Path("a0"), Path("a1")]), ("b", [Path("b0"), Path("b1")]), ("c", [Path("c0")])]
)


def test_each_dispatch_s_fastest_candidate_with_the_default_s_outputs_is_combined() -> None:
    first = {
        "default": _run("default", 10.0),
        "d0c0": _run("d0c0", 8.0),
        "d0c1": _run("d0c1", 9.0),
        "d1c0": _run("d1c0", 11.0),
        "d1c1": _run("d1c1", 9.5),
        # The fastest of all, but its outputs differ from the default's.
        "d2c0": _run("d2c0", 5.0, WRONG),
        "best": _run("best", 7.0),
    }
    combined = _fastest_per_dispatch(first, 1, PLANS)
    assert combined is not None and combined.label == "combined"
    assert combined.specs == (Path("a0"), Path("b1"))


def test_no_combination_of_fewer_than_two_dispatches_or_of_the_joint_variant_s_specs() -> None:
    first = {
        "default": _run("default", 10.0),
        "d0c0": _run("d0c0", 8.0),
        "d1c0": _run("d1c0", 10.5),
        "d1c1": _run("d1c1", 12.0),
    }
    assert _fastest_per_dispatch(first, 1, PLANS) is None
    # a0, b0 and c0 fastest: the joint variant `best` already is that combination.
    first.update(d1c0=_run("d1c0", 9.0), d2c0=_run("d2c0", 9.0))
    assert _fastest_per_dispatch(first, 1, PLANS) is None
    # A variant that did not run (or was not built) is no one's fastest.
    first.update(d1c0=_run("d1c0", 12.0), d2c0=_run("d2c0", 11.0))
    first["d1c1"] = ModelRun("d1c1", (), (), "crashed")
    assert _fastest_per_dispatch(first, 1, PLANS) is None


def test_the_joint_variant_and_every_dispatch_s_first_candidate_compile_first() -> None:
    assert [plan.label for plan in _compile_order(PLANS)] == [
        "best", "d0c0", "d1c0", "d2c0", "d0c1", "d1c1",
    ]  # fmt: skip
