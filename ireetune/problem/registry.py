"""The registry of op families: generic code finds a problem's family here, never by class.

Families are tried in order to parse a root op; a stored problem (a database key) is read back
into the record whose `kind` field it names, or, for the families whose keys predate that field
(contraction, convolution), into the record whose fields it has.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import fields

from iree.compiler import ir

from ireetune.core.errors import IreetuneError
from ireetune.problem.attention import AttentionFamily, AttentionProblem
from ireetune.problem.batch_contraction import BATCH_CONTRACTION_FAMILY
from ireetune.problem.buffer_copy import BufferCopyFamily, BufferCopyProblem
from ireetune.problem.contraction import CONTRACTION_FAMILY, ContractionProblem
from ireetune.problem.convolution import CONVOLUTION_FAMILY, ConvolutionProblem
from ireetune.problem.elementwise import ElementwiseFamily, ElementwiseProblem
from ireetune.problem.family import MatchPattern, OpFamily, Problem
from ireetune.problem.inner_tiled import InnerTiledFamily, InnerTiledProblem
from ireetune.problem.op_kind import name_root_op
from ireetune.problem.pack import PackFamily, PackProblem, UnpackFamily, UnpackProblem
from ireetune.problem.reduction import ReductionFamily, ReductionProblem

# In parsing order: the first family that recognises a root op parses it.
FAMILIES: tuple[OpFamily, ...] = (
    BATCH_CONTRACTION_FAMILY,
    CONTRACTION_FAMILY,
    CONVOLUTION_FAMILY,
    AttentionFamily(),
    ReductionFamily(),
    # Before the element-wise family, which refuses other generics on buffers.
    BufferCopyFamily(),
    ElementwiseFamily(),
    # After the element-wise family, so that a pattern's claim is asked of it first.
    PackFamily(),
    UnpackFamily(),
    InnerTiledFamily(),
)
_BY_NAME = {family.name: family for family in FAMILIES}
# Records whose database key is exactly their fields (written before keys named a kind).
_RECORDS_WITHOUT_KIND: tuple[type, ...] = (ContractionProblem, ConvolutionProblem)
# Records whose key has a `kind` field, by that kind.
_RECORDS_BY_KIND: dict[str, type] = {
    record.KIND: record
    for record in (
        AttentionProblem,
        ReductionProblem,
        ElementwiseProblem,
        PackProblem,
        UnpackProblem,
        BufferCopyProblem,
        InnerTiledProblem,
    )
}


def family_names() -> tuple[str, ...]:
    """Name every family, in parsing order."""
    return tuple(_BY_NAME)


def family_of(problem: Problem) -> OpFamily:
    """Return the family that owns a problem."""
    assert problem.family in _BY_NAME, f"unknown op family {problem.family}"
    return _BY_NAME[problem.family]


def family_of_pattern(pattern: MatchPattern) -> OpFamily | None:
    """Return the family a pattern belongs to (of those sharing its match op, the one that
    claims it; for contractions the plain family, whose batch family shares its match op), or
    None."""
    for family in reversed(FAMILIES):
        if family.match_op.name == pattern.match_op and family.claims(pattern):
            return family
    return None


def read_match_pattern(match_op: ir.Operation, body: list[ir.Operation]) -> MatchPattern | None:
    """Read a match op into a pattern through the first family of that match op that reads it."""
    for family in FAMILIES:
        if family.match_op.name == match_op.name:
            pattern = family.read_pattern(match_op, body)
            if pattern is not None:
                return pattern
    return None


def read_whole_matcher(body: list[ir.Operation]) -> tuple[MatchPattern, int] | None:
    """Read a matcher body that some family reads whole (its pattern and how many opening ops
    it took), or None."""
    for family in FAMILIES:
        read = family.read_whole_matcher(body)
        if read is not None:
            return read
    return None


# What reading IR of an unexpected form raises in the bindings and in the families' readers: a
# region without a block (`iree_linalg_ext.map_store`), an attribute missing or of another kind.
_UNEXPECTED_IR_ERRORS = (IndexError, KeyError, AttributeError, ValueError, TypeError)


def parse_problem(root_op: ir.Operation) -> Problem:
    """Parse the root op into the record of its op family, or say it is not supported.

    A root op of a form no family expected is not supported either: reading it never raises
    anything but IreetuneError, so that a model's odd dispatch is reported, not fatal.
    """
    try:
        return _parse_problem(root_op)
    except _UNEXPECTED_IR_ERRORS as error:
        raise IreetuneError(
            f"root op '{root_op.name}' is not supported: ireetune cannot read its form "
            f"({type(error).__name__}: {str(error)[:120]})"
        ) from error


def _parse_problem(root_op: ir.Operation) -> Problem:
    for family in FAMILIES:
        if family.recognises(root_op):
            return family.parse(root_op)
    raise IreetuneError(
        f"root op {name_root_op(root_op)} is not supported yet (tunable op families: "
        + ", ".join(family_names())
        + ")"
    )


def problem_from_fields(values: Mapping[str, object]) -> Problem:
    """Rebuild a problem record from its fields (the JSON of a database key), checking each
    field's type: a key with a `kind` names its record; an older key is read into the record
    whose field names are exactly the given ones, so keys written before records named their
    family read back unchanged."""
    names = set(values)
    candidates: tuple[type, ...] = _RECORDS_WITHOUT_KIND
    if "kind" in values:
        record = _RECORDS_BY_KIND.get(str(values["kind"]))
        if record is None:
            raise IreetuneError(f"a problem names an unknown kind {values['kind']!r:.40}")
        candidates = (record,)
    for record in candidates:
        if {field.name for field in fields(record)} != names:
            continue
        hints = typing.get_type_hints(record)
        checked = {name: _check_field(name, hints[name], value) for name, value in values.items()}
        problem: Problem = record(**checked)
        return problem
    raise IreetuneError(
        "a problem has the fields of no known op family: " + ", ".join(sorted(names))
    )


def _check_field(name: str, hint: object, value: object) -> object:
    """Check one stored field against its annotation: str, tuple[int, ...], tuple[str, ...],
    or a tuple of such tuples (the shapes of several operands)."""
    if hint is str:
        if not isinstance(value, str):
            raise IreetuneError(f"problem field '{name}' must be text, got {value!r:.40}")
        return value
    arguments = typing.get_args(hint)
    assert typing.get_origin(hint) is tuple and arguments, f"unexpected annotation {hint}"
    item_type = arguments[0]
    if not isinstance(value, list) or (
        arguments[-1] is not Ellipsis and len(value) != len(arguments)
    ):
        raise IreetuneError(f"problem field '{name}' must be a list, got {value!r:.40}")
    if typing.get_origin(item_type) is tuple:
        return tuple(_check_field(name, item_type, item) for item in value)
    for item in value:
        valid = (
            isinstance(item, int) and not isinstance(item, bool) and item >= 0
            if item_type is int
            else isinstance(item, item_type)
        )
        if not valid:
            raise IreetuneError(f"problem field '{name}' holds {item!r:.40}")
    return tuple(value)
