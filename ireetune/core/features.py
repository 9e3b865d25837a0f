"""What a target's learned cost model sees: named numeric features of a candidate."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FeatureSpace:
    """A family of features (a model trained on one family applies only to that family).

    `family` names the feature set and its version, e.g. `llvm-cpu/gemm-view/v1`; a change to the
    features must change the name, so that models trained on the old ones are not reused.
    """

    family: str
    names: tuple[str, ...]
