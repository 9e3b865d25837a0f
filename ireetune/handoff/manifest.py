"""The benchmark folder's manifest: everything needed to measure and verify it, as JSON.

Runtime-only: read on machines with only `iree-base-runtime` and `numpy`. Paths are relative to
the run folder, so the folder can be copied anywhere.

A manifest is read as untrusted data: every field's type is checked, candidate ids are integers
and every path must stay inside the run folder. (The binaries it names are native code all the
same: run only folders you produced.)
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ireetune.errors import IreetuneError
from ireetune.run_dir import is_inside_folder
from ireetune.run_files import read_json_file

MANIFEST_NAME = "handoff.json"
RESULTS_NAME = "benchmark_results.json"
# The leaders' reference programs, compiled by `finish` when the manifest deferred them.
REFERENCES_NAME = "verify/references.json"
FORMAT = "ireetune-benchmark-folder/1"
# A manifest lists a few thousand candidates at most: some hundred kilobytes.
MAX_MANIFEST_BYTES = 16 * 2**20
# The random inputs are made where they run, from the manifest's shapes: bound what a tampered
# manifest can make us allocate (2**31 elements is 8 GiB of f32, far above any dispatch's inputs).
MAX_INPUT_ELEMENTS = 2**31
MAX_INPUTS = 64
MAX_RANK = 16


@dataclass(frozen=True)
class FolderCandidate:
    """One binary to time, and the reference program that checks its outputs."""

    candidate_id: int
    vmfb: str
    reference_vmfb: str
    reference_hash: str


@dataclass(frozen=True)
class VerifySettings:
    """How outputs are checked: the random inputs (made where they run, from a seed: they can be
    hundreds of megabytes), the result type and reduction size, and how many candidates."""

    seed: int
    input_shapes: tuple[tuple[int, ...], ...]
    input_types: tuple[str, ...]
    output_type: str
    reduction_size: int
    top: int


@dataclass(frozen=True)
class Manifest:
    problem: str
    target: str
    devices: tuple[str, ...]
    repetitions: int
    min_repetition_s: float
    hopeless_factor: float
    confirm_top: int
    confirm_rounds: int
    baseline: FolderCandidate
    candidates: tuple[FolderCandidate, ...]
    verify: VerifySettings
    # The decision rule's settings (ireetune/decision): the benchmarking side chooses contenders
    # and, where real inputs decide (the CPU), times them there; `finish` reaches the verdict.
    threshold: float = 1.02
    real_input_decides: bool = False
    real_input_rounds: int = 7
    # Seconds allowed for loading one candidate (`--benchmark-timeout`); older folders lack it.
    benchmark_timeout_s: float = 10.0
    # Global iree-compile flags every candidate was compiled with (`--flags`, a flag winner).
    global_flags: tuple[str, ...] = ()
    # No reference program was compiled yet: `finish` compiles the leaders' (REFERENCES_NAME).
    references_deferred: bool = False


def write_manifest(run_dir: Path, manifest: Manifest) -> Path:
    """Write the manifest into the run folder; return its path."""
    path = run_dir / MANIFEST_NAME
    payload = {"format": FORMAT, **asdict(manifest)}
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def hash_manifest(run_dir: Path) -> str:
    """Return the SHA-256 of the folder's manifest file: results name the manifest they measured."""
    return hashlib.sha256((run_dir / MANIFEST_NAME).read_bytes()).hexdigest()


def check_results_match_manifest(run_dir: Path) -> None:
    """Refuse benchmark results that were not measured from this folder's current manifest."""
    results_path = run_dir / RESULTS_NAME
    if not results_path.exists():
        raise IreetuneError(
            f"{run_dir} has no {RESULTS_NAME}; benchmark it first: ireetune benchmark-folder {run_dir}"
        )
    results = read_json_file(results_path)
    recorded = results.get("manifest_sha256") if isinstance(results, dict) else None
    if recorded is None:
        raise IreetuneError(
            f"{results_path} names no manifest; measure the folder again with "
            f"`ireetune benchmark-folder {run_dir}`"
        )
    if recorded != hash_manifest(run_dir):
        raise IreetuneError(
            f"{results_path} was measured from another {MANIFEST_NAME}; measure the folder again "
            f"with `ireetune benchmark-folder {run_dir}`"
        )


def check_inside_folder(run_dir: Path, relative: str) -> Path:
    """Return `run_dir / relative` if it resolves inside the folder (symlinks followed).

    Raises ValueError for a path that leads out of the folder, so a crafted folder can neither
    name a binary elsewhere nor make the benchmarking side write elsewhere.
    """
    path = run_dir / relative
    if not is_inside_folder(run_dir, relative):
        raise ValueError(f"{path} leads outside the run folder {run_dir}")
    return path


class _Reader:
    """Read one manifest's fields with their types checked; errors name the file and field."""

    def __init__(self, run_dir: Path, path: Path) -> None:
        self.run_dir = run_dir
        self.path = path

    def fail(self, field: str, problem: str) -> ValueError:
        return ValueError(f"{self.path}: {field} {problem}")

    def field(self, data: dict[str, Any], name: str, where: str) -> Any:
        if not isinstance(data, dict) or name not in data:
            raise self.fail(f"{where}{name}", "is missing")
        return data[name]

    def integer(self, data: dict[str, Any], name: str, where: str = "", minimum: int = 0) -> int:
        value = self.field(data, name, where)
        # bool is an int in Python; a JSON true is not a count.
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(f"{where}{name}", f"must be an integer, got {json.dumps(value)}")
        if value < minimum:
            raise self.fail(f"{where}{name}", f"must be at least {minimum}, got {value}")
        return value

    def number(self, data: dict[str, Any], name: str, where: str = "") -> float:
        value = self.field(data, name, where)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise self.fail(f"{where}{name}", f"must be a number, got {json.dumps(value)}")
        if value < 0:
            raise self.fail(f"{where}{name}", f"must be at least 0, got {value}")
        return float(value)

    def text(self, data: dict[str, Any], name: str, where: str = "") -> str:
        value = self.field(data, name, where)
        if not isinstance(value, str):
            raise self.fail(f"{where}{name}", f"must be a string, got {json.dumps(value)}")
        return value

    def texts(self, data: dict[str, Any], name: str, where: str = "") -> tuple[str, ...]:
        value = self.field(data, name, where)
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise self.fail(f"{where}{name}", "must be a list of strings")
        return tuple(value)

    def inside_path(self, data: dict[str, Any], name: str, where: str, optional: bool) -> str:
        """Read a path that must be relative and resolve inside the run folder."""
        value = self.text(data, name, where)
        if not value and optional:
            return value
        relative = Path(value)
        if not value or relative.is_absolute() or ".." in relative.parts:
            raise self.fail(
                f"{where}{name}", f"must be a path inside the run folder, got {json.dumps(value)}"
            )
        if not is_inside_folder(self.run_dir, value):
            raise self.fail(f"{where}{name}", f"leads outside the run folder: {json.dumps(value)}")
        return value

    def candidate(self, data: dict[str, Any], where: str) -> FolderCandidate:
        if not isinstance(data, dict):
            raise self.fail(where.rstrip("."), "must be an object")
        return FolderCandidate(
            candidate_id=self.integer(data, "candidate_id", where),
            vmfb=self.inside_path(data, "vmfb", where, optional=False),
            reference_vmfb=self.inside_path(data, "reference_vmfb", where, optional=True),
            reference_hash=self.text(data, "reference_hash", where),
        )


def read_manifest(run_dir: Path) -> Manifest:
    """Read a run folder's manifest; raise ValueError (one line) for a folder that is not one.

    Every field is checked: a crafted manifest can not name a binary or write a file outside the
    folder, and a wrong type is refused here rather than failing halfway through a measurement.
    """
    path = run_dir / MANIFEST_NAME
    if not path.exists():
        raise ValueError(
            f"{run_dir} has no {MANIFEST_NAME}; compile it with `tune-dispatch --stop-after compile`"
        )
    data = read_json_file(path, max_bytes=MAX_MANIFEST_BYTES)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path} is not a {FORMAT} manifest")
    reader = _Reader(run_dir, path)
    baseline = reader.candidate(reader.field(data, "baseline", ""), "baseline.")
    if baseline.candidate_id != 0:
        raise reader.fail("baseline.candidate_id", f"must be 0, got {baseline.candidate_id}")
    listed = reader.field(data, "candidates", "")
    if not isinstance(listed, list):
        raise reader.fail("candidates", "must be a list")
    candidates = tuple(
        reader.candidate(entry, f"candidates[{index}].") for index, entry in enumerate(listed)
    )
    seen: set[int] = set()
    for index, entry in enumerate(candidates):
        if entry.candidate_id < 1 or entry.candidate_id in seen:
            raise reader.fail(
                f"candidates[{index}].candidate_id",
                f"must be a new id of at least 1, got {entry.candidate_id}",
            )
        seen.add(entry.candidate_id)
    verify = reader.field(data, "verify", "")
    shapes = reader.field(verify, "input_shapes", "verify.")
    if not isinstance(shapes, list) or not all(
        isinstance(shape, list)
        and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
        for shape in shapes
    ):
        raise reader.fail("verify.input_shapes", "must be a list of lists of sizes")
    _check_input_sizes(reader, shapes, reader.texts(verify, "input_types", "verify."))
    return Manifest(
        problem=reader.text(data, "problem"),
        target=reader.text(data, "target"),
        devices=reader.texts(data, "devices"),
        repetitions=reader.integer(data, "repetitions", minimum=1),
        min_repetition_s=reader.number(data, "min_repetition_s"),
        hopeless_factor=reader.number(data, "hopeless_factor"),
        confirm_top=reader.integer(data, "confirm_top"),
        confirm_rounds=reader.integer(data, "confirm_rounds"),
        baseline=baseline,
        candidates=candidates,
        verify=VerifySettings(
            seed=reader.integer(verify, "seed", "verify."),
            input_shapes=tuple(tuple(shape) for shape in shapes),
            input_types=reader.texts(verify, "input_types", "verify."),
            output_type=reader.text(verify, "output_type", "verify."),
            reduction_size=reader.integer(verify, "reduction_size", "verify.", minimum=1),
            top=reader.integer(verify, "top", "verify."),
        ),
        benchmark_timeout_s=_read_timeout(reader, data),
        threshold=reader.number(data, "threshold") if "threshold" in data else 1.02,
        real_input_decides=_read_flag(reader, data, "real_input_decides"),
        real_input_rounds=reader.integer(data, "real_input_rounds", minimum=1)
        if "real_input_rounds" in data
        else 7,
        global_flags=_read_global_flags(reader, data),
        references_deferred=_read_flag(reader, data, "references_deferred"),
    )


def _check_input_sizes(reader: _Reader, shapes: list[list[int]], types: tuple[str, ...]) -> None:
    """Refuse shapes that disagree with the types, or whose inputs would not fit in memory."""
    if len(shapes) != len(types):
        raise reader.fail(
            "verify.input_shapes", f"names {len(shapes)} inputs but input_types {len(types)}"
        )
    if len(shapes) > MAX_INPUTS or any(len(shape) > MAX_RANK for shape in shapes):
        raise reader.fail(
            "verify.input_shapes", f"must hold at most {MAX_INPUTS} shapes of rank {MAX_RANK}"
        )
    elements = sum(math.prod(shape) for shape in shapes)
    if elements > MAX_INPUT_ELEMENTS:
        raise reader.fail(
            "verify.input_shapes",
            f"asks for {elements} input elements, more than the {MAX_INPUT_ELEMENTS} allowed",
        )


# A global flag in a folder is passed to iree-compile by `finish`: only plain option settings
# are accepted, never one that names a file to read or write.
_SAFE_GLOBAL_FLAG = re.compile(r"--iree-[a-z0-9-]+(=[A-Za-z0-9_.,:+-]*)?")
_FILE_FLAG_WORDS = ("dump", "path", "file", "library", "-to", "output")


def _read_global_flags(reader: _Reader, data: dict[str, Any]) -> tuple[str, ...]:
    """Read the global flags the candidates were compiled with (none in older folders)."""
    if "global_flags" not in data:
        return ()
    flags = reader.texts(data, "global_flags")
    for flag in flags:
        name = flag.split("=", 1)[0]
        if not _SAFE_GLOBAL_FLAG.fullmatch(flag) or any(w in name for w in _FILE_FLAG_WORDS):
            raise reader.fail("global_flags", f"not a plain compiler option setting: {flag!r}")
    return flags


def _read_flag(reader: _Reader, data: dict[str, Any], name: str) -> bool:
    """Read an optional true/false field (false in folders written before it existed)."""
    value = data.get(name, False)
    if not isinstance(value, bool):
        raise reader.fail(name, f"must be true or false, got {value!r}")
    return value


def _read_timeout(reader: _Reader, data: dict[str, Any]) -> float:
    """Read `benchmark_timeout_s` (more than 0 seconds); a folder written before it had 10 s."""
    if "benchmark_timeout_s" not in data:
        return 10.0
    value = reader.number(data, "benchmark_timeout_s")
    if value <= 0:
        raise reader.fail("benchmark_timeout_s", f"must be more than 0, got {value}")
    return value


def read_references(run_dir: Path, manifest: Manifest) -> dict[int, tuple[str, str]]:
    """Return id -> (reference binary, its hash) from the manifest and, when the manifest
    deferred them, from REFERENCES_NAME (read as untrusted: every path stays in the folder)."""
    found = {
        c.candidate_id: (c.reference_vmfb, c.reference_hash)
        for c in (manifest.baseline, *manifest.candidates)
        if c.reference_vmfb
    }
    path = run_dir / REFERENCES_NAME
    if not manifest.references_deferred or not path.exists():
        return found
    data = read_json_file(path, max_bytes=MAX_MANIFEST_BYTES)
    reader = _Reader(run_dir, path)
    listed = reader.field(data, "references", "")
    if not isinstance(listed, list):
        raise reader.fail("references", "must be a list")
    for index, entry in enumerate(listed):
        where = f"references[{index}]."
        if not isinstance(entry, dict):
            raise reader.fail(f"references[{index}]", "must be an object")
        candidate_id = reader.integer(entry, "candidate_id", where)
        vmfb = reader.inside_path(entry, "vmfb", where, optional=True)
        found[candidate_id] = (vmfb, reader.text(entry, "hash", where))
    return found
