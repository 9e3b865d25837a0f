"""A configuration as a sorted tuple of knob values, hashable and printable."""

from __future__ import annotations

from collections.abc import Mapping

Knobs = tuple[tuple[str, int | str], ...]


def make_knobs(values: Mapping[str, int | str]) -> Knobs:
    """Freeze a knob mapping into the canonical sorted tuple form."""
    return tuple(sorted(values.items()))


def format_knobs(knobs: Knobs | None) -> str:
    """Write knobs as `name=value` pairs separated by spaces (empty for the baseline)."""
    if knobs is None:
        return ""
    return " ".join(f"{name}={value}" for name, value in knobs)
