"""A model's tuning result (global flags plus spec) in the tuning database, in its own table.

One row per (compiler version, target, device, model): the model is named by the SHA-256 of the
MLIR that was tuned. The row keeps the winning flags, the flag phase's interval and rule, the
tuned spec's text, and the combined speedup over the default. The table lives in the same SQLite
file as the per-dispatch results (`database/store.py`); the file's schema, this table's
included, is created, checked and upgraded in one place (`database/schema.py`). `ireetune tune`
writes the row; nothing in the tuner reads it back yet.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from ireetune.database.schema import open_database, transaction
from ireetune.database.store import now_utc


@dataclass(frozen=True)
class ModelKey:
    """Which model, compiled by which compiler for which target, ran on which device."""

    compiler_version: str
    target: str
    device: str
    model_sha256: str


@dataclass(frozen=True)
class ModelResult:
    """What tuning a model produced: the flags and spec to apply and what they were worth."""

    model_name: str
    flags: tuple[str, ...]
    flag_speedup: float | None
    flag_low: float | None
    flag_high: float | None
    rule: str
    spec: str
    combined_speedup: float | None
    combined_low: float | None
    combined_high: float | None
    run_dir: str
    written_at: str = ""


def hash_model(mlir_path: Path) -> str:
    """Name a model by the SHA-256 of its MLIR text."""
    return hashlib.sha256(mlir_path.read_bytes()).hexdigest()


def record_model_result(database_path: Path, key: ModelKey, result: ModelResult) -> None:
    """Write (or replace) the model's row."""
    written_at = now_utc()
    connection = open_database(database_path)
    try:
        with transaction(connection):
            connection.execute(
                "INSERT OR REPLACE INTO model_results VALUES "
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    key.compiler_version, key.target, key.device, key.model_sha256,
                    result.model_name, json.dumps(list(result.flags)), result.flag_speedup,
                    result.flag_low, result.flag_high, result.rule, result.spec,
                    result.combined_speedup, result.combined_low, result.combined_high,
                    result.run_dir, written_at,
                ),
            )  # fmt: skip
    finally:
        connection.close()
