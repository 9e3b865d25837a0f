"""Check results that come from outside (a JSON export, another database file) before storing.

Every field's type and range is checked, and the configuration and problem are parsed the way the
tuner will use them. The first bad field refuses the whole input with one line that names its row:

    results.json: row 3: speedup must be a finite number >= 0 or null, got 'fast'

A valid row is marked with where it came from (`origin`), so its verdict is never taken for one
reached here: the store offers imported rows as candidates to measure again, nothing more.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Mapping, Sequence

from iree.compiler import ir
from iree.compiler.dialects import iree_codegen

from ireetune.database.store import (
    VERDICTS,
    WRITTEN_STATUSES,
    ResultKey,
    StoredResult,
    config_key,
    parse_config_key,
    problem_key,
)
from ireetune.errors import IreetuneError
from ireetune.problem.root_op import Problem, problem_from_fields

BASES = frozenset({"", "dispatch", "real-input", "model"})
KEY_FIELDS = ("compiler_version", "target", "device", "problem", "signature")
TEXT_FIELDS = ("reason", "session", "written_at")
# Fields that schema 1 lacked: an older export may leave them out.
OPTIONAL_DEFAULTS: dict[str, object] = {
    "speedup_low": None,
    "speedup_high": None,
    "basis": "",
    "confirmed": False,
    "rounds_ms": [],
    "outputs_match": None,
    "real_input_speedup": None,
    "real_input_low": None,
    "real_input_high": None,
    "verdict": "",
    "rule": "",
    "origin": "",
}
NUMBER_FIELDS = (
    "median_ms",
    "min_ms",
    "max_ms",
    "spread",
    "baseline_ms",
    "speedup",
    "speedup_low",
    "speedup_high",
    "real_input_speedup",
    "real_input_low",
    "real_input_high",
)
REQUIRED_FIELDS = (
    *KEY_FIELDS,
    "config",
    "compilation_info",
    "status",
    *TEXT_FIELDS,
    "times_ms",
    *(name for name in NUMBER_FIELDS if name not in OPTIONAL_DEFAULTS),
)
ALL_FIELDS = frozenset((*REQUIRED_FIELDS, *OPTIONAL_DEFAULTS))


class _BadField(Exception):
    """One field's problem; the caller adds the row's place."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(problem)
        self.field = field
        self.problem = problem


def _shown(value: object) -> str:
    """Quote a bad value briefly and on one line."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _text(values: Mapping[str, object], name: str, non_empty: bool = False) -> str:
    value = values[name]
    if not isinstance(value, str) or (non_empty and not value):
        kind = "non-empty text" if non_empty else "text"
        raise _BadField(name, f"{name} must be {kind}, got {_shown(value)}")
    return value


def _is_number(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        number = float(value)
    except OverflowError:  # An integer too large for a float (JSON allows any length).
        return False
    return math.isfinite(number) and number >= 0


def _number(values: Mapping[str, object], name: str) -> float | None:
    value = values[name]
    if value is None:
        return None
    if not _is_number(value):
        raise _BadField(name, f"{name} must be a finite number >= 0 or null, got {_shown(value)}")
    assert isinstance(value, int | float)
    return float(value)


def _times(values: Mapping[str, object]) -> tuple[float, ...]:
    value = values["times_ms"]
    if not isinstance(value, list) or not all(_is_number(t) for t in value):
        raise _BadField(
            "times_ms",
            f"times_ms must be a list of finite numbers >= 0, got {_shown(value)}",
        )
    return tuple(float(t) for t in value)


def _config(values: Mapping[str, object]) -> str:
    text = _text(values, "config")
    try:
        knobs = json.loads(text)
    except (ValueError, RecursionError):
        raise _BadField("config", f"config is not JSON: {_shown(text)}") from None
    valid = knobs is None or (
        isinstance(knobs, dict)
        and all(
            isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool))
            for v in knobs.values()
        )
    )
    if not valid:
        raise _BadField(
            "config",
            f"config must be a JSON object of integer or text knobs, or null, got {_shown(text)}",
        )
    if config_key(parse_config_key(text)) != text:
        raise _BadField(
            "config", f"config is not in canonical form (sorted keys), got {_shown(text)}"
        )
    return text


def _first_diagnostic(error: ir.MLIRError) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[1] if len(lines) > 1 else lines[0] if lines else "parse error"


def _compilation_info(values: Mapping[str, object], context: ir.Context) -> str:
    text = _text(values, "compilation_info")
    if not text:
        return text
    try:
        with context:
            attribute = ir.Attribute.parse(text)
    except ir.MLIRError as error:
        raise _BadField(
            "compilation_info",
            f"compilation_info does not parse: {_first_diagnostic(error)}",
        ) from None
    if not iree_codegen.CompilationInfoAttr.isinstance(attribute):
        raise _BadField(
            "compilation_info",
            f"compilation_info must be an #iree_codegen.compilation_info, got {_shown(text)}",
        )
    return text


def read_problem_key(text: str, context: ir.Context) -> Problem:
    """Read a stored problem key back into its record, checking that its indexing maps parse
    and that it is the canonical key of that record (so it matches what a run stores)."""
    try:
        fields = json.loads(text)
    except (ValueError, RecursionError):
        raise IreetuneError("the problem is not JSON") from None
    if not isinstance(fields, dict):
        raise IreetuneError("the problem is not a JSON object")
    problem = problem_from_fields(fields)
    for map_text in problem.indexing_maps:
        try:
            with context:
                ir.AffineMapAttr(ir.Attribute.parse(f"affine_map<{map_text}>"))
        except (ir.MLIRError, ValueError):
            raise IreetuneError(f"the indexing map '{map_text:.40}' does not parse") from None
    if problem_key(problem) != text:
        raise IreetuneError("the problem is not in canonical form")
    return problem


def _problem(values: Mapping[str, object], context: ir.Context) -> str:
    text = _text(values, "problem", non_empty=True)
    try:
        read_problem_key(text, context)
    except IreetuneError as error:
        raise _BadField("problem", f"problem cannot be read: {error}") from None
    return text


def _outputs_match(values: Mapping[str, object]) -> bool | None:
    value = values["outputs_match"]
    if value is not None and not isinstance(value, bool):
        raise _BadField(
            "outputs_match", f"outputs_match must be true, false or null, got {_shown(value)}"
        )
    return value


def _choice(values: Mapping[str, object], name: str, choices: frozenset[str]) -> str:
    value = values[name]
    if not isinstance(value, str) or value not in choices:
        known = ", ".join(repr(c) for c in sorted(choices))
        raise _BadField(name, f"{name} must be one of {known}, got {_shown(value)}")
    return value


def validate_row(values: Mapping[str, object], origin: str, context: ir.Context) -> StoredResult:
    """Check one row's fields (flat: the key's parts beside the others) and build its record,
    marked with `origin`. Raise _BadField for the first bad field."""
    unknown = sorted(set(values) - ALL_FIELDS)
    if unknown:
        raise _BadField(unknown[0], f"unknown field '{unknown[0]}'")
    for name in REQUIRED_FIELDS:
        if name not in values:
            raise _BadField(name, f"{name} is missing")
        if values[name] is None and name not in NUMBER_FIELDS:
            raise _BadField(name, f"{name} must not be null")
    values = {**OPTIONAL_DEFAULTS, **values}
    for name in KEY_FIELDS:
        _text(values, name, non_empty=True)
    _text(values, "rule")
    _text(values, "origin")
    if values["confirmed"] not in (True, False) or not isinstance(values["confirmed"], bool | int):
        raise _BadField(
            "confirmed", f"confirmed must be true or false, got {_shown(values['confirmed'])}"
        )
    rounds = values["rounds_ms"]
    if isinstance(rounds, str):
        with contextlib.suppress(ValueError):
            rounds = json.loads(rounds)
    if not isinstance(rounds, list | tuple):
        raise _BadField(
            "rounds_ms", f"rounds_ms must be a list of lists of numbers, got {_shown(rounds)}"
        )
    try:
        parsed_rounds = tuple(_times({"times_ms": r}) for r in rounds)
    except _BadField:
        raise _BadField(
            "rounds_ms", f"rounds_ms must be a list of lists of numbers, got {_shown(rounds)}"
        ) from None
    return StoredResult(
        key=ResultKey(
            _text(values, "compiler_version"),
            _text(values, "target"),
            _text(values, "device"),
            _problem(values, context),
            _text(values, "signature"),
        ),
        config=_config(values),
        compilation_info=_compilation_info(values, context),
        status=_choice(values, "status", WRITTEN_STATUSES),
        reason=_text(values, "reason"),
        times_ms=_times(values),
        median_ms=_number(values, "median_ms"),
        min_ms=_number(values, "min_ms"),
        max_ms=_number(values, "max_ms"),
        spread=_number(values, "spread"),
        baseline_ms=_number(values, "baseline_ms"),
        speedup=_number(values, "speedup"),
        session=_text(values, "session"),
        written_at=_text(values, "written_at"),
        speedup_low=_number(values, "speedup_low"),
        speedup_high=_number(values, "speedup_high"),
        basis=_choice(values, "basis", BASES),
        confirmed=bool(values["confirmed"]),
        rounds_ms=parsed_rounds,
        outputs_match=_outputs_match(values),
        real_input_speedup=_number(values, "real_input_speedup"),
        real_input_low=_number(values, "real_input_low"),
        real_input_high=_number(values, "real_input_high"),
        verdict=_choice(values, "verdict", VERDICTS),
        rule=_text(values, "rule"),
        origin=origin,
    )


def _flatten_key(row: Mapping[str, object]) -> dict[str, object]:
    """Put the parts of a JSON row's `key` object beside its other fields."""
    key = row.get("key")
    if not isinstance(key, Mapping):
        raise _BadField("key", f"key must be an object, got {_shown(key)}")
    outside = [name for name in row if name in KEY_FIELDS]
    if outside:
        raise _BadField(outside[0], f"unknown field '{outside[0]}' (it belongs in key)")
    unknown = sorted(set(key) - set(KEY_FIELDS))
    if unknown:
        raise _BadField(f"key.{unknown[0]}", f"unknown field 'key.{unknown[0]}'")
    return {**{name: value for name, value in row.items() if name != "key"}, **key}


def validate_rows(
    rows: Sequence[object], source_name: str, origin: str, nested_key: bool = False
) -> list[StoredResult]:
    """Validate every row, or refuse them all with one line naming the first bad row and field.

    Each row maps field names to values, with the key's parts beside the others, or, with
    `nested_key`, in a `key` object (the JSON export's form).
    """
    context = ir.Context()
    results = []
    for index, row in enumerate(rows):
        try:
            if not isinstance(row, Mapping):
                raise _BadField("", f"a row must be an object, got {_shown(row)}")
            flat = _flatten_key(row) if nested_key else row
            results.append(validate_row(flat, origin, context))
        except _BadField as bad:
            raise IreetuneError(f"{source_name}: row {index}: {bad.problem}") from None
    return results
