"""Write recorded spaces (the format `ireetune/search/recorded.py` reads): from a tuning run
folder's results, and as the gzipped JSON file of data/spaces/; choose the leaders that
bench/remeasure_spaces.py times again. Used by bench/record_spaces.py, bench/remeasure_spaces.py
and the tests.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from ireetune.core.candidate import Knobs
from ireetune.core.errors import IreetuneError
from ireetune.core.records import TIMED_STATUSES
from ireetune.database.run_files import (
    CandidateRecordFile,
    DispatchRunFile,
    read_json_object,
    validate_document,
)
from ireetune.search.recorded import (
    COLUMNS,
    FORMAT_NAME,
    FORMAT_VERSION,
    RecordedRow,
    RecordedSpace,
    finite_number,
)

# How many hex digits of a candidate's binary hash its row keeps.
BINARY_DIGITS = 16


def baseline_time(space: RecordedSpace, use_remeasured: bool = True) -> float | None:
    """Return the default's time on the same basis as `RecordedSpace.effective_times`."""
    if space.baseline is None:
        return None
    if use_remeasured and space.baseline.binary in space.remeasured:
        return space.remeasured_times().get(space.baseline.binary)
    return space.baseline.min_ms


def select_leaders(space: RecordedSpace, top: int, near: float, most: int) -> list[str]:
    """Return the binaries of a space to re-measure, by their first pass, fastest first: the
    `top` fastest distinct binaries and every other one within `near` of the fastest (a
    fraction), at most `most` of them, then the default's binary.

    So that no binary left out could be near the best after the re-measurement, `top` and `near`
    should reach well past the first pass's noise at the top of the sample.
    """
    first_pass: dict[str, float] = {}
    for row, time_ms in zip(space.rows, space.effective_times(use_remeasured=False), strict=True):
        if row.binary and time_ms is not None:
            first_pass[row.binary] = min(time_ms, first_pass.get(row.binary, time_ms))
    ranked = sorted(first_pass, key=lambda binary: (first_pass[binary], binary))
    if not ranked:
        return []
    best = first_pass[ranked[0]]
    chosen = [b for i, b in enumerate(ranked) if i < top or first_pass[b] <= best * (1 + near)]
    chosen = chosen[:most]
    if space.baseline is not None and space.baseline.binary and space.baseline.binary not in chosen:
        chosen.append(space.baseline.binary)
    return chosen


def _row_from_result(candidate: CandidateRecordFile, knobs: Knobs) -> RecordedRow:
    measured = candidate.status in TIMED_STATUSES
    return RecordedRow(
        knobs=knobs,
        status=candidate.status.value,
        min_ms=finite_number(candidate.min_ms) if measured else None,
        median_ms=finite_number(candidate.median_ms) if measured else None,
        speedup=finite_number(candidate.speedup) if measured else None,
        confirmed=candidate.confirmed if measured else False,
        binary=candidate.binary_hash[:BINARY_DIGITS],
    )


def read_run_folder_rows(
    run_dir: Path,
) -> tuple[RecordedRow | None, tuple[RecordedRow, ...], dict[str, object]]:
    """Read every candidate's knobs, status and first-pass time from a run folder's results.json.

    Returns the default (candidate 0, None when its config has no knobs), the candidates in the
    order they were generated, and the run's information. The first-pass time is the one every
    candidate got in the same conditions; confirmation rounds, which only leaders get, are not
    used.
    """
    results_path = run_dir / "results.json"
    if not results_path.is_file():
        raise IreetuneError(f"{run_dir} has no results.json; is it a tuning run folder?")
    data = read_json_object(results_path)
    # Checked against the model every reader of results.json uses (paths inside the folder).
    checked = validate_document(results_path, DispatchRunFile, data, run_dir)
    baseline = None
    rows = []
    for index, candidate in sorted(enumerate(checked.candidates), key=lambda c: c[1].candidate_id):
        if candidate.candidate_id == 0:
            if candidate.knobs is not None:
                baseline = _row_from_result(candidate, candidate.knobs)
        elif candidate.knobs is None:
            raise IreetuneError(f"{results_path}: candidates[{index}].knobs must be an object")
        else:
            rows.append(_row_from_result(candidate, candidate.knobs))
    info = {key: value for key, value in data.items() if key != "candidates"}
    return baseline, tuple(rows), info


def _encode_row(row: RecordedRow, knob_names: Sequence[str]) -> list[object]:
    values = dict(row.knobs)
    knob_values = [values[name] for name in knob_names]
    return [
        knob_values, row.status, row.min_ms, row.median_ms, row.speedup, row.confirmed, row.binary
    ]  # fmt: skip


def encode_recorded_space(space: RecordedSpace) -> dict[str, object]:
    """Return the JSON form of a recorded space; the first row of a run is its baseline."""
    knob_names = space.knob_names or tuple(name for name, _ in space.rows[0].knobs)
    return {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "name": space.name,
        "target": space.target,
        "target_name": space.target_name,
        "device": space.device,
        "problem": asdict(space.problem),
        "facts": dict(space.facts),
        "provenance": dict(space.provenance),
        "knob_names": list(knob_names),
        "baseline": None
        if space.baseline is None
        else dict(zip(COLUMNS, _encode_row(space.baseline, knob_names), strict=True)),
        "columns": list(COLUMNS),
        "rows": [_encode_row(row, knob_names) for row in space.rows],
        "remeasured": {binary: list(rounds) for binary, rounds in sorted(space.remeasured.items())},
    }


def write_recorded_space(space: RecordedSpace, folder: Path) -> Path:
    """Write `<folder>/<name>.json.gz` reproducibly (no time stamp in the gzip header)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{space.name}.json.gz"
    text = json.dumps(encode_recorded_space(space), separators=(",", ":"), sort_keys=True)
    path.write_bytes(gzip.compress(text.encode(), compresslevel=9, mtime=0))
    return path
