"""Load the dispatch to tune: from a dispatch benchmark file, or picked out of a model."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from iree.compiler import ir
from iree.compiler.dialects import iree_codegen

from ireetune.core.candidate import Knobs
from ireetune.core.errors import IreetuneError
from ireetune.core.target import FamilySpace, Target, prepare_space
from ireetune.frontend.dispatches import (
    dump_dispatches,
    is_dispatch_benchmark,
    parse_module,
    read_mlir_file,
    select_dispatch,
)
from ireetune.problem.root_op import Problem, find_root_op, parse_problem

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedDispatch:
    """The dispatch benchmark, its root op parsed into a problem, the search space the target
    prepared for it, and the compiler's default."""

    benchmark_path: Path
    # The parsed module owns `root_op`: it must live as long as the op is used.
    module: ir.Module
    root_op: ir.Operation
    problem: Problem
    variant_target: ir.Attribute
    default_knobs: Knobs | None
    space: FamilySpace


def load_dispatch(
    input_path: Path, dispatch: str | None, target: Target, scratch: Path, context: ir.Context
) -> LoadedDispatch:
    """Read the input (a `*_benchmark.mlir`, or a model and `--dispatch`) and parse its root op."""
    benchmark_path = _resolve_benchmark_file(input_path, dispatch, target, scratch)
    module = parse_module(read_mlir_file(benchmark_path), context, benchmark_path)
    with context:
        root_op = find_root_op(module)
        problem = parse_problem(root_op)
        variant_target = _check_backend(module, target)
        space = prepare_space(target, problem, benchmark_path, scratch / "target", context)
        default_knobs = space.parse_default_knobs(problem, root_op)
    return LoadedDispatch(
        benchmark_path, module, root_op, problem, variant_target, default_knobs, space
    )


def _resolve_benchmark_file(
    input_path: Path, dispatch: str | None, target: Target, scratch: Path
) -> Path:
    text = read_mlir_file(input_path)
    if is_dispatch_benchmark(text):
        if dispatch is not None:
            raise IreetuneError("--dispatch applies to models; the input is already one dispatch")
        return input_path
    parse_module(text, ir.Context(), input_path)
    dispatches = dump_dispatches(input_path, target, scratch / "dispatches", timeout_s=600)
    chosen = select_dispatch(dispatches, dispatch)
    logger.info("tuning dispatch %d: %s", chosen.index, chosen.name)
    return chosen.path


def _check_backend(module: ir.Module, target: Target) -> ir.Attribute:
    variants = iree_codegen.get_executable_variant_ops(module)
    if len(variants) != 1:
        raise IreetuneError(
            f"expected one executable variant in the dispatch, found {len(variants)}"
        )
    variant_target = variants[0].attributes["target"]
    backend = str(variant_target).split('"')[1] if '"' in str(variant_target) else ""
    if backend != target.backend:
        raise IreetuneError(
            f"the dispatch was compiled for '{backend}' but the target is '{target.name}' "
            f"({target.backend}); dump it again for this target"
        )
    return variant_target
