"""Check a tuning spec against the anatomy IREE documents, in three layers.

1. IREE's verifier, run by the bindings while parsing: it rejects most anatomy breaks itself
   (entry points without one `!transform.any_op` argument and result, a missing `__kernel_config`
   under `iree_codegen.tuning_spec_with_default_entrypoint`, `transform.foreach_match` naming a
   missing matcher or action or pairing mismatched signatures, named sequences outside a
   `transform.with_named_sequence` module). Its diagnostics are reported as they come.
2. The anatomy rules IREE's verifier lets through, checked here by walking the IR: a spec with no
   entry point, an entry-point argument neither `transform.readonly` nor `transform.consumed`,
   entry points that disagree on that, an unnamed nested module that linking would skip.
3. A real load: `iree-compile` compiles a tiny matmul for the target with the spec applied, so
   that this check never passes a spec the compiler refuses to load.
"""

from __future__ import annotations

import enum
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from iree.compiler import ir

from ireetune.compile.driver import CONFIGURED_PHASE, CompileRequest, CompileStatus, run_compile
from ireetune.spec.apply import CompileTarget
from ireetune.spec.source import (
    ENTRYPOINT_ATTR,
    SourceLocation,
    SpecParseError,
    find_entry_points,
    find_location,
    list_modules,
    list_named_sequences,
    read_spec,
    symbol_name,
)

WITH_NAMED_SEQUENCE_ATTR = "transform.with_named_sequence"
READONLY_ATTR = "transform.readonly"
CONSUMED_ATTR = "transform.consumed"

# The dispatch the load check compiles: odd sizes, so that no real spec's matcher configures it.
_LOAD_CHECK_MODEL = """
func.func @spec_load_check(%lhs: tensor<3x7xf32>, %rhs: tensor<7x5xf32>) -> tensor<3x5xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<3x5xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<3x5xf32>) -> tensor<3x5xf32>
  %result = linalg.matmul ins(%lhs, %rhs : tensor<3x7xf32>, tensor<7x5xf32>)
                          outs(%init : tensor<3x5xf32>) -> tensor<3x5xf32>
  return %result : tensor<3x5xf32>
}
"""
_COMPILER_ERROR = re.compile(
    r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?P<column>\d+): error: (?P<message>.*)$"
)


class ViolationSource(enum.Enum):
    """Which layer found a violation."""

    VERIFIER = "iree-verifier"
    ANATOMY = "anatomy"
    LOAD = "iree-compile"


@dataclass(frozen=True)
class Violation:
    """One broken rule, where it is, and a sentence saying what is wrong."""

    location: SourceLocation | None
    message: str
    source: ViolationSource

    def __str__(self) -> str:
        where = f"{self.location}: " if self.location else ""
        return f"{where}{self.message} [{self.source.value}]"


@dataclass(frozen=True)
class CheckReport:
    """The outcome of checking one spec."""

    spec_path: Path
    violations: tuple[Violation, ...]
    entry_points: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.violations


def _argument_effect(sequence: ir.Operation) -> str:
    """Return `readonly`, `consumed` or `` for a named sequence's first argument."""
    if "arg_attrs" not in sequence.attributes:
        return ""
    arg_attrs = ir.ArrayAttr(sequence.attributes["arg_attrs"])
    if not len(arg_attrs):
        return ""
    first = ir.DictAttr(arg_attrs[0])
    if CONSUMED_ATTR in first:
        return "consumed"
    if READONLY_ATTR in first:
        return "readonly"
    return ""


def check_anatomy(spec: ir.Operation) -> list[Violation]:
    """Check the anatomy rules that IREE's verifier does not enforce on a parsed spec."""
    violations: list[Violation] = []

    def report(op: ir.Operation, message: str) -> None:
        violations.append(Violation(find_location(op.location), message, ViolationSource.ANATOMY))

    for module in list_modules(spec):
        holds_entry_points = any(
            ENTRYPOINT_ATTR in s.attributes for s in list_named_sequences(module)
        )
        if module == spec and WITH_NAMED_SEQUENCE_ATTR not in module.attributes:
            report(module, "The spec module lacks the 'transform.with_named_sequence' attribute.")
        if module != spec and holds_entry_points and not symbol_name(module):
            report(
                module,
                "This nested module holds entry points but has no name, so linking skips it; "
                "name it ('module @name attributes {...}').",
            )
    entry_points = find_entry_points(spec)
    if not entry_points:
        report(
            spec,
            "The spec has no entry point: no transform.named_sequence carries "
            f"'{ENTRYPOINT_ATTR}'.",
        )
    effects = {}
    for entry in entry_points:
        effect = _argument_effect(entry)
        name = symbol_name(entry)
        if effect:
            effects[name] = effect
        else:
            report(
                entry,
                f"Entry point @{name} must mark its argument {{transform.readonly}} or "
                "{transform.consumed}; it has neither.",
            )
    if len(set(effects.values())) > 1:
        consumed = ", ".join(f"@{n}" for n, e in effects.items() if e == "consumed")
        readonly = ", ".join(f"@{n}" for n, e in effects.items() if e == "readonly")
        report(
            spec,
            f"Entry points disagree: {consumed} consume their argument but {readonly} only read "
            "it; linking needs them all one way.",
        )
    return violations


def load_with_compiler(spec_path: Path, target: CompileTarget, timeout_s: float) -> list[Violation]:
    """Compile a tiny matmul for `target` with the spec applied; report the compiler's errors."""
    with tempfile.TemporaryDirectory(prefix="ireetune_check_") as folder:
        model_path = Path(folder) / "spec_load_check.mlir"
        model_path.write_text(_LOAD_CHECK_MODEL)
        result = run_compile(
            CompileRequest(
                model_path,
                Path(folder) / "configured.mlir",
                target_flags=target.compile_flags,
                phase_flags=(CONFIGURED_PHASE,),
                spec_flag=target.spec_flag,
                spec_path=spec_path,
                timeout_s=timeout_s,
            )
        )
    if result.status is CompileStatus.TIMED_OUT:
        message = f"iree-compile took over {timeout_s:.0f} s to load the spec."
        return [Violation(None, message, ViolationSource.LOAD)]
    if result.ok:
        return []
    # Only the first error is reported: later ones repeat it from further up the pipeline.
    match = next(filter(None, map(_COMPILER_ERROR.match, result.stderr.splitlines())), None)
    if match is None:
        tail = result.stderr.strip().splitlines()[-1:] or ["no output"]
        message = f"iree-compile failed to load the spec: {tail[0][:300]}"
        return [Violation(None, message, ViolationSource.LOAD)]
    if Path(match["file"]).name == model_path.name:
        # The error is located in our own tiny model: say what it was, not a temporary path.
        location = None
        message = f"Applying the spec to a 3x7x5 f32 matmul fails: {match['message'][:300]}"
    else:
        location = SourceLocation(match["file"], int(match["line"]), int(match["column"]))
        message = match["message"][:300]
    return [Violation(location, message, ViolationSource.LOAD)]


def check_spec(spec_path: Path, target: CompileTarget, timeout_s: float = 60.0) -> CheckReport:
    """Check a spec file in all three layers; an unreadable file raises IreetuneError."""
    context = ir.Context()
    try:
        spec = read_spec(spec_path, context)
    except SpecParseError as error:
        verifier_violations = tuple(
            Violation(d.location, d.message, ViolationSource.VERIFIER) for d in error.diagnostics
        )
        return CheckReport(spec_path, verifier_violations, ())
    anatomy_violations = check_anatomy(spec)
    load_violations = load_with_compiler(spec_path, target, timeout_s)
    entry_names = tuple(symbol_name(entry) for entry in find_entry_points(spec))
    return CheckReport(spec_path, (*anatomy_violations, *load_violations), entry_names)


def render_check_report(report: CheckReport) -> str:
    """Render a report as one line per violation and a closing verdict."""
    lines = [str(violation) for violation in report.violations]
    if report.passed:
        entries = ", ".join(f"@{name}" for name in report.entry_points)
        lines.append(f"PASS {report.spec_path}: entry points {entries}")
    else:
        count = len(report.violations)
        lines.append(f"FAIL {report.spec_path}: {count} violation{'s' if count != 1 else ''}")
    return "\n".join(lines) + "\n"
