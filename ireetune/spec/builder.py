"""Build tuning specs (transform-dialect libraries) with the IREE Python bindings.

A spec has the anatomy that IREE documents: a module with `transform.with_named_sequence` and
`iree_codegen.tuning_spec_with_default_entrypoint`, an `@apply_op_config` action, one matcher per
configured problem, and the `@__kernel_config` entry point that runs `transform.foreach_match`:

    module attributes {transform.with_named_sequence,
                       iree_codegen.tuning_spec_with_default_entrypoint} {
      transform.named_sequence @apply_op_config(%op: !transform.any_op {transform.readonly},
          %config: !transform.any_param {transform.readonly}) { ... }
      transform.named_sequence @match_matmul_256x384x512_f32_f32_f32(...) -> (...) { ... }
      transform.named_sequence @__kernel_config(%variant: !transform.any_op {transform.consumed})
          -> !transform.any_op attributes {iree_codegen.tuning_spec_entrypoint} { ... }
    }
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from iree.compiler import ir
from iree.compiler.dialects import preprocessing_transform, transform

from ireetune.problem.contraction import ContractionProblem
from ireetune.problem.convolution import ConvolutionProblem
from ireetune.problem.root_op import Problem

APPLY_OP_CONFIG = "apply_op_config"
KERNEL_CONFIG = "__kernel_config"


@dataclass(frozen=True)
class MatcherEntry:
    """One problem to match and the compilation_info (as IR text) to apply to it."""

    problem: Problem
    compilation_info: str
    comment: str = ""


def matcher_name(problem: Problem) -> str:
    """Name a matcher after the problem it matches: `match_mmt_2048x1280x5120_f16_f16_f32`."""
    return "match_" + re.sub(r"[^A-Za-z0-9_]", "_", problem.signature)


def _readonly() -> dict[str, ir.Attribute]:
    return {"transform.readonly": ir.UnitAttr.get()}


def _consumed() -> dict[str, ir.Attribute]:
    return {"transform.consumed": ir.UnitAttr.get()}


def _build_apply_op_config() -> None:
    any_op = transform.AnyOpType.get()
    any_param = transform.AnyParamType.get()
    sequence = transform.NamedSequenceOp(
        APPLY_OP_CONFIG, [any_op, any_param], [], arg_attrs=[_readonly(), _readonly()]
    )
    with ir.InsertionPoint(sequence.body):
        op_handle, config_handle = sequence.bodyTarget, sequence.bodyExtraArgs[0]
        transform.AnnotateOp(op_handle, "compilation_info", param=config_handle)
        transform.YieldOp([])


def match_conditions(problem: Problem) -> tuple[type[ir.OpView], list[list[int]]]:
    """Return the match op for a problem and the values each of its results must equal: the
    sizes of each dimension group (and for a convolution its strides and dilations), in the
    op's result order. The spec reader compares a matcher with a problem through this too."""
    if isinstance(problem, ConvolutionProblem):

        def sizes(dims: tuple[int, ...]) -> list[int]:
            return [problem.loop_sizes[d] for d in dims]

        return preprocessing_transform.MatchConvolutionOp, [
            sizes(problem.batch_dims), sizes(problem.output_image_dims),
            sizes(problem.output_channel_dims), sizes(problem.filter_dims),
            sizes(problem.input_channel_dims), sizes(problem.depth_dims),
            list(problem.strides), list(problem.dilations),
        ]  # fmt: skip
    assert isinstance(problem, ContractionProblem)
    return preprocessing_transform.MatchContractionOp, [
        list(problem.batch_sizes), list(problem.m_sizes),
        list(problem.n_sizes), list(problem.k_sizes),
    ]  # fmt: skip


def _build_matcher(name: str, entry: MatcherEntry) -> None:
    """Match the root op by element types, indexing maps and every dimension group's sizes
    (plus strides and dilations for a convolution), and yield the entry's compilation_info."""
    any_op = transform.AnyOpType.get()
    any_param = transform.AnyParamType.get()
    problem = entry.problem
    match_op, expected = match_conditions(problem)
    sequence = transform.NamedSequenceOp(
        name, [any_op], [any_op, any_param], arg_attrs=[_readonly()]
    )
    with ir.InsertionPoint(sequence.body):
        op_handle = sequence.bodyTarget
        maps = [
            ir.AffineMapAttr(ir.Attribute.parse(f"affine_map<{text}>")).value
            for text in problem.indexing_maps
        ]
        match = match_op(
            op_handle,
            lhs_type=ir.Type.parse(problem.lhs_type),
            rhs_type=ir.Type.parse(problem.rhs_type),
            output_type=ir.Type.parse(problem.output_type),
            indexing_maps=maps,
        )
        for dims_handle, values in zip(match, expected, strict=True):
            preprocessing_transform.MatchDimsEqualOp(dims_handle, values)
        config = transform.ParamConstantOp(any_param, ir.Attribute.parse(entry.compilation_info))
        transform.YieldOp([op_handle, config.result])


def _build_kernel_config(matcher_names: Sequence[str]) -> None:
    any_op = transform.AnyOpType.get()
    # With no matcher the entry point only yields its argument: it reads it, not consumes it.
    argument = _consumed() if matcher_names else _readonly()
    sequence = transform.NamedSequenceOp(KERNEL_CONFIG, [any_op], [any_op], arg_attrs=[argument])
    sequence.operation.attributes["iree_codegen.tuning_spec_entrypoint"] = ir.UnitAttr.get()
    with ir.InsertionPoint(sequence.body):
        variant = sequence.bodyTarget
        if matcher_names:
            foreach = transform.ForeachMatchOp(
                any_op,
                [],
                variant,
                [],
                ir.ArrayAttr.get([ir.FlatSymbolRefAttr.get(n) for n in matcher_names]),
                ir.ArrayAttr.get([ir.FlatSymbolRefAttr.get(APPLY_OP_CONFIG)] * len(matcher_names)),
            )
            transform.YieldOp([foreach.updated])
        else:
            transform.YieldOp([variant])


def build_spec(entries: Sequence[MatcherEntry], context: ir.Context) -> ir.Module:
    """Build a tuning spec module with one matcher per entry; no entries gives the no-op spec.

    The no-op spec is candidate 0's: compiling with it gives the compiler's default configuration
    through exactly the same flags as every other candidate.
    """
    with context, ir.Location.unknown():
        module = ir.Module.create()
        module.operation.attributes["transform.with_named_sequence"] = ir.UnitAttr.get()
        if entries:
            # IREE requires a default entry point to hold exactly a foreach_match and a yield, so
            # the no-op spec (no matcher) cannot carry this attribute.
            module.operation.attributes["iree_codegen.tuning_spec_with_default_entrypoint"] = (
                ir.UnitAttr.get()
            )
        names: list[str] = []
        with ir.InsertionPoint(module.body):
            if entries:
                _build_apply_op_config()
            for entry in entries:
                name = matcher_name(entry.problem)
                suffix = 1
                while name in names:
                    suffix += 1
                    name = f"{matcher_name(entry.problem)}_{suffix}"
                names.append(name)
                _build_matcher(name, entry)
            _build_kernel_config(names)
        assert module.operation.verify(), "built spec does not verify"
        return module


def render_spec(module: ir.Module) -> str:
    """Print a spec as the text `iree-compile` reads."""
    return str(module)
