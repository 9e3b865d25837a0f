"""Find a dispatch's root op and hand it to the parser of its op family."""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import fields

from iree.compiler import ir
from iree.compiler.dialects import iree_codegen, linalg

from ireetune.errors import IreetuneError
from ireetune.problem.contraction import ContractionProblem, parse_contraction
from ireetune.problem.convolution import ConvolutionProblem, parse_convolution

Problem = ContractionProblem | ConvolutionProblem
# Every op family's record; a stored problem is read back into the one whose fields it has.
PROBLEM_RECORDS: tuple[type[ContractionProblem], type[ConvolutionProblem]] = (
    ContractionProblem,
    ConvolutionProblem,
)


def find_root_op(module: ir.Module) -> ir.Operation:
    """Return the single op marked with `root_op` by `--iree-codegen-add-tuner-attributes`."""
    root_ops = iree_codegen.get_tuner_root_ops(module)
    if not root_ops:
        raise IreetuneError(
            "no root op found: the dispatch must be dumped with --iree-codegen-add-tuner-attributes"
        )
    if len(root_ops) > 1:
        names = ", ".join(op.name for op in root_ops)
        raise IreetuneError(
            f"{len(root_ops)} root ops found ({names}); one per dispatch is supported"
        )
    return root_ops[0]


def parse_problem(root_op: ir.Operation) -> Problem:
    """Parse the root op into the record of its op family, or say it is not supported yet."""
    if linalg.isa_contraction_op(root_op):
        return parse_contraction(root_op)
    if linalg.isa_convolution_op(root_op):
        return parse_convolution(root_op)
    if root_op.name in ("linalg.pack", "linalg.unpack"):
        raise IreetuneError(
            f"'{root_op.name}' (a data-tiling layout change) is not tunable yet: its DataTiling "
            "pipeline has no searchable configuration here; the mmt4d between pack and unpack is"
        )
    if iree_codegen.isa_attention_op(root_op):
        raise IreetuneError(
            f"attention ('{root_op.name}') is not supported yet (contractions and convolutions are)"
        )
    raise IreetuneError(
        f"root op '{root_op.name}' is not supported yet (contractions and convolutions are)"
    )


def problem_from_fields(values: Mapping[str, object]) -> Problem:
    """Rebuild a problem record from its fields (the JSON of a database key), checking each
    field's type: the record is the op family whose field names are exactly the given ones, so
    keys written before records named their family read back unchanged."""
    names = set(values)
    for record in PROBLEM_RECORDS:
        if {field.name for field in fields(record)} != names:
            continue
        hints = typing.get_type_hints(record)
        checked = {name: _check_field(name, hints[name], value) for name, value in values.items()}
        return record(**checked)  # type: ignore[arg-type]
    raise IreetuneError(
        "a problem has the fields of no known op family: " + ", ".join(sorted(names))
    )


def _check_field(name: str, hint: object, value: object) -> object:
    """Check one stored field against its annotation (str, tuple[int, ...] or tuple[str, ...])."""
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
    for item in value:
        valid = (
            isinstance(item, int) and not isinstance(item, bool) and item >= 0
            if item_type is int
            else isinstance(item, item_type)
        )
        if not valid:
            raise IreetuneError(f"problem field '{name}' holds {item!r:.40}")
    return tuple(value)
