"""What a target's learned cost model sees: named numeric features of a candidate, and the role
that computes them (a target's `FeatureExtractor`, for one problem on one machine)."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass

from ireetune.core.candidate import Knobs

# A machine fact a target's features depend on (vector width, cache size, thread count).
FactValue = int | float | str


@dataclass(frozen=True)
class FeatureSpace:
    """A family of features (a model trained on one family applies only to that family).

    `family` names the feature set and its version, e.g. `llvm-cpu/gemm-view/v1`; a change to the
    features must change the name, so that models trained on the old ones are not reused.
    """

    family: str
    names: tuple[str, ...]


class FeatureExtractor(abc.ABC):
    """The features of one problem's candidates on one machine (its facts read from the
    dispatch's executable target, or recorded with earlier measurements)."""

    space: FeatureSpace

    @abc.abstractmethod
    def machine_facts(self) -> dict[str, FactValue]:
        """Return what the features know about the machine, to record beside measurements."""

    @abc.abstractmethod
    def features(self, pool: Sequence[Knobs]) -> list[list[float]]:
        """Return each candidate's features, in `space.names` order."""
