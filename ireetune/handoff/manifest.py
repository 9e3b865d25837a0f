"""The benchmark folder's manifest: everything needed to measure and verify it, as JSON.

Runtime-only: read on machines with only `iree-base-runtime` and `numpy`. Paths are relative to
the run folder, so the folder can be copied anywhere.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

MANIFEST_NAME = "handoff.json"
RESULTS_NAME = "benchmark_results.json"
FORMAT = "ireetune-benchmark-folder/1"


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
    # Global iree-compile flags every candidate was compiled with (`--flags`, a flag winner).
    global_flags: tuple[str, ...] = ()


def write_manifest(run_dir: Path, manifest: Manifest) -> Path:
    """Write the manifest into the run folder; return its path."""
    path = run_dir / MANIFEST_NAME
    payload = {"format": FORMAT, **asdict(manifest)}
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def read_manifest(run_dir: Path) -> Manifest:
    """Read a run folder's manifest; raise ValueError for a folder that is not one."""
    path = run_dir / MANIFEST_NAME
    if not path.exists():
        raise ValueError(
            f"{run_dir} has no {MANIFEST_NAME}; compile it with `tune-dispatch --stop-after compile`"
        )
    data = json.loads(path.read_text())
    if data.get("format") != FORMAT:
        raise ValueError(f"{path} is not a {FORMAT} manifest")
    return Manifest(
        problem=data["problem"],
        target=data["target"],
        devices=tuple(data["devices"]),
        repetitions=int(data["repetitions"]),
        min_repetition_s=float(data["min_repetition_s"]),
        hopeless_factor=float(data["hopeless_factor"]),
        confirm_top=int(data["confirm_top"]),
        confirm_rounds=int(data["confirm_rounds"]),
        baseline=FolderCandidate(**data["baseline"]),
        candidates=tuple(FolderCandidate(**c) for c in data["candidates"]),
        verify=VerifySettings(
            seed=int(data["verify"]["seed"]),
            input_shapes=tuple(
                tuple(int(d) for d in shape) for shape in data["verify"]["input_shapes"]
            ),
            input_types=tuple(data["verify"]["input_types"]),
            output_type=data["verify"]["output_type"],
            reduction_size=int(data["verify"]["reduction_size"]),
            top=int(data["verify"]["top"]),
        ),
        threshold=float(data.get("threshold", 1.02)),
        real_input_decides=bool(data.get("real_input_decides", False)),
        real_input_rounds=int(data.get("real_input_rounds", 7)),
        global_flags=tuple(data.get("global_flags", ())),
    )
