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

from ireetune.core.target import OpConfiguration
from ireetune.problem.family import Problem
from ireetune.problem.registry import family_of

APPLY_OP_CONFIG = "apply_op_config"
KERNEL_CONFIG = "__kernel_config"
COMPILATION_INFO = "compilation_info"


@dataclass(frozen=True)
class MatcherEntry:
    """One problem to match, the compilation_info (as IR text) to apply to it, and any other
    attributes its family's op needs beside it (attention's `decomposition_config`)."""

    problem: Problem
    compilation_info: str
    op_attributes: tuple[tuple[str, str], ...] = ()
    # The `lowering_config` of the dispatch's other ops, by kind (`reduction`, `parallel`).
    sibling_configs: tuple[tuple[str, str], ...] = ()
    # Registered passes the action runs on the op's function after setting its attributes.
    function_passes: tuple[str, ...] = ()
    # Attributes the action sets on the op's function (as IR text).
    function_attributes: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of_configuration(cls, problem: Problem, configuration: OpConfiguration) -> MatcherEntry:
        """Return the entry that gives `problem` a space's configuration, with all it sets."""
        return cls(
            problem,
            configuration.compilation_info,
            op_attributes=configuration.op_attributes,
            sibling_configs=configuration.sibling_configs,
            function_passes=configuration.function_passes,
            function_attributes=configuration.function_attributes,
        )

    @property
    def attribute_names(self) -> tuple[str, ...]:
        """Name every attribute the entry's action sets, compilation_info first."""
        return (COMPILATION_INFO, *(name for name, _ in self.op_attributes))

    @property
    def action_key(self) -> ActionKey:
        """Identify the action: the attributes set on the op, the sibling kinds, the op's loop
        count, the passes run after and the attributes set on its function."""
        kinds = tuple(kind for kind, _ in self.sibling_configs)
        return ActionKey(
            self.attribute_names,
            kinds,
            len(self.problem.loop_sizes) if kinds else 0,
            self.function_passes,
            tuple(name for name, _ in self.function_attributes),
        )


@dataclass(frozen=True)
class ActionKey:
    """What an action does, so that entries that do the same share one action."""

    attribute_names: tuple[str, ...]
    sibling_kinds: tuple[str, ...]
    rank: int
    function_passes: tuple[str, ...] = ()
    function_attribute_names: tuple[str, ...] = ()


def matcher_name(problem: Problem) -> str:
    """Name a matcher after the problem it matches: `match_mmt_2048x1280x5120_f16_f16_f32`."""
    return "match_" + re.sub(r"[^A-Za-z0-9_]", "_", problem.signature)


def _readonly() -> dict[str, ir.Attribute]:
    return {"transform.readonly": ir.UnitAttr.get()}


def action_name(key: ActionKey) -> str:
    """Name the action of an action key: `apply_op_config` for compilation_info alone,
    `apply_op_config_and_decomposition_config` when attention's decomposition comes along,
    `apply_op_config_and_siblings_2` when the other ops of a 2-loop reduction's dispatch are
    configured too, `apply_op_config_and_function_hal_executable_target` when the op's function
    gets an attribute, `..._then_convert_strided_contraction_to_contraction` when a pass runs
    after."""
    parts = [APPLY_OP_CONFIG, *(_symbol(name) for name in key.attribute_names[1:])]
    parts += [f"function_{_symbol(name)}" for name in key.function_attribute_names]
    if key.sibling_kinds:
        parts.append(f"siblings_{key.rank}")
    name = "_and_".join(parts)
    for pass_name in key.function_passes:
        short = pass_name.removeprefix("iree-global-opt-").removeprefix("iree-codegen-")
        name += "_then_" + re.sub(r"[^A-Za-z0-9_]", "_", short)
    return name


def _symbol(attribute_name: str) -> str:
    """Spell an attribute's name as part of a symbol (`hal.executable.target`: with `_`)."""
    return re.sub(r"\W", "_", attribute_name)


def sibling_matcher_name(kind: str, rank: int) -> str:
    return f"match_{kind}_sibling_{rank}"


def _build_sibling_matcher(kind: str, rank: int) -> None:
    """Match a `linalg.generic` with `rank` loops whose last loop is a reduction (`reduction`)
    or whose loops are all parallel (`parallel`):

        %rank = transform.match.structured %op : (!transform.any_op) -> !transform.param<i64> {
        ^bb0(%s: !transform.any_op):
          transform.match.structured.dim %s[-1] reduction : !transform.any_op
          %r = transform.match.structured.rank %s : (!transform.any_op) -> !transform.param<i64>
          transform.match.structured.yield %r : !transform.param<i64>
        }
        transform.match.param.cmpi eq %rank, %c2 : !transform.param<i64>
    """
    any_op = transform.AnyOpType.get()
    param = ir.Type.parse("!transform.param<i64>")
    sequence = transform.NamedSequenceOp(
        sibling_matcher_name(kind, rank), [any_op], [any_op], arg_attrs=[_readonly()]
    )
    with ir.InsertionPoint(sequence.body):
        op_handle = sequence.bodyTarget
        transform.MatchOperationNameOp(op_handle, ["linalg.generic"])
        structured = ir.Operation.create(
            "transform.match.structured", results=[param], operands=[op_handle], regions=1
        )
        block = structured.regions[0].blocks.append(any_op)
        with ir.InsertionPoint(block):
            if kind == "reduction":
                dims = {
                    "raw_dim_list": ir.DenseI64ArrayAttr.get([-1]),
                    "reduction": ir.UnitAttr.get(),
                }
            else:
                dims = {
                    "raw_dim_list": ir.DenseI64ArrayAttr.get([]),
                    "is_all": ir.UnitAttr.get(),
                    "parallel": ir.UnitAttr.get(),
                }
            ir.Operation.create(
                "transform.match.structured.dim", operands=[block.arguments[0]], attributes=dims
            )
            loops = ir.Operation.create(
                "transform.match.structured.rank", results=[param], operands=[block.arguments[0]]
            )
            ir.Operation.create("transform.match.structured.yield", operands=[loops.result])
        expected = transform.ParamConstantOp(
            param, ir.IntegerAttr.get(ir.IntegerType.get_signless(64), rank)
        )
        transform.MatchParamCmpIOp(
            structured.result, expected.result, transform.MatchCmpIPredicate.eq
        )
        transform.YieldOp([op_handle])


def _build_action(key: ActionKey) -> None:
    """Annotate the matched op with each attribute the matcher yields, in order; first, when
    the key names sibling kinds, every other op of those kinds in its function gets its
    `lowering_config` (the root's compilation_info is set last, over its own). Then the op's
    function gets the function attributes, and the key's passes run on it, which keeps the
    attributes of the ops they rewrite:

        %f = transform.get_parent_op %op {op_name = "func.func"}
        %g = transform.apply_registered_pass "iree-global-opt-convert-strided-contraction-to-contraction" to %f

    Run here rather than before matching, a pass changes only the dispatches a matcher chose.
    """
    attribute_names, kinds, rank = key.attribute_names, key.sibling_kinds, key.rank
    function_names = key.function_attribute_names
    any_op = transform.AnyOpType.get()
    any_param = transform.AnyParamType.get()
    params = [any_param] * (len(attribute_names) + len(function_names) + len(kinds))
    sequence = transform.NamedSequenceOp(
        action_name(key), [any_op, *params], [], arg_attrs=[_readonly()] * (1 + len(params))
    )
    with ir.InsertionPoint(sequence.body):
        op_handle = sequence.bodyTarget
        handles = list(sequence.bodyExtraArgs)
        op_params = handles[: len(attribute_names)]
        function_params = handles[len(attribute_names) : len(attribute_names) + len(function_names)]
        if kinds:
            function = transform.GetParentOp(any_op, op_handle, op_name="func.func").result
            sibling_params = handles[len(attribute_names) + len(function_names) :]
            for kind, handle in zip(kinds, sibling_params, strict=True):
                siblings = transform.CollectMatchingOp(
                    [any_op], function, sibling_matcher_name(kind, rank)
                ).results[0]
                transform.AnnotateOp(siblings, "lowering_config", param=handle)
        for name, handle in zip(attribute_names, op_params, strict=True):
            transform.AnnotateOp(op_handle, name, param=handle)
        if function_names or key.function_passes:
            function = transform.GetParentOp(any_op, op_handle, op_name="func.func").result
            for name, handle in zip(function_names, function_params, strict=True):
                transform.AnnotateOp(function, name, param=handle)
            for pass_name in key.function_passes:
                function = transform.ApplyRegisteredPassOp(any_op, function, pass_name).result
        transform.YieldOp([])


def _build_matcher(name: str, entry: MatcherEntry) -> None:
    """Match the root op as its family does (types, maps and every dimension group's sizes, or
    a copy of the op), and yield the entry's compilation_info and other attributes."""
    any_op = transform.AnyOpType.get()
    any_param = transform.AnyParamType.get()
    values = [
        entry.compilation_info,
        *(text for _, text in entry.op_attributes),
        *(text for _, text in entry.function_attributes),
        *(text for _, text in entry.sibling_configs),
    ]
    sequence = transform.NamedSequenceOp(
        name, [any_op], [any_op, *[any_param] * len(values)], arg_attrs=[_readonly()]
    )
    with ir.InsertionPoint(sequence.body):
        matched = sequence.bodyTarget
        configured = family_of(entry.problem).build_matcher(entry.problem, matched)
        params = [
            transform.ParamConstantOp(any_param, ir.Attribute.parse(text)).result for text in values
        ]
        transform.YieldOp([matched if configured is None else configured, *params])


def _build_kernel_config(pairs: Sequence[tuple[str, str]], prologue_passes: Sequence[str]) -> None:
    """Build the entry point: run the prologue passes on the payload, then match and apply."""
    any_op = transform.AnyOpType.get()
    # With no matcher the entry point only yields its argument: it reads it, not consumes it.
    argument = {"transform.consumed": ir.UnitAttr.get()} if pairs else _readonly()
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
            keys = list(dict.fromkeys(entry.action_key for entry in entries))
            for kind, rank in dict.fromkeys(
                (k, key.rank) for key in keys for k in key.sibling_kinds
            ):
                _build_sibling_matcher(kind, rank)
            for key in keys:
                _build_action(key)
            for entry in entries:
                name = matcher_name(entry.problem)
                suffix = 1
                while name in (m for m, _ in pairs):
                    suffix += 1
                    name = f"{matcher_name(entry.problem)}_{suffix}"
                pairs.append((name, action_name(entry.action_key)))
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
    entry = MatcherEntry.of_configuration(problem, configuration)
    return render_spec(build_spec([entry], context, prologue_passes))
