"""Argument types and help texts shared by the subcommands.

Every numeric flag goes through one of these types, so an out-of-range value is refused while
parsing, before any work, as one line naming the flag (argparse adds "argument --flag:"). Every
type has an upper bound as well as a lower one: counts (candidates, dispatches, repetitions,
rounds, jobs) are at most MAX_COUNT, durations at most MAX_SECONDS, other quantities at most
MAX_QUANTITY; no number is infinite or NaN (tests/commands/test_hardening_outputs.py tries each option of
every command with both).
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from pathlib import Path

from ireetune.core.input_files import describe_path, is_utf8_name

# The forms `--target` takes, for every command's help.
TARGET_HELP = (
    "cpu (this host), cpu:CPU (e.g. cpu:znver4), cuda:sm_XX (e.g. cuda:sm_80), "
    "rocm:gfxNNN (e.g. rocm:gfx942) or vulkan[:NAME] (e.g. vulkan:valhall4; "
    "vulkan alone: this machine's Vulkan device)"
)
# z3 takes its random seed as an unsigned 32-bit value; keep seeds where every consumer agrees.
MAX_SEED = 2**31 - 1
# The most of anything a count flag asks for: far above any useful run (the largest search
# spaces hold tens of thousands of configurations), far below a run that never ends.
MAX_COUNT = 100_000
# The longest duration a flag takes (30 days): far above any run, far below what the clocks and
# waits it reaches accept (`threading.TIMEOUT_MAX`, a deadline in nanoseconds).
MAX_SECONDS = 30 * 24 * 3600.0
# The largest other quantity (a peak rate in GFLOP/s): a bound against typos, not physics.
MAX_QUANTITY = 1e12
# The largest speedup threshold: a variant must be this many times faster to be kept.
MAX_THRESHOLD = 1000.0


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


def _count(text: str, least: int) -> int:
    value = _parse_int(text)
    if value < least:
        raise argparse.ArgumentTypeError(f"must be at least {least}, got {value}")
    if value > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_COUNT}, got {value}")
    return value


def positive_int(text: str) -> int:
    """Parse a count from 1 to MAX_COUNT (argparse type)."""
    return _count(text, 1)


def non_negative_int(text: str) -> int:
    """Parse a count from 0 to MAX_COUNT (argparse type)."""
    return _count(text, 0)


def device_list(text: str) -> tuple[str, ...]:
    """Parse comma-separated runtime devices; "" means the default (argparse type)."""
    if not text:
        return ()
    devices = tuple(device.strip() for device in text.split(","))
    if not all(devices):
        raise argparse.ArgumentTypeError(
            f"'{text}' has an empty device name: give devices as local-task or cuda://0,cuda://1"
        )
    for device in devices:
        driver, _, path = device.partition("://")
        # IREE 3.13 matches what follows `vulkan://` against device UUIDs only.
        if driver == "vulkan" and path.isdigit():
            raise argparse.ArgumentTypeError(
                f"'{device}' names no device: IREE opens Vulkan devices as vulkan or "
                "vulkan://GPU-<uuid> (`iree-run-module --list_devices` prints them)"
            )
    return devices


def comma_list(text: str) -> tuple[str, ...]:
    """Parse a comma-separated list, dropping empty items (argparse type)."""
    return tuple(item for item in text.split(",") if item)


def seed(text: str) -> int:
    """Parse a random seed: an integer from 0 to MAX_SEED (argparse type)."""
    value = _parse_int(text)
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be between 0 and {MAX_SEED}, got {value}")
    return value


def _bounded_float(text: str, holds: Callable[[float], bool], bound: str, most: float) -> float:
    """Parse a finite number for which `holds` is true (else "must be `bound`") and that is at
    most `most`."""
    value = _parse_float(text)
    if not holds(value):
        raise argparse.ArgumentTypeError(f"must be {bound}, got {text}")
    if value > most:
        raise argparse.ArgumentTypeError(f"must be at most {most:g}, got {text}")
    return value


def positive_seconds(text: str) -> float:
    """Parse a duration in seconds greater than 0 and at most MAX_SECONDS (argparse type)."""
    return _bounded_float(text, lambda value: value > 0, "more than 0 seconds", MAX_SECONDS)


def non_negative_seconds(text: str) -> float:
    """Parse a duration in seconds from 0 to MAX_SECONDS (argparse type)."""
    return _bounded_float(text, lambda value: value >= 0, "at least 0 seconds", MAX_SECONDS)


def positive_float(text: str) -> float:
    """Parse a number greater than 0 and at most MAX_QUANTITY (argparse type)."""
    return _bounded_float(text, lambda value: value > 0, "more than 0", MAX_QUANTITY)


def speedup_threshold(text: str) -> float:
    """Parse the speedup a result must reach, or a factor of times: from 0 to MAX_THRESHOLD
    (argparse type; a threshold of 0 lets every candidate pass)."""
    return _bounded_float(text, lambda value: value >= 0, "at least 0", MAX_THRESHOLD)


def fraction(text: str) -> float:
    """Parse a share in (0, 1] (argparse type)."""
    return _bounded_float(text, lambda value: 0 < value <= 1, "more than 0 and at most 1", 1.0)


def user_path(text: str) -> Path:
    """Parse a file or folder name (argparse type): every path a command takes goes through
    here, so a name that is not valid UTF-8 (which no file ireetune writes could record) is
    refused while parsing, naming the option."""
    if not is_utf8_name(text):
        raise argparse.ArgumentTypeError(
            f"'{describe_path(text)}' is not a valid UTF-8 name (ireetune records file names "
            "in UTF-8; rename it)"
        )
    if not os.path.isabs(text):
        try:
            folder = os.getcwd()
        except OSError:
            folder = ""
        if not is_utf8_name(folder):
            raise argparse.ArgumentTypeError(
                f"the current folder {describe_path(folder)} is not a valid UTF-8 name: give "
                f"'{text}' as an absolute path, or run from another folder"
            )
    return Path(text)


def _flag_text(text: str, option: str) -> tuple[str, ...]:
    # Imported here: the flag checks import the compiler, which parsing other commands must not.
    from ireetune.flags.check import parse_flag_text

    return parse_flag_text(text, option)


def flag_text(text: str) -> tuple[str, ...]:
    """Parse `--flags` text into iree-compile flags (argparse type; a bad flag is an
    IreetuneError, which argparse passes through as it is)."""
    return _flag_text(text, "--flags")


def try_flag_text(text: str) -> tuple[str, ...]:
    """Parse one `--try-flags` set, as `flag_text` does, naming `--try-flags` in its errors."""
    return _flag_text(text, "--try-flags")
