"""Read a tuning spec from a file into IR, keeping file:line:col locations for every op; find its entry points.

The IREE bindings verify while they parse, so a spec that breaks a rule IREE enforces (a
`transform.foreach_match` naming a missing matcher, an entry point with two arguments) fails
here with the compiler's own diagnostics; `SpecParseError` carries all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from iree.compiler import ir

from ireetune.core.errors import IreetuneError
from ireetune.frontend.dispatches import read_mlir_file

ENTRYPOINT_ATTR = "iree_codegen.tuning_spec_entrypoint"


@dataclass(frozen=True)
class SourceLocation:
    """A place in a spec file, printed as `file:line:col`."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True)
class SpecDiagnostic:
    """One error the compiler reported while parsing and verifying a spec."""

    location: SourceLocation | None
    message: str

    def __str__(self) -> str:
        return f"{self.location}: {self.message}" if self.location else self.message


class SpecParseError(IreetuneError):
    """A spec that does not parse or does not pass IREE's verifier; keeps every diagnostic."""

    def __init__(self, source_name: str, diagnostics: tuple[SpecDiagnostic, ...]) -> None:
        self.diagnostics = diagnostics
        first = str(diagnostics[0]) if diagnostics else "unknown error"
        super().__init__(f"IREE rejects the spec {source_name}: {first}")


def find_location(location: ir.Location) -> SourceLocation | None:
    """Return the file position of an op's location, or None when it has no single one.

    Fused and call-site locations (the link pass fuses the locations of the specs it links) are
    searched for their first file position.
    """
    try:
        file_location = ir.FileLineColLoc(location)
    except ValueError:
        file_location = None
    if file_location is not None:
        return SourceLocation(
            file_location.filename, file_location.start_line, file_location.start_col
        )
    try:
        fused = ir.FusedLoc(location)
    except ValueError:
        return None
    for inner in fused.locations:
        found = find_location(inner)
        if found is not None:
            return found
    return None


def parse_spec(text: str, source_name: str, context: ir.Context) -> ir.Operation:
    """Parse and verify spec text; ops carry `source_name:line:col` locations."""
    try:
        parsed = ir.Operation.parse(text, source_name=source_name, context=context)
    except ir.MLIRError as error:
        diagnostics = tuple(
            SpecDiagnostic(find_location(diagnostic.location), diagnostic.message)
            for diagnostic in error.error_diagnostics
        )
        raise SpecParseError(
            source_name, diagnostics or (SpecDiagnostic(None, error.message),)
        ) from error
    operation = parsed.operation
    if operation.name != "builtin.module":
        raise IreetuneError(
            f"{source_name} holds a '{operation.name}', not a module: not a tuning spec"
        )
    return operation


def read_spec(path: Path, context: ir.Context) -> ir.Operation:
    """Read and parse the spec at `path`; a missing or unreadable file is a one-line error."""
    return parse_spec(read_mlir_file(path, "spec", onnx_hint=""), str(path), context)


def list_block_ops(op: ir.Operation) -> list[ir.Operation]:
    """List the ops of the first block of an op's first region (a module's, a sequence's body)."""
    return [child.operation for child in op.regions[0].blocks[0].operations]


def list_modules(spec: ir.Operation) -> list[ir.Operation]:
    """List the spec's module and every module nested in it, outermost first."""
    found = [spec]
    for op in list_block_ops(spec):
        if op.name == "builtin.module":
            found.extend(list_modules(op))
    return found


def list_named_sequences(module: ir.Operation) -> list[ir.Operation]:
    """List the named sequences directly in `module`."""
    return [op for op in list_block_ops(module) if op.name == "transform.named_sequence"]


def find_entry_points(spec: ir.Operation) -> list[ir.Operation]:
    """Return every named sequence marked `iree_codegen.tuning_spec_entrypoint`, in order."""
    return [
        sequence
        for module in list_modules(spec)
        for sequence in list_named_sequences(module)
        if ENTRYPOINT_ATTR in sequence.attributes
    ]


def symbol_name(op: ir.Operation) -> str:
    """Return an op's `sym_name` (a module's, a named sequence's), or "" without one."""
    return ir.StringAttr(op.attributes["sym_name"]).value if "sym_name" in op.attributes else ""
