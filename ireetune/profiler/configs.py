"""Which configurations to profile each operation with, and their stable names.

`--configs` takes comma-separated items: `default` (the compiler's heuristic), a number N (the
first N configurations of the target's search space, in the target's order), or a file: a tuning
spec (`.mlir`, applied as is) or a JSON list of knob objects such as
`[{"dist_m": 64, "dist_n": 64, "vec_m": 8, "vec_n": 16, "vec_k": 16}]`. The default
configuration is always profiled: it is the baseline every other configuration is compared to.
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ireetune.core.candidate import Knobs, make_knobs
from ireetune.core.errors import IreetuneError
from ireetune.core.input_files import check_input_file, read_input_json

DEFAULT_NAME = "default"


class ConfigKind(enum.Enum):
    DEFAULT = "default"
    SEARCH_SPACE = "search-space"
    KNOBS = "knobs"
    SPEC = "spec"


@dataclass(frozen=True)
class Configuration:
    """One configuration: the compiler's default, a knob set, or a ready tuning spec."""

    name: str
    kind: ConfigKind
    knobs: Knobs | None = None
    spec_path: Path | None = None


DEFAULT_CONFIGURATION = Configuration(DEFAULT_NAME, ConfigKind.DEFAULT)


@dataclass(frozen=True)
class ConfigRequest:
    """What `--configs` asked for: how many from the search space, and the configs from files."""

    search_space_count: int
    fixed: tuple[Configuration, ...]


def name_knobs(knobs: Knobs) -> str:
    """Name a knob set by its values: `dist_m=64 vec_k=16` becomes `cfg_dm64_vk16`.

    Each knob is shortened to the initials of its underscore-separated words (keeping digits);
    when two knobs would share a short name, the full names are used instead.
    """
    shorts = [
        "".join(part[0] if not part.isdigit() else part for part in name.split("_"))
        for name, _ in knobs
    ]
    if len(set(shorts)) != len(shorts):
        shorts = [name for name, _ in knobs]
    parts = [f"{short}{value}" for short, (_, value) in zip(shorts, knobs, strict=True)]
    return re.sub(r"[^A-Za-z0-9_]", "", "cfg_" + "_".join(parts))


def _read_knob_file(path: Path) -> list[Configuration]:
    loaded = read_input_json(path, "knob file")
    if isinstance(loaded, dict):
        loaded = [loaded]
    if not isinstance(loaded, list) or not loaded:
        raise IreetuneError(f"{path}: a knob file holds a non-empty list of objects")
    configurations = []
    for number, entry in enumerate(loaded, start=1):
        if not isinstance(entry, dict) or not entry:
            raise IreetuneError(
                f"{path}, configuration {number}: expected an object of knob values"
            )
        if not all(
            isinstance(value, int | str) and not isinstance(value, bool) for value in entry.values()
        ):
            raise IreetuneError(
                f"{path}, configuration {number}: knob values are integers or strings"
            )
        knobs = make_knobs({str(key): value for key, value in entry.items()})
        configurations.append(Configuration(name_knobs(knobs), ConfigKind.KNOBS, knobs=knobs))
    return configurations


def parse_config_request(text: str) -> ConfigRequest:
    """Parse `--configs` (`default`, `8`, `tuned.mlir`, `knobs.json`, or a comma list of them)."""
    count = 0
    fixed: list[Configuration] = []
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise IreetuneError("--configs: nothing given (use default, a number, or a file)")
    for item in items:
        if item == DEFAULT_NAME:
            continue
        if item.isdigit():
            count = max(count, int(item))
            continue
        path = Path(item)
        if not os.path.lexists(path):
            raise IreetuneError(
                f"--configs: '{item}' is not default, a number, or an existing file"
            )
        check_input_file(path, "--configs file")
        if path.suffix == ".mlir":
            # Parsed here, once: a spec that does not parse would fail every compile.
            from iree.compiler import ir

            from ireetune.spec.source import read_spec

            read_spec(path, ir.Context())
            name = "spec_" + re.sub(r"[^A-Za-z0-9_]", "_", path.stem)
            fixed.append(Configuration(name, ConfigKind.SPEC, spec_path=path.resolve()))
        elif path.suffix == ".json":
            fixed.extend(_read_knob_file(path))
        else:
            raise IreetuneError(
                f"--configs: {path} is neither a spec (.mlir) nor a knob list (.json)"
            )
    names = [c.name for c in fixed]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise IreetuneError(f"--configs: configurations given twice: {', '.join(duplicates)}")
    return ConfigRequest(count, tuple(fixed))


def compile_patterns(texts: Sequence[str]) -> tuple[re.Pattern[str], ...]:
    """Compile `--dispatches` regular expressions, with a one-line error for a bad one."""
    patterns = []
    for text in texts:
        try:
            patterns.append(re.compile(text))
        except re.error as error:
            raise IreetuneError(
                f"--dispatches: '{text}' is not a regular expression: {error}"
            ) from None
    return tuple(patterns)


def is_selected(name: str, patterns: Sequence[re.Pattern[str]]) -> bool:
    """Select a dispatch when any pattern matches part of its name (all, with no patterns)."""
    return not patterns or any(pattern.search(name) for pattern in patterns)
