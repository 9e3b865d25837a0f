"""The benchmark folder's manifest: everything needed to measure and verify it, as JSON.

Runtime-only: read on machines with only `iree-base-runtime` and `numpy`. Paths are relative to
the run folder, so the folder can be copied anywhere.

A manifest is read as untrusted data: every field's type is checked, candidate ids are integers
and every path must stay inside the run folder. (The binaries it names are native code all the
same: run only folders you produced.)
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, ClassVar

from pydantic import AfterValidator, Field, ValidationInfo

from ireetune.core.errors import IreetuneError
from ireetune.core.fields import NonEmpty, NonNegativeFloat, NonNegativeInt, bounded_as
from ireetune.core.options import value_type_of
from ireetune.core.run_dir import is_inside_folder
from ireetune.database.run_files import (
    CandidateId,
    FileModel,
    InsidePath,
    check_inside_run_dir,
    dump_document,
    read_json_file,
    read_model_file,
    read_versioned_file,
)
from ireetune.flows.dispatch.options import TuneOptions

MANIFEST_NAME = "handoff.json"
RESULTS_NAME = "benchmark_results.json"
# The leaders' reference programs, compiled by `continue` when the manifest deferred them.
REFERENCES_NAME = "verify/references.json"
FORMAT = "ireetune-benchmark-folder/1"
# A manifest lists a few thousand candidates at most: some hundred kilobytes.
MAX_MANIFEST_BYTES = 16 * 2**20
# The random inputs are made where they run, from the manifest's shapes: bound what a tampered
# manifest can make us allocate (2**31 elements is 8 GiB of f32, far above any dispatch's inputs).
MAX_INPUT_ELEMENTS = 2**31
MAX_INPUTS = 64
MAX_RANK = 16


def _bounded(name: str) -> AfterValidator:
    """Bound a manifest's number as the tune-dispatch option (or setting) it was written from."""
    return bounded_as(value_type_of(TuneOptions, name))


# The folder's records are handoff.json's declaration too: pydantic checks the file against them
# (read on the benchmarking side as untrusted data, field by field in their order), and the
# file is written from them.


@dataclass(frozen=True)
class FolderCandidate:
    """One binary to time, and the reference program that checks its outputs."""

    candidate_id: CandidateId
    vmfb: Annotated[NonEmpty, AfterValidator(check_inside_run_dir)]
    reference_vmfb: InsidePath
    reference_hash: str


def _bound_inputs(shapes: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, ...], ...]:
    """Bound what a tampered manifest can make the benchmarking side allocate."""
    if len(shapes) > MAX_INPUTS or any(len(shape) > MAX_RANK for shape in shapes):
        raise ValueError(f"must hold at most {MAX_INPUTS} shapes of rank {MAX_RANK}")
    elements = sum(math.prod(shape) for shape in shapes)
    if elements > MAX_INPUT_ELEMENTS:
        raise ValueError(
            f"asks for {elements} input elements, more than the {MAX_INPUT_ELEMENTS} allowed"
        )
    return shapes


def _one_type_per_shape(types: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
    shapes = info.data.get("input_shapes")
    if shapes is not None and len(shapes) != len(types):
        raise ValueError(f"names {len(types)} inputs but input_shapes {len(shapes)}")
    return types


@dataclass(frozen=True)
class VerifySettings:
    """How outputs are checked: the random inputs (made where they run, from a seed: they can be
    hundreds of megabytes), the result type and reduction size, and how many candidates."""

    seed: Annotated[NonNegativeInt, _bounded("seed")]
    input_shapes: Annotated[tuple[tuple[NonNegativeInt, ...], ...], AfterValidator(_bound_inputs)]
    input_types: Annotated[tuple[str, ...], AfterValidator(_one_type_per_shape)]
    output_type: str
    reduction_size: Annotated[int, Field(ge=1)]
    top: Annotated[int, Field(ge=0), _bounded("verify_top")]


# A global flag in a folder is passed to iree-compile by `continue`: here only its form is checked
# (a plain option setting or pass pipeline, never one that names a file); `continue` accepts
# exactly the flag search's flags (flows/handoff/folder_flags.py, which needs the compiler's side
# of the package).
_SAFE_GLOBAL_FLAG = re.compile(r"--iree-[a-z0-9-]+(=[A-Za-z0-9_.,:+()-]*)?")
_FILE_FLAG_WORDS = ("dump", "path", "file", "library", "-to", "output")


def _check_flag_form(flag: str) -> str:
    name = flag.split("=", 1)[0]
    if not _SAFE_GLOBAL_FLAG.fullmatch(flag) or any(word in name for word in _FILE_FLAG_WORDS):
        raise ValueError("not a plain compiler option setting")
    return flag


@dataclass(frozen=True)
class Manifest:
    """handoff.json: everything the benchmarking side needs."""

    problem: str
    target: str
    devices: tuple[str, ...]
    repetitions: Annotated[int, Field(ge=1), _bounded("repetitions")]
    min_repetition_s: Annotated[NonNegativeFloat, _bounded("min_repetition_s")]
    hopeless_factor: Annotated[NonNegativeFloat, _bounded("hopeless_factor")]
    confirm_top: Annotated[int, Field(ge=0), _bounded("confirm_top")]
    confirm_rounds: Annotated[int, Field(ge=0), _bounded("confirm_rounds")]
    baseline: FolderCandidate
    candidates: tuple[FolderCandidate, ...]
    verify: VerifySettings
    # The decision rule's settings (ireetune/decision): the benchmarking side chooses contenders
    # and, where real inputs decide (the CPU), times them there; `continue` reaches the verdict.
    # Older folders lack these and the fields below: the defaults are what those folders meant.
    threshold: Annotated[NonNegativeFloat, _bounded("threshold")] = 1.02
    real_input_decides: bool = False
    real_input_rounds: Annotated[int, Field(ge=1), _bounded("model_level_rounds")] = 7
    # Seconds allowed for loading one candidate (`--benchmark-timeout`); older folders lack it.
    benchmark_timeout_s: Annotated[
        float, Field(gt=0, allow_inf_nan=False), _bounded("min_benchmark_timeout_s")
    ] = 10.0
    # Global iree-compile flags every candidate was compiled with (`--flags`, a flag winner).
    global_flags: tuple[Annotated[str, AfterValidator(_check_flag_form)], ...] = ()
    # No reference program was compiled yet: `continue` compiles the leaders' (REFERENCES_NAME).
    references_deferred: bool = False


def write_manifest(run_dir: Path, manifest: Manifest) -> Path:
    """Write the manifest into the run folder; return its path."""
    path = run_dir / MANIFEST_NAME
    payload = {"format": FORMAT, **asdict(manifest)}
    path.write_text(dump_document(Manifest, payload))
    return path


def hash_manifest(run_dir: Path) -> str:
    """Return the SHA-256 of the folder's manifest file: results name the manifest they measured."""
    return hashlib.sha256((run_dir / MANIFEST_NAME).read_bytes()).hexdigest()


def check_results_match_manifest(run_dir: Path) -> None:
    """Refuse benchmark results that were not measured from this folder's current manifest."""
    results_path = run_dir / RESULTS_NAME
    if not results_path.exists():
        raise IreetuneError(
            f"{run_dir} has no {RESULTS_NAME}; benchmark it first: ireetune measure {run_dir}"
        )
    results = read_json_file(results_path)
    recorded = results.get("manifest_sha256") if isinstance(results, dict) else None
    if recorded is None:
        raise IreetuneError(
            f"{results_path} names no manifest; measure the folder again with "
            f"`ireetune measure {run_dir}`"
        )
    if recorded != hash_manifest(run_dir):
        raise IreetuneError(
            f"{results_path} was measured from another {MANIFEST_NAME}; measure the folder again "
            f"with `ireetune measure {run_dir}`"
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
    manifest = read_versioned_file(path, Manifest, FORMAT, "manifest", run_dir, MAX_MANIFEST_BYTES)
    if manifest.baseline.candidate_id != 0:
        raise ValueError(
            f"{path}: baseline.candidate_id must be 0, got {manifest.baseline.candidate_id}"
        )
    seen: set[int] = set()
    for index, entry in enumerate(manifest.candidates):
        if entry.candidate_id < 1 or entry.candidate_id in seen:
            raise ValueError(
                f"{path}: candidates[{index}].candidate_id must be a new id of at least 1, got "
                f"{entry.candidate_id}"
            )
        seen.add(entry.candidate_id)
    return manifest


class ReferenceFile(FileModel):
    candidate_id: CandidateId
    vmfb: InsidePath
    hash: str


class ReferencesFile(FileModel):
    """verify/references.json: the leaders' reference programs `continue` compiled."""

    FORMAT: ClassVar[str] = "ireetune-references/1"

    references: list[ReferenceFile]


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
    checked = read_model_file(path, ReferencesFile, run_dir, max_bytes=MAX_MANIFEST_BYTES)
    for entry in checked.references:
        found[entry.candidate_id] = (entry.vmfb, entry.hash)
    return found
