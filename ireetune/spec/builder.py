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
from iree.compiler.dialects import transform

from ireetune.problem.family import Problem
from ireetune.problem.registry import family_of
from ireetune.targets.base import OpConfiguration

APPLY_OP_CONFIG = "apply_op_config"
KERNEL_CONFIG = "__kernel_config"
COMPILATION_INFO = "compilation_info"


@dataclass(frozen=True)
class MatcherEntry:
    """One problem to match, the compilation_info (as IR text) to apply to it, and any other
    attributes its family's op needs beside it (attention's `decomposition_config`)."""

    problem: Problem
    compilation_info: str
    comment: str = ""
    op_attributes: tuple[tuple[str, str], ...] = ()

    @property
    def attribute_names(self) -> tuple[str, ...]:
        """Name every attribute the entry's action sets, compilation_info first."""
        return (COMPILATION_INFO, *(name for name, _ in self.op_attributes))


def matcher_name(problem: Problem) -> str:
    """Name a matcher after the problem it matches: `match_mmt_2048x1280x5120_f16_f16_f32`."""
    return "match_" + re.sub(r"[^A-Za-z0-9_]", "_", problem.signature)


def _readonly() -> dict[str, ir.Attribute]:
    return {"transform.readonly": ir.UnitAttr.get()}


def _consumed() -> dict[str, ir.Attribute]:
    return {"transform.consumed": ir.UnitAttr.get()}


def action_name(attribute_names: tuple[str, ...]) -> str:
    """Name the action that sets these attributes: `apply_op_config` for compilation_info alone,
    `apply_op_config_and_decomposition_config` when attention's decomposition comes along."""
    return "_and_".join([APPLY_OP_CONFIG, *attribute_names[1:]])


def _build_action(attribute_names: tuple[str, ...]) -> None:
    """Annotate the matched op with each attribute the matcher yields, in order."""
    any_op = transform.AnyOpType.get()
    any_param = transform.AnyParamType.get()
    params = [any_param] * len(attribute_names)
    sequence = transform.NamedSequenceOp(
        action_name(attribute_names),
        [any_op, *params],
        [],
        arg_attrs=[_readonly()] * (1 + len(params)),
    )
    with ir.InsertionPoint(sequence.body):
        op_handle = sequence.bodyTarget
        for name, handle in zip(attribute_names, sequence.bodyExtraArgs, strict=True):
            transform.AnnotateOp(op_handle, name, param=handle)
        transform.YieldOp([])


def _build_matcher(name: str, entry: MatcherEntry) -> None:
    """Match the root op as its family does (types, maps and every dimension group's sizes, or
    a copy of the op), and yield the entry's compilation_info and other attributes."""
    any_op = transform.AnyOpType.get()
    any_param = transform.AnyParamType.get()
    values = [entry.compilation_info, *(text for _, text in entry.op_attributes)]
    sequence = transform.NamedSequenceOp(
        name, [any_op], [any_op, *[any_param] * len(values)], arg_attrs=[_readonly()]
    )
    with ir.InsertionPoint(sequence.body):
        op_handle = sequence.bodyTarget
        family_of(entry.problem).build_matcher(entry.problem, op_handle)
        params = [
            transform.ParamConstantOp(any_param, ir.Attribute.parse(text)).result for text in values
        ]
        transform.YieldOp([op_handle, *params])


def _build_kernel_config(pairs: Sequence[tuple[str, str]], prologue_passes: Sequence[str]) -> None:
    """Build the entry point: run the prologue passes on the payload, then match and apply."""
    any_op = transform.AnyOpType.get()
    # With no matcher the entry point only yields its argument: it reads it, not consumes it.
    argument = _consumed() if pairs else _readonly()
    sequence = transform.NamedSequenceOp(KERNEL_CONFIG, [any_op], [any_op], arg_attrs=[argument])
    sequence.operation.attributes["iree_codegen.tuning_spec_entrypoint"] = ir.UnitAttr.get()
    with ir.InsertionPoint(sequence.body):
        payload = sequence.bodyTarget
        if pairs:
            for pass_name in prologue_passes:
                payload = transform.ApplyRegisteredPassOp(any_op, payload, pass_name).result
            foreach = transform.ForeachMatchOp(
                any_op,
                [],
                payload,
                [],
                ir.ArrayAttr.get([ir.FlatSymbolRefAttr.get(m) for m, _ in pairs]),
                ir.ArrayAttr.get([ir.FlatSymbolRefAttr.get(a) for _, a in pairs]),
            )
            transform.YieldOp([foreach.updated])
        else:
            transform.YieldOp([payload])


def build_spec(
    entries: Sequence[MatcherEntry],
    context: ir.Context,
    prologue_passes: Sequence[str] = (),
) -> ir.Module:
    """Build a tuning spec module with one matcher per entry; no entries gives the no-op spec.

    The no-op spec is candidate 0's: compiling with it gives the compiler's default configuration
    through exactly the same flags as every other candidate. `prologue_passes` run on the payload
    before matching (`Target.spec_prologue`): the llvm-cpu target restores the unit batch of
    convolutions that global optimisation folded away, as its own pipeline does after the spec
    ran, so that the matcher sees the op it configures. A spec with a prologue keeps the
    standard entry point but not the default-entry-point form (one foreach_match and a yield).
    """
    with context, ir.Location.unknown():
        module = ir.Module.create()
        module.operation.attributes["transform.with_named_sequence"] = ir.UnitAttr.get()
        if entries and not prologue_passes:
            # IREE requires a default entry point to hold exactly a foreach_match and a yield, so
            # the no-op spec (no matcher) cannot carry this attribute.
            module.operation.attributes["iree_codegen.tuning_spec_with_default_entrypoint"] = (
                ir.UnitAttr.get()
            )
        pairs: list[tuple[str, str]] = []
        with ir.InsertionPoint(module.body):
            for attribute_names in dict.fromkeys(entry.attribute_names for entry in entries):
                _build_action(attribute_names)
            for entry in entries:
                name = matcher_name(entry.problem)
                suffix = 1
                while name in (m for m, _ in pairs):
                    suffix += 1
                    name = f"{matcher_name(entry.problem)}_{suffix}"
                pairs.append((name, action_name(entry.attribute_names)))
                _build_matcher(name, entry)
            _build_kernel_config(pairs, prologue_passes)
        assert module.operation.verify(), "built spec does not verify"
        return module


def render_spec(module: ir.Module) -> str:
    """Print a spec as the text `iree-compile` reads."""
    return str(module)


def build_configuration_spec(
    problem: Problem,
    configuration: OpConfiguration,
    prologue_passes: Sequence[str],
    context: ir.Context,
) -> str:
    """Render the spec that gives one problem one configuration, as every flow writes it."""
    entry = MatcherEntry(
        problem, configuration.compilation_info, op_attributes=configuration.op_attributes
    )
    return render_spec(build_spec([entry], context, prologue_passes))
