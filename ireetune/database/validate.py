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
from collections.abc import Mapping, Sequence
from typing import Annotated

from iree.compiler import ir
from iree.compiler.dialects import iree_codegen
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    ValidationError,
    ValidationInfo,
)

from ireetune.core.errors import IreetuneError
from ireetune.core.fields import NonEmpty, NonNegativeFloat
from ireetune.database.store import (
    VERDICTS,
    WRITTEN_STATUSES,
    ResultKey,
    StoredResult,
    config_key,
    parse_config_key,
    problem_key,
)
from ireetune.problem.root_op import Problem, problem_from_fields

BASES = frozenset({"", "dispatch", "real-input", "model"})
KEY_FIELDS = ("compiler_version", "target", "device", "problem", "signature")
TEXT_FIELDS = ("reason", "session", "written_at")


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


def _check_config(text: str) -> str:
    try:
        knobs = json.loads(text)
    except (ValueError, RecursionError):
        raise ValueError(f"config is not JSON: {_shown(text)}") from None
    valid = knobs is None or (
        isinstance(knobs, dict)
        and all(
            isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool))
            for v in knobs.values()
        )
    )
    if not valid:
        raise ValueError(
            f"config must be a JSON object of integer or text knobs, or null, got {_shown(text)}"
        )
    if config_key(parse_config_key(text)) != text:
        raise ValueError(f"config is not in canonical form (sorted keys), got {_shown(text)}")
    return text


def _first_diagnostic(error: ir.MLIRError) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[1] if len(lines) > 1 else lines[0] if lines else "parse error"


def _mlir_context(info: ValidationInfo) -> ir.Context:
    """The MLIR context `validate_rows` hands every row's validation (one for all rows)."""
    assert info.context is not None
    context: ir.Context = info.context["mlir"]
    return context


def _check_compilation_info(text: str, info: ValidationInfo) -> str:
    if not text:
        return text
    try:
        with _mlir_context(info):
            attribute = ir.Attribute.parse(text)
    except ir.MLIRError as error:
        raise ValueError(f"compilation_info does not parse: {_first_diagnostic(error)}") from None
    if not iree_codegen.CompilationInfoAttr.isinstance(attribute):
        raise ValueError(
            f"compilation_info must be an #iree_codegen.compilation_info, got {_shown(text)}"
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


def _check_problem(text: str, info: ValidationInfo) -> str:
    try:
        read_problem_key(text, _mlir_context(info))
    except IreetuneError as error:
        raise ValueError(f"problem cannot be read: {error}") from None
    return text


def _flag_from_column(value: object) -> object:
    """A database file stores a flag as the integer 0 or 1."""
    return bool(value) if type(value) is int and value in (0, 1) else value


def _rounds_from_column(value: object) -> object:
    """A database file stores the rounds as JSON text."""
    if isinstance(value, str):
        with contextlib.suppress(ValueError, RecursionError):
            return json.loads(value)
    return list(value) if isinstance(value, tuple) else value


def _one_of(choices: frozenset[str]) -> AfterValidator:
    def check(value: str) -> str:
        if value not in choices:
            raise ValueError("not a known value")
        return value

    return AfterValidator(check)


Text = str


class ResultRow(BaseModel):
    """One row of results from outside, its key's parts beside its other fields (the columns of
    the results table). The one definition `db import` checks a JSON export and a database file
    against; each refusal is worded by `_ROW_PHRASES`."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    compiler_version: NonEmpty
    target: NonEmpty
    device: NonEmpty
    problem: Annotated[NonEmpty, AfterValidator(_check_problem)]
    signature: NonEmpty
    config: Annotated[Text, AfterValidator(_check_config)]
    compilation_info: Annotated[Text, AfterValidator(_check_compilation_info)]
    status: Annotated[Text, _one_of(WRITTEN_STATUSES)]
    reason: Text
    session: Text
    written_at: Text
    times_ms: list[NonNegativeFloat]
    median_ms: NonNegativeFloat | None
    min_ms: NonNegativeFloat | None
    max_ms: NonNegativeFloat | None
    spread: NonNegativeFloat | None
    baseline_ms: NonNegativeFloat | None
    speedup: NonNegativeFloat | None
    # Fields that schema 1 lacked: an older export may leave them out.
    speedup_low: NonNegativeFloat | None = None
    speedup_high: NonNegativeFloat | None = None
    basis: Annotated[Text, _one_of(BASES)] = ""
    confirmed: Annotated[bool, BeforeValidator(_flag_from_column)] = False
    rounds_ms: Annotated[list[list[NonNegativeFloat]], BeforeValidator(_rounds_from_column)] = []
    outputs_match: bool | None = None
    real_input_speedup: NonNegativeFloat | None = None
    real_input_low: NonNegativeFloat | None = None
    real_input_high: NonNegativeFloat | None = None
    verdict: Annotated[Text, _one_of(VERDICTS)] = ""
    rule: Text = ""
    origin: Text = ""


_REQUIRED = frozenset(name for name, info in ResultRow.model_fields.items() if info.is_required())
_NUMBERS = frozenset(
    name
    for name, info in ResultRow.model_fields.items()
    if info.annotation == NonNegativeFloat | None
)


def _known(choices: frozenset[str]) -> str:
    return ", ".join(repr(c) for c in sorted(choices))


# What each field must be, in the words of the refusal (the field's name comes first).
_ROW_PHRASES = {
    **{name: "must be non-empty text" for name in KEY_FIELDS},
    **{name: "must be text" for name in ("config", "compilation_info", *TEXT_FIELDS)},
    **{name: "must be text" for name in ("rule", "origin")},
    **{name: "must be a finite number >= 0 or null" for name in _NUMBERS},
    "times_ms": "must be a list of finite numbers >= 0",
    "rounds_ms": "must be a list of lists of numbers",
    "confirmed": "must be true or false",
    "outputs_match": "must be true, false or null",
    "status": f"must be one of {_known(WRITTEN_STATUSES)}",
    "basis": f"must be one of {_known(BASES)}",
    "verdict": f"must be one of {_known(VERDICTS)}",
}


def _describe_row_error(values: Mapping[str, object], error: ValidationError) -> _BadField:
    """Word the first of a row's problems: unknown fields first, then missing ones."""
    errors = error.errors(include_url=False)
    first = next(
        (e for kind in ("extra_forbidden", "missing") for e in errors if e["type"] == kind),
        errors[0],
    )
    name = str(first["loc"][0])
    value = values.get(name)
    if first["type"] == "extra_forbidden":
        return _BadField(name, f"unknown field '{name}'")
    if first["type"] == "missing":
        return _BadField(name, f"{name} is missing")
    if value is None and name in _REQUIRED and name not in _NUMBERS:
        return _BadField(name, f"{name} must not be null")
    if first["type"] == "value_error" and str(first["ctx"]["error"]).startswith(name):
        return _BadField(name, str(first["ctx"]["error"]))
    if name == "rounds_ms":
        value = _rounds_from_column(value)
    return _BadField(name, f"{name} {_ROW_PHRASES[name]}, got {_shown(value)}")


def validate_row(values: Mapping[str, object], origin: str, context: ir.Context) -> StoredResult:
    """Check one row's fields (flat: the key's parts beside the others) and build its record,
    marked with `origin`. Raise _BadField for the first bad field."""
    try:
        row = ResultRow.model_validate(dict(values), context={"mlir": context})
    except ValidationError as error:
        raise _describe_row_error(values, error) from None
    # The row's fields are the record's: the key's parts, then the others (lists as tuples).
    fields = dict(row)
    key = ResultKey(*(fields.pop(name) for name in KEY_FIELDS))
    fields.update(
        times_ms=tuple(row.times_ms),
        rounds_ms=tuple(tuple(r) for r in row.rounds_ms),
        origin=origin,
    )
    return StoredResult(key=key, **fields)


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
