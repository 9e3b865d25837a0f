"""Read what a spec's matchers match and which configuration each applies.

A matcher is the first symbol of a `transform.foreach_match` pair. Its conditions are read from
the match ops in its body (following `transform.include` into helper sequences):

    %b, %m, %n, %k = transform.iree.match.contraction %root, lhs_type = f32, rhs_type = f32,
        output_type = f32, indexing_maps = [...] : !transform.any_op -> !transform.param<i64>
    transform.iree.match.dims_equal %m, [64] : !transform.param<i64>

(or the match op of another op family: `transform.iree.match.convolution`,
`transform.iree.match.online_attention`, or a `transform.iree.match.cast_compatible_dag_from_root`
holding a generic reduction), and its configuration from the `transform.param.constant` holding a
`#iree_codegen.compilation_info<...>`. Each family reads its own match op
(`OpFamily.read_pattern`) and says what a problem of it requires (`OpFamily.expected_pattern`), so
the static comparison with a dispatch's parsed root op is the same for every family; matchers
built from other ops are described but not evaluated.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, replace

from iree.compiler import ir
from iree.compiler.dialects import iree_codegen

from ireetune.problem.body_matcher import BODY_MATCHER_OPS, has_body_matcher_form
from ireetune.problem.family import MatchPattern, OpFamily, Problem
from ireetune.problem.registry import (
    FAMILIES,
    family_of,
    family_of_pattern,
    read_match_pattern,
    read_whole_matcher,
)
from ireetune.spec.source import (
    SourceLocation,
    find_entry_points,
    find_location,
    list_block_ops,
    symbol_name,
)

__all__ = ["MatchPattern"]

# The match ops some family reads.
_MATCH_OPS = frozenset(family.match_op.name for family in FAMILIES)
# Ops in a matcher body that bind handles or values and constrain nothing themselves.
_NEUTRAL_OPS = frozenset(
    {
        "transform.yield",
        "transform.param.constant",
        "transform.get_operand",
        "transform.get_result",
        "transform.include",
        "transform.iree.match.dims_equal",
    }
)


def _owner(pattern: MatchPattern) -> OpFamily:
    """Return the op family that read a pattern (its name: `contraction`, `attention`, ...)."""
    family = family_of_pattern(pattern)
    assert family is not None, f"no family reads {pattern.match_op}"
    return family


@dataclass(frozen=True)
class MatcherInfo:
    """One matcher/action pair of a spec and what it matches and applies."""

    name: str
    action: str
    module: str
    entry_point: str
    location: SourceLocation | None
    op_names: tuple[str, ...]
    pattern: MatchPattern | None
    other_conditions: tuple[str, ...]
    lowering_config: str | None
    translation_info: str | None
    other_params: tuple[str, ...]
    # Passes the entry point runs on the payload before matching (`Target.spec_prologue`).
    prologue: tuple[str, ...] = ()
    # (name, value) the action sets on the matched op's function (a CPU batch_mmt4d's target).
    function_attributes: tuple[tuple[str, str], ...] = ()

    @property
    def kind(self) -> str:
        """Name what the matcher matches: `contraction`, `convolution`, an op name list, or
        `unknown`."""
        if self.pattern is not None:
            return _owner(self.pattern).name
        if self.op_names:
            return " | ".join(self.op_names)
        return "unknown"

    @property
    def conditions(self) -> tuple[str, ...]:
        """List every condition the matcher checks, as readable text."""
        found = []
        if self.op_names:
            found.append("op name in [" + ", ".join(self.op_names) + "]")
        if self.pattern is not None:
            found.append(_owner(self.pattern).describe(self.pattern))
        return (*found, *self.other_conditions)


class MatchVerdict(enum.Enum):
    """Whether a matcher matches a root op, as far as a static comparison can tell."""

    HIT = "hit"
    MISS = "miss"
    UNKNOWN = "unknown"


def _symbol(attribute: ir.Attribute) -> str:
    return ir.FlatSymbolRefAttr(attribute).value


def _describe_condition(op: ir.Operation) -> str:
    if op.name == "transform.iree.match.cast_compatible_type":
        return f"a value of type {ir.TypeAttr(op.attributes['target_type']).value}"
    if op.name == "transform.iree.match.cast_compatible_dag_from_root":
        inner = [child.name for child in list_block_ops(op) if not child.name.endswith(".yield")]
        return "a DAG of " + ", ".join(inner)
    return f"checked by {op.name}"


@dataclass
class _Collected:
    op_names: list[str]
    pattern: MatchPattern | None
    other_conditions: list[str]
    compilation_infos: list[ir.Attribute]
    other_params: list[str]


def _collect(
    sequence: ir.Operation, table: ir.SymbolTable, found: _Collected, seen: set[str]
) -> None:
    body = list_block_ops(sequence)
    whole = read_whole_matcher(body)
    if whole is not None:
        # A matcher its family reads whole (an element-wise body matcher): its opening ops are
        # its pattern.
        found.pattern, taken = whole
        body = body[taken:]
    elif has_body_matcher_form(body):
        # A body matcher whose checks do not read back (loops checked only in part): what it
        # matches is the generic around the `linalg.yield`, not the yield; say it is not read.
        found.other_conditions.append(
            "a body matcher whose checks are not read back (its loop checks do not name every "
            "loop once, or no family claims what it checks)"
        )
        body = body[len(BODY_MATCHER_OPS) :]
    for op in body:
        if op.name == "transform.match.operation_name":
            found.op_names.extend(
                ir.StringAttr(a).value for a in ir.ArrayAttr(op.attributes["op_names"])
            )
        elif op.name in _MATCH_OPS:
            pattern = read_match_pattern(op, body)
            if pattern is not None:
                found.pattern = pattern
            else:
                found.other_conditions.append(_describe_condition(op))
        elif op.name == "transform.param.constant":
            value = op.attributes["value"]
            if iree_codegen.CompilationInfoAttr.isinstance(value):
                found.compilation_infos.append(value)
            else:
                found.other_params.append(str(value))
        elif op.name == "transform.include":
            callee = _symbol(op.attributes["target"])
            if callee not in seen:
                seen.add(callee)
                _collect(table[callee].operation, table, found, seen)
        elif op.name not in _NEUTRAL_OPS:
            found.other_conditions.append(_describe_condition(op))


def _function_attributes(
    matcher: ir.Operation, action: ir.Operation | None
) -> tuple[tuple[str, str], ...]:
    """Return what an action annotates the matched op's function with (a `transform.annotate`
    of a `transform.get_parent_op` result), each with the constant its matcher yields for it:
    the action's argument i is the matcher's yielded value i. Anything else (a value that is
    not a constant, an action found elsewhere) is not read."""
    yields = [op for op in list_block_ops(matcher) if op.name == "transform.yield"]
    if action is None or len(yields) != 1:
        return ()
    body = list_block_ops(action)
    parents = [op.results[0] for op in body if op.name == "transform.get_parent_op"]
    found = []
    for op in body:
        if op.name != "transform.annotate" or len(op.operands) < 2:
            continue
        param = op.operands[1].maybe_downcast()
        if not any(op.operands[0] == parent for parent in parents):
            continue
        if not isinstance(param, ir.BlockArgument) or param.arg_number >= len(yields[0].operands):
            continue
        source = yields[0].operands[param.arg_number].owner
        if (
            isinstance(source, ir.Operation | ir.OpView)
            and source.name == "transform.param.constant"
        ):
            name = ir.StringAttr(op.attributes["name"]).value
            found.append((name, str(source.attributes["value"])))
    return tuple(found)


def _read_matcher(
    name: str, action: str, table: ir.SymbolTable, module: str, entry_point: str
) -> MatcherInfo:
    sequence = table[name].operation
    found = _Collected([], None, [], [], [])
    _collect(sequence, table, found, {name})
    lowering_config = translation_info = None
    if found.compilation_infos:
        info = iree_codegen.CompilationInfoAttr(found.compilation_infos[0])
        lowering_config = str(info.lowering_config)
        translation_info = str(info.translation_info)
    on_function = _function_attributes(
        sequence, table[action].operation if action in table else None
    )
    return MatcherInfo(
        name=name,
        action=action,
        module=module,
        entry_point=entry_point,
        location=find_location(sequence.location),
        op_names=tuple(found.op_names),
        pattern=found.pattern,
        other_conditions=tuple(found.other_conditions),
        lowering_config=lowering_config,
        translation_info=translation_info,
        # A constant the action sets on the function is listed as that, not as a param.
        other_params=tuple(p for p in found.other_params if p not in dict(on_function).values()),
        function_attributes=on_function,
    )


def list_matchers(spec: ir.Operation) -> list[MatcherInfo]:
    """List every matcher/action pair of every entry point's `transform.foreach_match`, in order.

    The order is the order IREE tries them in: entry points in spec order, pairs in
    `transform.foreach_match` order.
    """
    matchers = []
    for entry in find_entry_points(spec):
        module = entry.parent
        assert module is not None and module.name == "builtin.module"
        table = ir.SymbolTable(module)
        module_name = symbol_name(module)
        entry_name = ir.StringAttr(entry.attributes["sym_name"]).value
        qualified_entry = f"{module_name}::{entry_name}" if module_name else entry_name
        prologue: list[str] = []
        for op in list_block_ops(entry):
            if op.name == "transform.apply_registered_pass":
                prologue.append(ir.StringAttr(op.attributes["pass_name"]).value)
            if op.name != "transform.foreach_match":
                continue
            pairs = zip(
                ir.ArrayAttr(op.attributes["matchers"]),
                ir.ArrayAttr(op.attributes["actions"]),
                strict=True,
            )
            for matcher, action in pairs:
                info = _read_matcher(
                    _symbol(matcher), _symbol(action), table, module_name, qualified_entry
                )
                matchers.append(replace(info, prologue=tuple(prologue)))
    return matchers


def match_problem(matcher: MatcherInfo, problem: Problem) -> MatchVerdict:
    """Compare a matcher's conditions with a problem's shape and types, through its family."""
    if matcher.op_names and problem.op_name not in matcher.op_names:
        return MatchVerdict.MISS
    pattern = matcher.pattern
    if pattern is None:
        return MatchVerdict.UNKNOWN
    expected = family_of(problem).expected_pattern(problem)
    if pattern.match_op != expected.match_op:
        return MatchVerdict.MISS
    same_types = pattern.types == expected.types
    same_maps = not pattern.indexing_maps or pattern.indexing_maps == expected.indexing_maps
    same_sizes = len(pattern.sizes) == len(expected.sizes) and all(
        required is None or required == actual
        for required, actual in zip(pattern.sizes, expected.sizes, strict=True)
    )
    same_body = pattern.body == expected.body
    if not (same_types and same_maps and same_sizes and same_body):
        return MatchVerdict.MISS
    return MatchVerdict.UNKNOWN if matcher.other_conditions else MatchVerdict.HIT


def pick_winner(hits: Sequence[MatcherInfo]) -> tuple[MatcherInfo, str]:
    """Return the matcher whose configuration IREE keeps among matchers that all match an op.

    Within one `transform.foreach_match` the first matcher that succeeds is applied and the rest
    are skipped. Entry points run one after another (a spec linked with `transform.include`s), and
    a later one annotates the op again, so the last entry point with a hit wins.
    """
    assert hits, "no hits to choose from"
    last_entry = hits[-1].entry_point
    winner = next(m for m in hits if m.entry_point == last_entry)
    if all(m.entry_point == last_entry for m in hits):
        reason = (
            "it comes first in the same transform.foreach_match, which applies only the first "
            "matcher that succeeds"
        )
    else:
        reason = f"its entry point @{last_entry} runs after the others and annotates the op last"
    return winner, reason


@dataclass(frozen=True)
class DispatchRoot:
    """A model's dispatch and its parsed root op (None when no op family parses it)."""

    index: int
    name: str
    root_op_name: str
    problem: Problem | None


@dataclass(frozen=True)
class DispatchCoverage:
    """Which matcher configures a dispatch: the one IREE applies, and any it shadows."""

    dispatch: DispatchRoot
    winner: MatcherInfo | None
    shadowed: tuple[MatcherInfo, ...]
    undecided: tuple[MatcherInfo, ...]
    flop_share: float | None


# A dispatch with at least this share of the model's tunable FLOPs is hot.
HOT_FLOP_SHARE = 0.05


def compute_coverage(
    matchers: Sequence[MatcherInfo], dispatches: Sequence[DispatchRoot]
) -> list[DispatchCoverage]:
    """Say for each dispatch which matcher IREE applies (the first hit) and which it shadows.

    A matcher whose verdict is unknown before the first hit makes the winner undecided: it is
    listed in `undecided` and no winner is claimed.
    """
    total_flops = sum(d.problem.flops for d in dispatches if d.problem is not None)
    coverage = []
    for dispatch in dispatches:
        hits: list[MatcherInfo] = []
        undecided: list[MatcherInfo] = []
        if dispatch.problem is not None:
            for matcher in matchers:
                verdict = match_problem(matcher, dispatch.problem)
                if verdict is MatchVerdict.HIT:
                    hits.append(matcher)
                elif verdict is MatchVerdict.UNKNOWN and not hits:
                    undecided.append(matcher)
        else:
            undecided = [
                m
                for m in matchers
                if m.pattern is None and (not m.op_names or dispatch.root_op_name in m.op_names)
            ]
        winner = pick_winner(hits)[0] if hits and not undecided else None
        shadowed = tuple(m for m in hits if m is not winner) if winner else ()
        share = dispatch.problem.flops / total_flops if dispatch.problem and total_flops else None
        coverage.append(DispatchCoverage(dispatch, winner, shadowed, tuple(undecided), share))
    return coverage


def render_matchers(matchers: Sequence[MatcherInfo]) -> str:
    """Render the matcher list of `ireetune spec show`."""
    if not matchers:
        return "no matchers: this spec configures nothing\n"
    lines = []
    for position, matcher in enumerate(matchers):
        where = f" ({matcher.location})" if matcher.location else ""
        module = f"@{matcher.module}::" if matcher.module else ""
        lines.append(f"{position}. {module}@{matcher.name} -> @{matcher.action}{where}")
        lines.append(f"   matches: {matcher.kind}")
        if matcher.prologue:
            lines.append(f"   after the entry point runs: {', '.join(matcher.prologue)}")
        lines.extend(f"     {condition}" for condition in matcher.conditions)
        if matcher.lowering_config:
            lines.append(f"   lowering_config: {matcher.lowering_config}")
            lines.append(f"   translation_info: {matcher.translation_info}")
        lines.extend(f"   param: {param}" for param in matcher.other_params)
        lines.extend(f"   sets on its function: {n} = {v}" for n, v in matcher.function_attributes)
        if not matcher.lowering_config and not matcher.other_params:
            lines.append("   applies: no compilation_info found in the matcher")
    return "\n".join(lines) + "\n"


def render_coverage(coverage: Sequence[DispatchCoverage], matchers: Sequence[MatcherInfo]) -> str:
    """Render which matcher hits which dispatch and which dispatches no matcher covers."""
    lines = ["dispatches:"]
    for item in coverage:
        dispatch = item.dispatch
        label = dispatch.problem.signature if dispatch.problem else dispatch.root_op_name
        share = f" {item.flop_share:.0%} of FLOPs" if item.flop_share is not None else ""
        if item.winner is not None:
            verdict = f"configured by @{item.winner.name}"
            if item.shadowed:
                verdict += " (shadows " + ", ".join(f"@{m.name}" for m in item.shadowed) + ")"
        elif item.undecided:
            verdict = (
                "undecided: "
                + ", ".join(f"@{m.name}" for m in item.undecided)
                + " cannot be evaluated statically"
            )
        else:
            verdict = "NOT COVERED"
        lines.append(f"  {dispatch.index}: {dispatch.name} [{label}]{share}: {verdict}")
    used = {item.winner.name for item in coverage if item.winner}
    unused = [m.name for m in matchers if m.name not in used]
    uncovered = [c for c in coverage if c.winner is None and not c.undecided]
    lines.append("uncovered dispatches, by cost:")
    uncovered.sort(key=lambda c: -(c.flop_share or 0.0))
    for item in uncovered:
        hot = item.flop_share is not None and item.flop_share >= HOT_FLOP_SHARE
        cost = (
            f"{item.flop_share:.0%} of FLOPs"
            if item.flop_share is not None
            else "cost unknown (no tunable op family)"
        )
        lines.append(
            f"  {'HOT ' if hot else ''}{item.dispatch.index}: {item.dispatch.name} ({cost})"
        )
    if not uncovered:
        lines.append("  none")
    if unused:
        lines.append("matchers that configure no dispatch: " + ", ".join(f"@{n}" for n in unused))
    return "\n".join(lines) + "\n"
