"""Find a dispatch's root op; its family's parser (`registry.py`) turns it into a problem."""

from __future__ import annotations

from iree.compiler import ir
from iree.compiler.dialects import iree_codegen

from ireetune.core.errors import IreetuneError
from ireetune.problem.family import Problem
from ireetune.problem.registry import parse_problem, problem_from_fields

__all__ = ["Problem", "find_root_op", "parse_problem", "problem_from_fields"]


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
