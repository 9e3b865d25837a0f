"""Keep what is slow to compute again for a problem's space: the compiler's output, and the
solutions drawn from it.

Reading a GPU space costs a compile to the configuration stage (1-10 s), and drawing solutions
from its SMT problems with z3 runs at 3-65 per second: a pool of 400 took 14 s. The CPU space is
written by hand, but drawing 400 configurations from it still took 1.2 s on the loaded 2-core
machine. Both depend only on what a target puts in the key (problem, target, compile flags or
machine facts, compiler version), so they are kept in a folder beside the tuning database, one
entry per key:

    <database folder>/spaces/<hash of the key>/
        space.mlir        (GPU) the compiler's output with its `iree_codegen.smt.constraints` ops
        proxy.mlir        (GPU batch matmuls, read through a proxy) the proxy's output
        solutions.jsonl   one configuration a line, in the order they were drawn
        meta.json         what the key is made of, for a reader

A later run takes its pool from the stored solutions first, in a seeded order
(`stored_first`), then draws fresh ones (the stored ones blocked) when the pool needs more, and
stores those in turn. The same seed and the same stored solutions give the same pool; a run that
needs no more than is stored draws nothing, and the tuner's ordering does not depend on the
pool's order, so a resumed run meets the same candidates.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
from collections.abc import Mapping, Sequence
from pathlib import Path

from ireetune.core.candidate import Knobs, make_knobs
from ireetune.core.files import write_text_atomically

logger = logging.getLogger(__name__)

CACHE_VERSION = 1


def compute_cache_key(parts: Sequence[str]) -> str:
    """Hash what a space depends on (problem, target, flags or facts, versions) into a name."""
    text = json.dumps([CACHE_VERSION, *parts])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def stored_first(stored: Sequence[Knobs], seed: int) -> list[Knobs]:
    """Order stored solutions for a run: a seeded shuffle, the same for the same seed."""
    ordered = list(stored)
    random.Random(f"{seed}:stored").shuffle(ordered)
    return ordered


class SpaceCache:
    """One cache entry: the compiler's output for a space and the solutions drawn from it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    @property
    def space_path(self) -> Path:
        return self.folder / "space.mlir"

    @property
    def proxy_path(self) -> Path:
        return self.folder / "proxy.mlir"

    def read_space(self) -> tuple[str, str | None] | None:
        """Return the stored compiler output (and the proxy's, if the space came from one)."""
        try:
            text = self.space_path.read_text()
            proxy = self.proxy_path.read_text() if self.proxy_path.is_file() else None
        except OSError:
            return None
        return text, proxy

    def write_space(self, text: str, proxy: str | None, meta: Mapping[str, object]) -> None:
        """Store the compiler's output; a cache that cannot be written is only a lost speedup."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            if proxy is not None:
                write_text_atomically(self.proxy_path, proxy)
            write_text_atomically(
                self.folder / "meta.json", json.dumps(dict(meta), indent=1) + "\n"
            )
            # Written last: its presence says the entry is whole.
            write_text_atomically(self.space_path, text)
        except OSError as error:
            logger.warning("could not keep the space in %s: %s", self.folder, error)

    def read_solutions(self) -> list[Knobs]:
        """Return the stored solutions in the order they were drawn, each once."""
        path = self.folder / "solutions.jsonl"
        try:
            lines = path.read_text().splitlines()
        except OSError:
            return []
        seen: set[Knobs] = set()
        solutions = []
        for line in lines:
            try:
                data = json.loads(line)
                knobs = make_knobs(
                    {
                        str(name): value
                        for name, value in data.items()
                        if isinstance(value, int | str) and not isinstance(value, bool)
                    }
                )
            except (ValueError, AttributeError):
                # A line cut short by a killed run, or damage: skip it.
                continue
            if knobs and len(knobs) == len(data) and knobs not in seen:
                seen.add(knobs)
                solutions.append(knobs)
        return solutions

    def add_solution(self, knobs: Knobs) -> None:
        """Append one solution (one short write, so concurrent runs do not interleave lines)."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            with open(self.folder / "solutions.jsonl", "a") as handle:
                handle.write(json.dumps(dict(knobs), sort_keys=True) + "\n")
        except OSError as error:
            logger.warning("could not keep a solution in %s: %s", self.folder, error)
