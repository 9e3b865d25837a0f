"""Where a model's time goes: invocation counts, per-dispatch shares, the hot set to tune."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ireetune.core.errors import IreetuneError

_DISPATCH_SITE = re.compile(r"stream\.cmd\.dispatch @([\w$.-]+)::")
# A line that opens or closes an op of the program's module (its body is indented further; a
# block's label, `^bb1:`, is not an op).
_TOP_LEVEL_OP = re.compile(r"  (?:[a-z_]+\.[\w.]+|\})")


def count_dispatch_invocations(program: Path) -> Counter[str]:
    """Count the dispatch sites of each executable in one run of the model.

    `program` is the model compiled to its stream phase or later, up to its configured
    executables (`dump_dispatches` writes one): each `stream.cmd.dispatch @exe::...` is one
    launch per model run. A site in a `util.initializer` runs once, when the model loads, not in
    a run: an executable launched only there counts 0 (a data-tiled model's weights are packed
    there; GoogLeNet under data tiling has 111 such executables of 230). Dispatches inside loops
    of the program would be undercounted; the models this tool targets are straight-line.
    """
    try:
        text = program.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise IreetuneError(f"cannot count the dispatches of {program}: {error}") from None
    counts: Counter[str] = Counter()
    at_load: set[str] = set()
    in_initializer = False
    for line in text.splitlines():
        if _TOP_LEVEL_OP.match(line):
            in_initializer = line.startswith("  util.initializer")
        elif "stream.cmd.dispatch" in line:
            names = _DISPATCH_SITE.findall(line)
            (at_load.update if in_initializer else counts.update)(names)
    for name in at_load - set(counts):
        counts[name] = 0
    return counts


@dataclass(frozen=True)
class DispatchProfile:
    """One dispatch of the model: what it computes, how long one launch takes, how many launches."""

    name: str
    benchmark_path: Path
    problem: str
    tunable: bool
    dispatch_ms: float | None
    invocations: int
    # The kin key of its problem (model/kin.py): dispatches that differ only in the sizes they
    # reduce share it, and one tuned dispatch's candidates are tried on all of them.
    kin: str | None = None
    # Its problem's floating-point operations and the bytes its operands occupy
    # (model/static_rank.problem_work): 0 where unknown (not tunable, or an older profile.json).
    flops: int = 0
    bytes: int = 0

    @property
    def total_ms(self) -> float:
        return (self.dispatch_ms or 0.0) * self.invocations

    @property
    def group(self) -> str:
        """Name what one tuned dispatch configures: its kin, or else its problem (a dispatch
        that cannot be tuned is a group of its own)."""
        return self.kin or (self.problem if self.tunable else self.name)


@dataclass(frozen=True)
class HotSet:
    """The dispatches to tune, and how much of the model's measured time the profile explains."""

    ranked: tuple[DispatchProfile, ...]
    selected: tuple[DispatchProfile, ...]
    model_ms: float
    explained_ms: float
    covered_ms: float

    @property
    def unexplained_ms(self) -> float:
        return self.model_ms - self.explained_ms


def select_hot_dispatches(
    profiles: Sequence[DispatchProfile],
    model_ms: float,
    coverage: float,
    max_dispatches: int,
    weight: Callable[[DispatchProfile], float] | None = None,
) -> HotSet:
    """Rank dispatches by share of model time; pick tunable ones until `coverage` is reached,
    the groups that take most of it (all their dispatches together) first; with `weight`, the
    groups whose time times their largest dispatch's weight (the share of its time tuning is
    expected to cut: model/headroom.py) is largest first.

    Coverage counts every dispatch's time, tunable or not, so an untunable hot dispatch is
    visible in the report rather than silently skipped. Problems that occur in several dispatches
    are selected once (the spec for one problem configures all of them), and so are kin
    (model/kin.py: one dispatch's candidates are tried on all of them).
    """
    ranked = sorted(profiles, key=lambda p: (-p.total_ms, p.name))
    explained = sum(p.total_ms for p in ranked)
    basis = max(model_ms, explained)
    selected: list[DispatchProfile] = []
    seen_groups: set[str] = set()
    covered = 0.0
    # Groups by their whole time first (a group of many small dispatches can outweigh one large).
    group_ms: dict[str, float] = {}
    for profile in ranked:
        group_ms[profile.group] = group_ms.get(profile.group, 0.0) + profile.total_ms
    group_weight: dict[str, float] = {}
    for profile in ranked:
        # `ranked` runs from the largest dispatch down: a group's first is its largest.
        group_weight.setdefault(profile.group, weight(profile) if weight else 1.0)

    def order(p: DispatchProfile) -> tuple[float, float, str]:
        return (-group_ms[p.group] * group_weight[p.group], -p.total_ms, p.name)

    for profile in sorted(ranked, key=order):
        if covered >= coverage * basis or len(selected) >= max_dispatches:
            break
        covered += profile.total_ms
        if not profile.tunable or profile.group in seen_groups:
            continue
        seen_groups.add(profile.group)
        selected.append(profile)
    # Later occurrences of a selected problem, and its kin, are covered by its specs too.
    covered_ms = sum(p.total_ms for p in ranked if p.tunable and p.group in seen_groups)
    return HotSet(tuple(ranked), tuple(selected), model_ms, explained, covered_ms)
