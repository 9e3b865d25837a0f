"""Export results (CSV, JSON, a linked tuning spec) and import them from JSON or another database."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from iree.compiler import ir

from ireetune.database.store import ResultKey, StoredResult, TuningDatabase
from ireetune.errors import IreetuneError
from ireetune.problem.contraction import ContractionProblem
from ireetune.spec.builder import MatcherEntry, build_spec, render_spec

CSV_FIELDS = (
    "signature",
    "target",
    "device",
    "compiler_version",
    "status",
    "speedup",
    "median_ms",
    "baseline_ms",
    "spread",
    "config",
    "reason",
    "written_at",
)


def problem_from_key(text: str) -> ContractionProblem:
    """Rebuild a problem record from its canonical JSON key."""
    try:
        values = json.loads(text)
        fields: dict[str, Any] = {
            k: tuple(v) if isinstance(v, list) else v for k, v in values.items()
        }
        return ContractionProblem(**fields)
    except (ValueError, TypeError) as error:
        raise IreetuneError(f"stored problem cannot be read back: {error}") from error


def render_results_csv(results: Sequence[StoredResult]) -> str:
    """Write results as CSV, one row per stored result."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for result in results:
        writer.writerow(
            {
                "signature": result.key.signature,
                "target": result.key.target,
                "device": result.key.device,
                "compiler_version": result.key.compiler_version,
                "status": result.status,
                "speedup": "" if result.speedup is None else f"{result.speedup:.4f}",
                "median_ms": "" if result.median_ms is None else f"{result.median_ms:.6g}",
                "baseline_ms": "" if result.baseline_ms is None else f"{result.baseline_ms:.6g}",
                "spread": "" if result.spread is None else f"{result.spread:.3f}",
                "config": result.config,
                "reason": result.reason,
                "written_at": result.written_at,
            }
        )
    return buffer.getvalue()


def render_linked_spec(results: Sequence[StoredResult]) -> str:
    """Build one tuning spec with a matcher for the best verified config of each problem."""
    if not results:
        raise IreetuneError("no verified result to export")
    targets = {r.key.target for r in results}
    if len(targets) > 1:
        raise IreetuneError(
            f"results for several targets ({', '.join(sorted(targets))}); choose one with --target"
        )
    context = ir.Context()
    entries = [MatcherEntry(problem_from_key(r.key.problem), r.compilation_info) for r in results]
    try:
        return render_spec(build_spec(entries, context))
    except ir.MLIRError as error:
        raise IreetuneError(
            f"a stored configuration does not parse: {str(error).splitlines()[0]}"
        ) from error


def results_to_json(results: Sequence[StoredResult]) -> str:
    """Serialise results to JSON (the format `db import` reads)."""
    payload = [{**asdict(r), "times_ms": list(r.times_ms)} for r in results]
    return json.dumps({"ireetune_results": payload}, indent=1) + "\n"


def _result_from_json(item: dict[str, Any]) -> StoredResult:
    key = ResultKey(**item["key"])
    values = {k: v for k, v in item.items() if k != "key"}
    values["times_ms"] = tuple(float(t) for t in values["times_ms"])
    return StoredResult(key=key, **values)


def read_results_file(path: Path) -> list[StoredResult]:
    """Read results from a JSON export or another ireetune database file."""
    if not path.is_file():
        raise IreetuneError(f"file not found: {path}")
    with path.open("rb") as handle:
        is_sqlite = handle.read(16) == b"SQLite format 3\x00"
    if is_sqlite:
        try:
            with TuningDatabase(path) as other:
                return list(other.all_results())
        except sqlite3.Error as error:
            raise IreetuneError(f"cannot read {path}: {error}") from error
    try:
        payload = json.loads(path.read_text())
        return [_result_from_json(item) for item in payload["ireetune_results"]]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as error:
        raise IreetuneError(
            f"{path} is neither an ireetune database nor a results JSON export ({error})"
        ) from error
