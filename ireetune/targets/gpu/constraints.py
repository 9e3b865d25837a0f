"""Ask the compiler for a dispatch's search space: one SMT problem per root op and pipeline.

`iree-compile --iree-codegen-emit-pipeline-constraints --compile-to=executable-configurations`
writes `iree_codegen.smt.constraints` ops beside the configured root op:

    iree_codegen.smt.constraints target = <set = 0>, pipeline = #iree_gpu.pipeline<TileAndFuse>,
        knobs = {workgroup = [#iree_codegen.smt.int_knob<"wg_0">, ...], ...} dims(%c1024, ...) {
      ...
      iree_codegen.smt.assert %8, "wg_0 must be divisible by mma_m ({} % {} == 0)", ...
    }

`iree_codegen.convert_constraints_op_to_smtlib` turns each into SMT-LIB text for z3. The same
output also carries the compiler's own (default) configuration on the root op.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import z3
from iree.compiler import ir
from iree.compiler.dialects import iree_codegen, iree_gpu

from ireetune.compile.driver import CONFIGURED_PHASE, build_request, run_compile
from ireetune.core.errors import IreetuneError
from ireetune.frontend.dispatches import strip_configurations
from ireetune.targets.gpu.template import (
    PIPELINE_OPTIONS_KEY,
    SUBGROUP_SIZE_KEY,
    WORKGROUP_SIZE_KEY,
    OpaqueAttr,
    ResolvedDict,
    TemplateDict,
    extract_knob_values,
    knob_names,
    one_of_options,
    read_template,
)

if TYPE_CHECKING:
    from ireetune.core.target import Target

CONSTRAINTS_OP = "iree_codegen.smt.constraints"
ASSERT_OP = "iree_codegen.smt.assert"


@dataclass(frozen=True)
class ConstraintSpace:
    """One pipeline's search space for the root op: the knob template and its SMT-LIB problem."""

    index: int
    pipeline: str
    template: TemplateDict
    smtlib: str
    knob_names: tuple[str, ...]
    mma_shapes: dict[str, tuple[int, int, int]]
    # The compiler's message for each `(assert ...)` of `smtlib`, in order (empty if unknown).
    assert_messages: tuple[str, ...] = ()

    def mma_shape(self, config: ResolvedDict) -> tuple[int, int, int]:
        """Return the M x N x K shape of a filled template's intrinsic (1 x 1 x 1 without one)."""
        mma = config.get("mma_kind")
        return (
            self.mma_shapes.get(mma.text, (1, 1, 1)) if isinstance(mma, OpaqueAttr) else (1, 1, 1)
        )


@dataclass(frozen=True)
class CompilerSpace:
    """All spaces the compiler emitted for a dispatch, and its default configuration."""

    spaces: tuple[ConstraintSpace, ...]
    default_pipeline: str | None
    default_config: ResolvedDict | None


# The longest a dispatch's space may take to emit.
EMIT_TIMEOUT_S = 300.0


def emit_constraints(benchmark_path: Path, target: Target, folder: Path, stripped_name: str) -> str:
    """Strip a dispatch benchmark's configuration (into `folder / stripped_name`) and run
    iree-compile to the configuration stage with constraint emission; return the IR text."""
    stripped_path, output_path = folder / stripped_name, folder / "space.mlir"
    strip_configurations(
        benchmark_path, stripped_path, timeout_s=EMIT_TIMEOUT_S, keep_root_markers=True
    )
    result = run_compile(
        build_request(
            target,
            stripped_path,
            output_path,
            phase_flags=(
                "--compile-from=executable-sources",
                "--iree-codegen-emit-pipeline-constraints",
                CONFIGURED_PHASE,
            ),
            timeout_s=EMIT_TIMEOUT_S,
        )
    )
    if not result.ok:
        detail = "iree-compile crashed" if result.crashed else result.error_line
        raise IreetuneError(f"the compiler could not emit the search space: {detail}")
    return output_path.read_text()


def _mma_shape(option_text: str) -> tuple[int, int, int] | None:
    attribute = ir.Attribute.parse(option_text)
    for kind in (iree_gpu.MMAAttr, iree_gpu.VirtualMMAAttr):
        if kind.isinstance(attribute):
            m, n, k = kind(attribute).mnk_shape
            return int(m), int(n), int(k)
    return None


def _pipeline_name(attribute: ir.Attribute) -> str:
    return str(iree_gpu.PipelineAttr(attribute).value.name)


def read_constraint_spaces(configured_text: str, context: ir.Context) -> CompilerSpace:
    """Read every constraints op of the root op, and the root op's default configuration."""
    with context:
        module = ir.Module.parse(configured_text)
        found: list[ir.Operation] = []

        def collect(operation: ir.Operation) -> ir.WalkResult:
            if operation.name == CONSTRAINTS_OP:
                found.append(operation)
            return ir.WalkResult.ADVANCE

        module.operation.walk(collect)
        spaces = []
        for index, operation in enumerate(found):
            view = operation.opview
            template = read_template(view.knobs)
            assert isinstance(template, dict), "a knob template is a dictionary"
            shapes = {
                option: shape
                for options in one_of_options(template).values()
                for option in options
                if (shape := _mma_shape(option)) is not None
            }
            spaces.append(
                ConstraintSpace(
                    index=index,
                    pipeline=_pipeline_name(view.pipeline),
                    template=template,
                    smtlib=iree_codegen.convert_constraints_op_to_smtlib(operation),
                    knob_names=knob_names(template),
                    mma_shapes=shapes,
                    assert_messages=_assert_messages(operation),
                )
            )
        default_pipeline, default_config = _read_default_config(module)
        return CompilerSpace(tuple(spaces), default_pipeline, default_config)


def make_space(
    index: int,
    pipeline: str,
    template: TemplateDict,
    constraints: Sequence[z3.BoolRef],
    context: z3.Context,
    mma_shapes: dict[str, tuple[int, int, int]] | None = None,
) -> ConstraintSpace:
    """Write a hand-written space in the compiler's own form: its template and its z3
    constraints exported as SMT-LIB text, so that the sampler, template filling, the default's
    read-back and the compilation_info builder treat both kinds alike.

    Every knob of the template must appear in the constraints (the sampler reads each knob's
    value from z3's model).
    """
    solver = z3.Solver(ctx=context)
    solver.add(*constraints)
    names = knob_names(template)
    smtlib = solver.sexpr()
    for name in names:
        assert f"(declare-fun {name} () Int)" in smtlib, f"knob {name} is unconstrained"
    for options in one_of_options(template).values():
        assert options, "a one-of knob needs options"
    return ConstraintSpace(index, pipeline, template, smtlib, names, dict(mma_shapes or {}))


def _assert_messages(constraints: ir.Operation) -> tuple[str, ...]:
    """Return the message of each `iree_codegen.smt.assert` of a constraints op, in order (the
    order of the `(assert ...)`s of its SMT-LIB text)."""
    messages: list[str] = []

    def collect(op: ir.Operation) -> ir.WalkResult:
        if op.name == ASSERT_OP:
            messages.append(ir.StringAttr(op.attributes["msg"]).value)
        return ir.WalkResult.ADVANCE

    constraints.walk(collect)
    return tuple(messages)


def _read_default_config(module: ir.Module) -> tuple[str | None, ResolvedDict | None]:
    """Return the pipeline and the flattened fields of the compiler's chosen configuration."""
    root_ops = iree_codegen.get_tuner_root_ops(module)
    if len(root_ops) != 1 or "lowering_config" not in root_ops[0].attributes:
        return None, None
    root_op = root_ops[0]
    attribute = root_op.attributes["lowering_config"]
    if not iree_gpu.LoweringConfigAttr.isinstance(attribute):
        return None, None
    fields = read_template(iree_gpu.LoweringConfigAttr(attribute).attributes)
    assert isinstance(fields, dict)
    resolved: ResolvedDict = dict(fields)  # type: ignore[arg-type]
    if "decomposition_config" in root_op.attributes:
        resolved["decomposition_config"] = read_template(root_op.attributes["decomposition_config"])  # type: ignore[assignment]
    function = root_op.parent
    while function is not None and function.name != "func.func":
        function = function.parent
    if function is None or "translation_info" not in function.attributes:
        return None, resolved
    translation = iree_codegen.TranslationInfoAttr(function.attributes["translation_info"])
    pipeline_attribute = translation.pass_pipeline
    pipeline = (
        _pipeline_name(pipeline_attribute)
        if iree_gpu.PipelineAttr.isinstance(pipeline_attribute)
        else None
    )
    resolved[WORKGROUP_SIZE_KEY] = [int(size) for size in translation.workgroup_size]
    resolved[SUBGROUP_SIZE_KEY] = int(translation.subgroup_size)
    configuration = translation.configuration
    if configuration is not None and PIPELINE_OPTIONS_KEY in ir.DictAttr(configuration):
        options = iree_gpu.PipelineOptionsAttr(ir.DictAttr(configuration)[PIPELINE_OPTIONS_KEY])
        option_values: dict[str, int | bool] = {}
        for name, kind in (
            ("prefetch_num_stages", int),
            ("no_reduce_shared_memory_bank_conflicts", bool),
            ("use_igemm_convolution", bool),
        ):
            if (value := getattr(options, name)) is not None:
                option_values[name] = kind(value)
        resolved[PIPELINE_OPTIONS_KEY] = option_values  # type: ignore[assignment]
    return pipeline, resolved


def default_knob_values(space: CompilerSpace) -> tuple[ConstraintSpace, dict[str, int]] | None:
    """Express the default configuration in the knobs of the first space that can hold it."""
    if space.default_config is None:
        return None
    for candidate in space.spaces:
        if candidate.pipeline != space.default_pipeline:
            continue
        values = extract_knob_values(candidate.template, space.default_config)
        if values is not None and set(values) == set(candidate.knob_names):
            return candidate, values
    return None
