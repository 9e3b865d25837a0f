"""Argument types shared by the subcommands."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """Parse an integer of at least 1 (argparse type)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value
