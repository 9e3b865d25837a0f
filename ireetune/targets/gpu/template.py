"""The compiler's knob template: a configuration with holes, filled with one solution's values.

`--iree-codegen-emit-pipeline-constraints` writes, next to each root op, a template such as

    {workgroup = [#iree_codegen.smt.int_knob<"wg_0">, #iree_codegen.smt.int_knob<"wg_1">, 0],
     mma_kind = #iree_codegen.smt.one_of_knob<"mma_idx", [#iree_gpu.mma_layout<...>, ...]>,
     workgroup_size = [#iree_codegen.smt.int_knob<"wg_size_x">, ...], subgroup_size = ..., ...}

This module turns it into plain Python values once (through the bindings), so that filling the
holes and reading tile sizes for the ordering heuristic need no IR context, and turns a filled
template back into `#iree_codegen.compilation_info` through the bindings.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import cast

from iree.compiler import ir
from iree.compiler.dialects import iree_codegen, iree_gpu

# Template keys that belong to the translation_info; every other key is a lowering_config field.
WORKGROUP_SIZE_KEY = "workgroup_size"
SUBGROUP_SIZE_KEY = "subgroup_size"
PIPELINE_OPTIONS_KEY = "gpu_pipeline_options"
TRANSLATION_KEYS = (WORKGROUP_SIZE_KEY, SUBGROUP_SIZE_KEY, PIPELINE_OPTIONS_KEY)
# Keys that are attributes of the root op beside compilation_info (attention's decomposition).
SEPARATE_OP_ATTRIBUTE_KEYS = ("decomposition_config",)


@dataclass(frozen=True)
class IntKnob:
    """A hole for an integer chosen by the solver."""

    name: str


@dataclass(frozen=True)
class OneOfKnob:
    """A hole for one of several attributes, chosen by the solver as an index."""

    name: str
    options: tuple[str, ...]


@dataclass(frozen=True)
class OpaqueAttr:
    """An attribute kept as its IR text (intrinsics, promotion types, unit attributes)."""

    text: str


@dataclass(frozen=True)
class LoweringConfigNode:
    """A nested `#iree_gpu.lowering_config<{...}>` (attention's per-matmul configs)."""

    fields: TemplateDict


TemplateValue = (
    int
    | bool
    | IntKnob
    | OneOfKnob
    | OpaqueAttr
    | LoweringConfigNode
    | list["TemplateValue"]
    | dict[str, "TemplateValue"]
)
TemplateDict = dict[str, TemplateValue]
ResolvedValue = (
    int
    | bool
    | OpaqueAttr
    | LoweringConfigNode
    | list["ResolvedValue"]
    | dict[str, "ResolvedValue"]
)
ResolvedDict = dict[str, ResolvedValue]


def read_template(attribute: ir.Attribute) -> TemplateValue:
    """Convert a template attribute (with knob placeholders) into Python values."""
    if iree_codegen.IntKnobAttr.isinstance(attribute):
        return IntKnob(iree_codegen.IntKnobAttr(attribute).name)
    if iree_codegen.OneOfKnobAttr.isinstance(attribute):
        knob = iree_codegen.OneOfKnobAttr(attribute)
        return OneOfKnob(knob.name, tuple(str(option) for option in knob.options))
    if iree_gpu.LoweringConfigAttr.isinstance(attribute):
        fields = read_template(iree_gpu.LoweringConfigAttr(attribute).attributes)
        assert isinstance(fields, dict)
        return LoweringConfigNode(fields)
    if isinstance(attribute, ir.BoolAttr):
        return bool(attribute.value)
    if isinstance(attribute, ir.IntegerAttr):
        return int(attribute.value)
    if isinstance(attribute, ir.ArrayAttr):
        return [read_template(element) for element in attribute]
    if isinstance(attribute, ir.DictAttr):
        return {named.name: read_template(named.attr) for named in attribute}
    return OpaqueAttr(str(attribute))


def _knobs_in(template: TemplateValue) -> Iterator[IntKnob | OneOfKnob]:
    """Yield the template's knobs depth first, in the order they appear."""
    if isinstance(template, IntKnob | OneOfKnob):
        yield template
    elif isinstance(template, LoweringConfigNode):
        yield from _knobs_in(template.fields)
    elif isinstance(template, list):
        for element in template:
            yield from _knobs_in(element)
    elif isinstance(template, dict):
        for element in template.values():
            yield from _knobs_in(element)


def knob_names(template: TemplateValue) -> tuple[str, ...]:
    """List the template's knob names, each once, in order of first appearance."""
    return tuple(dict.fromkeys(knob.name for knob in _knobs_in(template)))


def one_of_options(template: TemplateValue) -> dict[str, tuple[str, ...]]:
    """Map each one-of knob to its options (for example `mma_idx` to the intrinsics)."""
    return {knob.name: knob.options for knob in _knobs_in(template) if isinstance(knob, OneOfKnob)}


def fill_template(template: TemplateValue, values: Mapping[str, int | str]) -> ResolvedValue:
    """Replace every knob by its value; a one-of knob's value is an index into its options."""
    if isinstance(template, IntKnob):
        return int(values[template.name])
    if isinstance(template, OneOfKnob):
        return _option_value(template.options[int(values[template.name])])
    if isinstance(template, LoweringConfigNode):
        fields = fill_template(template.fields, values)
        assert isinstance(fields, dict)
        return LoweringConfigNode(fields)  # type: ignore[arg-type]
    if isinstance(template, list):
        return [fill_template(element, values) for element in template]
    if isinstance(template, dict):
        return {key: fill_template(element, values) for key, element in template.items()}
    return template


def _option_value(text: str) -> ResolvedValue:
    """Read a one-of option: booleans (`use_igemm_convolution`) as such, others as attributes."""
    return {"true": True, "false": False}.get(text, OpaqueAttr(text))


def extract_knob_values(template: TemplateValue, actual: ResolvedValue) -> dict[str, int] | None:
    """Read the knob values that would turn `template` into `actual`, or None if it cannot.

    Used to express the compiler's default configuration in the template's knobs. Fields that the
    actual configuration has beyond the template (such as `convert_acc_gemm`) are ignored.
    """
    found: dict[str, int] = {}

    def visit(pattern: TemplateValue, value: ResolvedValue) -> bool:
        if isinstance(pattern, IntKnob):
            if isinstance(value, bool) or not isinstance(value, int):
                return False
            return found.setdefault(pattern.name, value) == value
        if isinstance(pattern, OneOfKnob):
            options = [_option_value(option) for option in pattern.options]
            if value not in options:
                return False
            index = options.index(value)
            return found.setdefault(pattern.name, index) == index
        if isinstance(pattern, LoweringConfigNode):
            return isinstance(value, LoweringConfigNode) and visit(
                pattern.fields, cast(ResolvedValue, value.fields)
            )
        if isinstance(pattern, list):
            return (
                isinstance(value, list)
                and len(value) == len(pattern)
                and all(visit(p, v) for p, v in zip(pattern, value, strict=True))
            )
        if isinstance(pattern, dict):
            return isinstance(value, dict) and all(
                key in value and visit(element, value[key]) for key, element in pattern.items()
            )
        return pattern == value

    return found if visit(template, actual) else None


def _to_attribute(value: ResolvedValue) -> ir.Attribute:
    if isinstance(value, bool):
        return ir.BoolAttr.get(value)
    if isinstance(value, int):
        return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), value)
    if isinstance(value, OpaqueAttr):
        return ir.Attribute.parse(value.text)
    if isinstance(value, LoweringConfigNode):
        return iree_gpu.LoweringConfigAttr.get(_to_attribute(value.fields))  # type: ignore[arg-type]
    if isinstance(value, list):
        return ir.ArrayAttr.get([_to_attribute(element) for element in value])
    return ir.DictAttr.get({key: _to_attribute(element) for key, element in value.items()})


def build_compilation_info(
    resolved: ResolvedDict, pipeline: str, context: ir.Context
) -> tuple[ir.Attribute, dict[str, ir.Attribute]]:
    """Build the `compilation_info` of a filled template, and any separate root-op attributes.

    Translation fields (workgroup and subgroup size, pipeline options) go to
    `iree_codegen.TranslationInfoAttr`; the rest form the `iree_gpu.LoweringConfigAttr`.
    """
    with context:
        lowering_fields = {
            key: _to_attribute(value)
            for key, value in resolved.items()
            if key not in TRANSLATION_KEYS and key not in SEPARATE_OP_ATTRIBUTE_KEYS
        }
        lowering_config = iree_gpu.LoweringConfigAttr.get(ir.DictAttr.get(lowering_fields))
        options = resolved.get(PIPELINE_OPTIONS_KEY, {})
        assert isinstance(options, dict)
        reorder = options.get("reorder_workgroups_strategy")
        pipeline_options = iree_gpu.PipelineOptionsAttr.get(
            prefetch_num_stages=_optional_int(options.get("prefetch_num_stages")),
            no_reduce_shared_memory_bank_conflicts=_optional_bool(
                options.get("no_reduce_shared_memory_bank_conflicts")
            ),
            use_igemm_convolution=_optional_bool(options.get("use_igemm_convolution")),
            reorder_workgroups_strategy=(
                ir.Attribute.parse(reorder.text) if isinstance(reorder, OpaqueAttr) else None
            ),
        )
        workgroup_size = resolved.get(WORKGROUP_SIZE_KEY)
        subgroup_size = resolved.get(SUBGROUP_SIZE_KEY)
        translation_info = iree_codegen.TranslationInfoAttr.get(
            iree_gpu.PipelineAttr.get(getattr(iree_gpu.LoweringPipeline, pipeline)),
            None,
            [int(size) for size in workgroup_size] if isinstance(workgroup_size, list) else None,  # type: ignore[arg-type]
            int(subgroup_size) if isinstance(subgroup_size, int) else None,
            ir.DictAttr.get({PIPELINE_OPTIONS_KEY: pipeline_options}),
        )
        separate = {
            key: _to_attribute(resolved[key])
            for key in SEPARATE_OP_ATTRIBUTE_KEYS
            if key in resolved
        }
        return iree_codegen.CompilationInfoAttr.get(lowering_config, translation_info), separate


def build_lowering_config(fields: ResolvedDict, context: ir.Context) -> str:
    """Render lowering-config fields as `#iree_gpu.lowering_config<{...}>` text."""
    with context:
        return str(iree_gpu.LoweringConfigAttr.get(_to_attribute(fields)))


def _optional_int(value: ResolvedValue | None) -> int | None:
    return None if value is None or isinstance(value, bool) else int(value)  # type: ignore[arg-type]


def _optional_bool(value: ResolvedValue | None) -> bool | None:
    return value if isinstance(value, bool) else None
