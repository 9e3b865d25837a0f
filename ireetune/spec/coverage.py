"""Read a model's dispatches into root-op records for comparing them with a spec."""

from __future__ import annotations

from pathlib import Path

from iree.compiler import ir

from ireetune.core.errors import IreetuneError
from ireetune.core.target import Target
from ireetune.frontend.dispatches import dump_dispatches, parse_module, read_mlir_file
from ireetune.problem.root_op import find_root_op, parse_problem
from ireetune.spec.inspect import DispatchRoot


def read_dispatch_roots(
    model_path: Path, target: Target, folder: Path, timeout_s: float
) -> list[DispatchRoot]:
    """Dump a model's dispatches and parse each root op; others keep only their op name."""
    roots = []
    context = ir.Context()
    for dispatch in dump_dispatches(model_path, target, folder, timeout_s):
        module = parse_module(read_mlir_file(dispatch.path), context, dispatch.path)
        try:
            root_op = find_root_op(module)
        except IreetuneError:
            roots.append(DispatchRoot(dispatch.index, dispatch.name, "no root op", None))
            continue
        try:
            problem = parse_problem(root_op)
        except IreetuneError:
            # Not a contraction or convolution: only matchers that name no op family can apply.
            problem = None
        roots.append(DispatchRoot(dispatch.index, dispatch.name, root_op.name, problem))
    return roots
