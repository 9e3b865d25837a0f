"""Link several tuning specs into one with `iree-opt --iree-codegen-link-tuning-specs`.

Words, used the same way everywhere (docs/spec_tooling.md):
- *combine*: nest the input specs, each as a named inner module, in one outer module marked
  `transform.with_named_sequence`; that is the input the link pass expects.
- *link*: run the compiler's link pass on the combined module, which gives it one `@__kernel_config`
  entry point.
- *merge*: the link pass's own term for the form it picks when every inner spec has
  `iree_codegen.tuning_spec_with_default_entrypoint` and one `transform.foreach_match`: it flattens
  the specs into one module whose `@__kernel_config` holds one `transform.foreach_match` listing
  every matcher in link order. Otherwise it keeps the inner modules and calls their entry points one
  after another with `transform.include` (*included* form).

Before combining, clashing symbol names are renamed here (with every reference), because the link
pass renames only the symbols that `transform.foreach_match` names and would leave a
`transform.include` of a renamed helper pointing at another spec's helper.
"""

from __future__ import annotations

import enum
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from iree.compiler import ir

from ireetune.compile.driver import CompileRequest, CompilerTool, run_compile
from ireetune.core.errors import IreetuneError
from ireetune.core.output_paths import write_output
from ireetune.spec.check import WITH_NAMED_SEQUENCE_ATTR, check_anatomy
from ireetune.spec.inspect import MatcherInfo, list_matchers, pick_winner
from ireetune.spec.source import (
    ENTRYPOINT_ATTR,
    find_entry_points,
    list_block_ops,
    parse_spec,
    read_spec,
    symbol_name,
)


class LinkForm(enum.Enum):
    """The shape of a linked spec, which decides which of two overlapping matchers wins."""

    SINGLE = "single"
    MERGED = "merged"
    INCLUDED = "included"


@dataclass(frozen=True)
class SpecUnit:
    """One spec to link: a top-level module from an input file, named for the combined module."""

    label: str
    module_name: str
    module: ir.Operation


@dataclass(frozen=True)
class Rename:
    """A symbol renamed before linking because another spec already used its name."""

    spec: str
    old_name: str
    new_name: str


@dataclass(frozen=True)
class Overlap:
    """Matchers from the linked specs that match the same ops, and the one IREE keeps."""

    description: str
    matchers: tuple[tuple[str, str], ...]
    winner: tuple[str, str]
    reason: str


@dataclass(frozen=True)
class LinkResult:
    """What linking wrote and what a user should know about it."""

    output_path: Path
    form: LinkForm
    spec_labels: tuple[str, ...]
    matcher_count: int
    renames: tuple[Rename, ...]
    overlaps: tuple[Overlap, ...]
    compiler_warnings: tuple[str, ...]


def split_into_units(label: str, spec: ir.Operation) -> list[SpecUnit]:
    """Split an input into the specs it holds: itself, or its inner modules if it is combined.

    A combined input (an outer module whose entry points all live in nested modules, such as a
    spec linked in included form or combined by hand) contributes each inner module.
    """
    top_entries = [op for op in list_block_ops(spec) if ENTRYPOINT_ATTR in op.attributes]
    inner_modules = [op for op in list_block_ops(spec) if op.name == "builtin.module"]
    if top_entries and any(
        op.name == "transform.include" for entry in top_entries for op in list_block_ops(entry)
    ):
        # A spec linked in included form: its top entry point only includes the inner ones.
        top_entries = []
    if top_entries or not inner_modules:
        return [SpecUnit(label, symbol_name(spec), spec)]
    return [
        SpecUnit(f"{label}::@{symbol_name(inner) or index}", symbol_name(inner), inner)
        for index, inner in enumerate(inner_modules)
        if find_entry_points(inner)
    ]


def assign_module_names(units: Sequence[SpecUnit]) -> list[str]:
    """Name each unit's inner module: its own name if free, else its file's stem, made unique.

    The link pass skips unnamed inner modules, so every one needs a name.
    """
    taken: set[str] = set()
    names = []
    for unit in units:
        base = unit.module_name or re.sub(
            r"[^A-Za-z0-9_]", "_", Path(unit.label.split("::")[0]).stem
        )
        name, suffix = base or "spec", 1
        while name in taken:
            suffix += 1
            name = f"{base}_{suffix}"
        taken.add(name)
        names.append(name)
    return names


def make_symbols_unique(units: Sequence[SpecUnit]) -> list[Rename]:
    """Rename named sequences that clash across specs, with all their uses, in place.

    Entry points are left alone: the link pass replaces or renames them itself.
    """
    taken: set[str] = set()
    renames = []
    for unit in units:
        for op in list_block_ops(unit.module):
            if op.name != "transform.named_sequence" or ENTRYPOINT_ATTR in op.attributes:
                continue
            name = symbol_name(op)
            new_name, suffix = name, 1
            while new_name in taken:
                suffix += 1
                new_name = f"{name}_{suffix}"
            if new_name != name:
                with unit.module.context:
                    ir.SymbolTable.set_symbol_name(op, new_name)
                    ir.SymbolTable.replace_all_symbol_uses(name, new_name, unit.module)
                renames.append(Rename(unit.label, name, new_name))
            taken.add(new_name)
    return renames


def combine_specs(units: Sequence[SpecUnit], context: ir.Context) -> ir.Module:
    """Nest specs as uniquely named inner modules of one module, the link pass's input.

    module attributes {transform.with_named_sequence} {
      module @tuned_a attributes {transform.with_named_sequence, ...} { ... }
      module @tuned_b attributes {transform.with_named_sequence, ...} { ... }
    }
    """
    with context, ir.Location.unknown():
        combined = ir.Module.create()
        combined.operation.attributes[WITH_NAMED_SEQUENCE_ATTR] = ir.UnitAttr.get()
        for unit, name in zip(units, assign_module_names(units), strict=True):
            inner = unit.module.clone()
            inner.attributes["sym_name"] = ir.StringAttr.get(name)
            combined.body.append(inner)
    assert combined.operation.verify(), "combined spec does not verify"
    return combined


def _linked_form(linked: ir.Operation) -> LinkForm:
    kernel_configs = [op for op in list_block_ops(linked) if symbol_name(op) == "__kernel_config"]
    assert len(kernel_configs) == 1, "the link pass writes exactly one @__kernel_config"
    body_ops = {op.name for op in list_block_ops(kernel_configs[0])}
    return LinkForm.INCLUDED if "transform.include" in body_ops else LinkForm.MERGED


def find_overlaps(matchers: Sequence[MatcherInfo], origin: dict[str, str]) -> list[Overlap]:
    """Group matchers that match the same ops and say which one IREE applies.

    `origin` maps a matcher name in the linked spec to the input it came from. Matchers are
    compared by their conditions (same op kind, shapes, element types and maps), which finds
    duplicates; two different conditions that happen to accept the same op are not detected.
    """
    groups: dict[tuple[str, ...], list[MatcherInfo]] = {}
    for matcher in matchers:
        groups.setdefault(matcher.conditions, []).append(matcher)
    overlaps = []
    for key, members in groups.items():
        if len(members) < 2:
            continue
        winner, reason = pick_winner(members)

        def named(m: MatcherInfo) -> tuple[str, str]:
            return (origin.get(m.name, "?"), m.name)

        overlaps.append(
            Overlap(
                description="; ".join(key) or "no conditions (matches every op)",
                matchers=tuple(named(m) for m in members),
                winner=named(winner),
                reason=reason,
            )
        )
    return overlaps


def link_spec_files(
    spec_paths: Sequence[Path], output_path: Path, timeout_s: float = 60.0
) -> LinkResult:
    """Combine and link spec files into `output_path`; report renames and overlapping matchers."""
    if not spec_paths:
        raise IreetuneError("give at least one spec to link")
    context = ir.Context()
    units: list[SpecUnit] = []
    # The parsed files own the inner modules that units point into; keep them alive until the end.
    parsed_specs: list[ir.Operation] = []
    for path in spec_paths:
        spec = read_spec(path, context)
        parsed_specs.append(spec)
        problems = check_anatomy(spec)
        if problems:
            raise IreetuneError(
                f"{path} is not a valid tuning spec: {problems[0]} (run 'ireetune spec check')"
            )
        units.extend(split_into_units(str(path), spec))
    if not units:
        raise IreetuneError("the inputs hold no tuning spec with an entry point")
    renames = make_symbols_unique(units)
    labels = tuple(unit.label for unit in units)
    warnings: tuple[str, ...] = ()
    if len(units) == 1:
        linked_text = str(units[0].module)
    else:
        combined = combine_specs(units, context)
        with tempfile.TemporaryDirectory(prefix="ireetune_link_") as folder:
            combined_path = Path(folder) / "combined.mlir"
            linked_path = Path(folder) / "linked.mlir"
            combined_path.write_text(str(combined))
            result = run_compile(
                CompileRequest(
                    combined_path,
                    linked_path,
                    phase_flags=("--iree-codegen-link-tuning-specs",),
                    timeout_s=timeout_s,
                    tool=CompilerTool.OPT,
                )
            )
            if not result.ok:
                raise IreetuneError(f"iree-opt could not link the specs: {result.error_line}")
            linked_text = linked_path.read_text()
            warnings = tuple(
                line.split("warning: ", 1)[1]
                for line in result.stderr.splitlines()
                if "warning: " in line
            )
    linked = parse_spec(linked_text, str(output_path), context)
    form = LinkForm.SINGLE if len(units) == 1 else _linked_form(linked)
    matchers = list_matchers(linked)
    origin = _matcher_origins(units, matchers, form)
    overlaps = find_overlaps(matchers, origin)
    output_path.parent.mkdir(parents=True, exist_ok=True)
    write_output(output_path, linked_text)
    return LinkResult(
        output_path, form, labels, len(matchers), tuple(renames), tuple(overlaps), warnings
    )


def _matcher_origins(
    units: Sequence[SpecUnit], linked: Sequence[MatcherInfo], form: LinkForm
) -> dict[str, str]:
    """Map each matcher name of the linked spec to the input it came from."""
    if form is LinkForm.MERGED:
        # The merged transform.foreach_match lists the inputs' pairs in link order.
        sources = [unit.label for unit in units for _ in list_matchers(unit.module)]
        assert len(sources) == len(linked), "merged spec lost or gained matchers"
        return {matcher.name: label for matcher, label in zip(linked, sources, strict=True)}
    if form is LinkForm.SINGLE:
        return {matcher.name: units[0].label for matcher in linked}
    labels = dict(zip(assign_module_names(units), (unit.label for unit in units), strict=True))
    return {m.name: labels.get(m.module, m.module) for m in linked}


def render_link_result(result: LinkResult) -> str:
    """Render what `ireetune spec link` did, for people."""
    lines = [
        f"linked {len(result.spec_labels)} spec(s) into {result.output_path} "
        f"({result.form.value} form, {result.matcher_count} matchers)",
    ]
    lines.extend(f"  link order {i}: {label}" for i, label in enumerate(result.spec_labels))
    lines.extend(
        f"renamed @{r.old_name} to @{r.new_name} in {r.spec} (name taken by an earlier spec)"
        for r in result.renames
    )
    lines.extend(f"compiler warning: {w}" for w in result.compiler_warnings)
    for overlap in result.overlaps:
        members = ", ".join(f"@{name} ({spec})" for spec, name in overlap.matchers)
        spec, name = overlap.winner
        lines.append(f"overlap: {members} match the same ops [{overlap.description}]")
        lines.append(f"  @{name} from {spec} wins: {overlap.reason}")
    if not result.overlaps:
        lines.append("no overlapping matchers")
    return "\n".join(lines) + "\n"
