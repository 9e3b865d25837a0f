"""Export results (CSV, JSON) and import them from JSON or another database.

The linked tuning spec of the best results is built one layer up, in `spec/export.py`.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

from iree.compiler import ir

from ireetune.core.errors import IreetuneError
from ireetune.core.records import place_checks_after
from ireetune.database.store import (
    IMPORTED_ORIGIN,
    StoredResult,
    now_utc,
    read_database_rows,
)
from ireetune.database.validate import read_problem_key, validate_rows
from ireetune.problem.root_op import Problem


def _number(value: float | None, spec: str) -> str:
    return "" if value is None else format(value, spec)


# Each CSV column, in order, and how a stored result fills it.
_CSV_CELLS: tuple[tuple[str, Callable[[StoredResult], str]], ...] = (
    ("signature", lambda result: result.key.signature),
    ("target", lambda result: result.key.target),
    ("device", lambda result: result.key.device),
    ("compiler_version", lambda result: result.key.compiler_version),
    ("status", lambda result: result.status),
    ("speedup", lambda result: _number(result.speedup, ".4f")),
    ("median_ms", lambda result: _number(result.median_ms, ".6g")),
    ("baseline_ms", lambda result: _number(result.baseline_ms, ".6g")),
    ("spread", lambda result: _number(result.spread, ".3f")),
    ("config", lambda result: result.config),
    ("reason", lambda result: result.reason),
    ("written_at", lambda result: result.written_at),
)


def problem_from_key(text: str) -> Problem:
    """Rebuild a problem record (of its op family) from its canonical JSON key."""
    try:
        return read_problem_key(text, ir.Context())
    except IreetuneError as error:
        raise IreetuneError(f"stored problem cannot be read back: {error}") from error


def render_results_csv(results: Sequence[StoredResult]) -> str:
    """Write results as CSV, one row per stored result."""
    buffer = io.StringIO()
    writer = csv.DictWriter(
        buffer, fieldnames=[name for name, _ in _CSV_CELLS], lineterminator="\n"
    )
    writer.writeheader()
    for result in results:
        writer.writerow({name: cell(result) for name, cell in _CSV_CELLS})
    return buffer.getvalue()


def results_to_json(results: Sequence[StoredResult]) -> str:
    """Serialise results to JSON (the format `db import` reads)."""
    payload = [
        {**place_checks_after(asdict(r), "written_at"), "times_ms": list(r.times_ms)}
        for r in results
    ]
    return json.dumps({"ireetune_results": payload}, indent=1) + "\n"


def _read_json_rows(path: Path) -> list[object]:
    try:
        payload = json.loads(path.read_bytes())
    except (ValueError, RecursionError) as error:
        raise IreetuneError(
            f"{path} is neither an ireetune database nor a results JSON export ({error})"
        ) from error
    rows = payload.get("ireetune_results") if isinstance(payload, dict) else None
    if not isinstance(rows, list):
        raise IreetuneError(
            f"{path} is neither an ireetune database nor a results JSON export "
            "(no 'ireetune_results' list)"
        )
    return rows


def _from_database_row(row: dict[str, object]) -> dict[str, object]:
    """Turn a stored row's SQL values into the JSON export's: timings as a list, the outputs
    check as a boolean. A value that does not convert is left for validation to name."""
    values = dict(row)
    times = values.get("times_ms")
    if isinstance(times, str):
        with contextlib.suppress(ValueError, RecursionError):
            values["times_ms"] = json.loads(times)
    if values.get("outputs_match") in (0, 1) and not isinstance(values["outputs_match"], float):
        values["outputs_match"] = bool(values["outputs_match"])
    return values


def read_results_file(path: Path, imported_at: str | None = None) -> list[StoredResult]:
    """Read and check results from a JSON export or another ireetune database file.

    Every row is validated; the first bad one refuses the whole file. A database file is read
    through a read-only connection and never changed. Each row's origin becomes
    `imported:<file name>@<time>`: an imported verdict is a candidate to measure again here.
    """
    if not path.is_file():
        raise IreetuneError(f"file not found: {path}")
    with path.open("rb") as handle:
        is_sqlite = handle.read(16) == b"SQLite format 3\x00"
    origin = f"{IMPORTED_ORIGIN}:{path.name}@{imported_at or now_utc()}"
    if is_sqlite:
        rows = [_from_database_row(row) for row in read_database_rows(path)]
        return validate_rows(rows, path.name, origin)
    return validate_rows(_read_json_rows(path), path.name, origin, nested_key=True)
