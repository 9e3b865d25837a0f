"""Argument types and help texts shared by the subcommands.

Every numeric flag goes through one of these types, so an out-of-range value is refused while
parsing, before any work, as one line naming the flag (argparse adds "argument --flag:").
"""

from __future__ import annotations

import argparse
import math

# The forms `--target` takes, for every command's help.
TARGET_HELP = (
    "cpu (this host), cpu:CPU (e.g. cpu:znver4), cuda:sm_XX (e.g. cuda:sm_80) "
    "or rocm:gfxNNN (e.g. rocm:gfx942)"
)
# z3 takes its random seed as an unsigned 32-bit value; keep seeds where every consumer agrees.
MAX_SEED = 2**31 - 1


def _parse_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None


def _parse_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value


def positive_int(text: str) -> int:
    """Parse an integer of at least 1 (argparse type)."""
    value = _parse_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """Parse an integer of at least 0 (argparse type)."""
    value = _parse_int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def seed(text: str) -> int:
    """Parse a random seed: an integer from 0 to MAX_SEED (argparse type)."""
    value = _parse_int(text)
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be between 0 and {MAX_SEED}, got {value}")
    return value


def positive_seconds(text: str) -> float:
    """Parse a duration in seconds greater than 0 (argparse type)."""
    value = _parse_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {text}")
    return value


def non_negative_seconds(text: str) -> float:
    """Parse a duration in seconds of at least 0 (argparse type)."""
    value = _parse_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0 seconds, got {text}")
    return value


def positive_float(text: str) -> float:
    """Parse a finite number greater than 0 (argparse type)."""
    value = _parse_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return value


def fraction(text: str) -> float:
    """Parse a share in (0, 1] (argparse type)."""
    value = _parse_float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most 1, got {text}")
    return value
