"""Kin dispatches: the same op on the same parallel sizes, differing only in what it reduces.

A DenseNet's 1x1 convolutions all read 128 output channels on the same image, and differ only
in how many input channels they sum (densenet121: 24 such dispatches at 14x14, 12 at 28x28, 5 at
56x56, together 39% of the model on the 2-core machine, each 0.5-1.5%). Tuned one by one, no
dispatch's gain could be seen in the model's timing; and the hot set, ranked dispatch by
dispatch, often held none of a group at all. So dispatches are grouped by their kin key (family,
kind, element types, indexing maps and the sizes of their parallel loops), a group is selected
and scheduled by its whole share, its largest dispatch is tuned, and each of its candidates is
tried in the model with the same knobs on every kin of the group, rendered for each kin's own
sizes by its space (`extend_with_kin`), on each kin whose reduced loops its tiles divide.
Only targets whose configurations render from knobs alone (the CPU, Vulkan) group kin at all:
elsewhere one member would be tuned for the group and the others never. The model-level trial,
which compares the whole model's outputs, decides as for any candidate; the dispatch's own first
candidate stays first, so that the variant joining every dispatch's first candidate joins their
own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from iree.compiler import ir
from iree.compiler.dialects import iree_codegen

from ireetune.core.candidate import Knobs
from ireetune.core.errors import IreetuneError
from ireetune.core.files import write_text_atomically
from ireetune.core.records import CandidateRecord
from ireetune.core.target import SpaceRequest, Target, space_for
from ireetune.frontend.dispatches import parse_module, read_mlir_file
from ireetune.model.hot import DispatchProfile
from ireetune.problem.family import Problem, map_dim_positions
from ireetune.problem.root_op import find_root_op, parse_problem
from ireetune.spec.builder import MatcherEntry, build_spec, render_spec

# The families whose last indexing map is their result's (attention's last is its running sum's,
# which leaves out the value width it writes).
RESULT_LAST_FAMILIES = frozenset(
    {"contraction", "batch_contraction", "convolution", "reduction", "elementwise"}
)

# Where a model run writes the extended specs, in its run folder.
KIN_FOLDER = "kin"


def kin_key(problem: Problem) -> str | None:
    """Name the group of problems a configuration of `problem` carries over to: its family, kind,
    element types, indexing maps and parallel loop sizes, its reduced loops' sizes left out
    (`?`). None for a problem whose result map does not say which loops it reduces (no maps,
    or a result that is no plain loop), or that reduces nothing."""
    maps = tuple(problem.indexing_maps)
    if problem.family not in RESULT_LAST_FAMILIES:
        return None
    positions = map_dim_positions(maps[-1]) if maps else [-1]
    if -1 in positions:
        return None
    parallel = set(positions)
    sizes = [str(size) if loop in parallel else "?" for loop, size in enumerate(problem.loop_sizes)]
    if "?" not in sizes:
        return None  # Nothing is reduced: kin would be the same problem.
    # The signature without its sizes: the kind and the element types.
    named = "_".join(p for p in problem.signature.split("_") if not re.fullmatch(r"[\dx]+", p))
    return "|".join([problem.family, named, "x".join(sizes), *maps])


def read_problem(benchmark_path: Path) -> Problem:
    """Parse the root op's problem of a dumped dispatch benchmark."""
    return read_dispatch(benchmark_path)[0]


def read_dispatch(benchmark_path: Path) -> tuple[Problem, str]:
    """Parse the root op's problem of a dumped dispatch benchmark, and its executable target as
    IR text ("" without one)."""
    context = ir.Context()
    module = parse_module(read_mlir_file(benchmark_path), context, benchmark_path)
    with context:
        variants = iree_codegen.get_executable_variant_ops(module)
        target = str(variants[0].attributes["target"]) if len(variants) == 1 else ""
        return parse_problem(find_root_op(module)), target


@dataclass(frozen=True)
class KinGroup:
    """A tuned dispatch's kin: their distinct problems (not the dispatch's own), and the names
    of every dispatch they hold."""

    problems: tuple[Problem, ...]
    names: tuple[str, ...]


def find_kin_profiles(
    hot: DispatchProfile, ranked: Sequence[DispatchProfile]
) -> list[DispatchProfile]:
    """Return the tunable dispatches of `hot`'s kin key whose problem is not `hot`'s."""
    if hot.kin is None:
        return []
    return [p for p in ranked if p.tunable and p.kin == hot.kin and p.problem != hot.problem]


def find_kin(hot: DispatchProfile, ranked: Sequence[DispatchProfile]) -> KinGroup:
    """Return `hot`'s kin: their distinct problems (parsed) and their dispatches' names."""
    kin = find_kin_profiles(hot, ranked)
    firsts = {p.problem: p for p in reversed(kin)}
    problems = tuple(read_problem(firsts[name].benchmark_path) for name in sorted(firsts))
    return KinGroup(problems, tuple(p.name for p in kin))


def _tiles_fit(problem: Problem, compilation_info: str) -> bool:
    """Say whether every tile list of a configuration (`name = [..]`, one per loop) tiles the
    problem's reduced loops by sizes that divide them: the spaces offer only such reduction
    tiles (the CPU contraction's `vec_k` divides K), and a kin's K may not be the tuned one's."""
    rank = len(problem.loop_sizes)
    positions = map_dim_positions(problem.indexing_maps[-1])
    reduced = [loop for loop in range(rank) if loop not in positions]
    for listed in re.findall(r"=\s*\[([\d,\s]*)\]", compilation_info):
        tiles = [int(t) for t in listed.split(",") if t.strip()]
        if len(tiles) != rank:
            continue
        if any(tiles[loop] and problem.loop_sizes[loop] % tiles[loop] for loop in reduced):
            return False
    return True


def write_kin_spec(
    target: Target,
    own: Problem,
    kin: Sequence[Problem],
    knobs: Knobs,
    path: Path,
    executable_target: str = "",
) -> int:
    """Write the spec that gives `own` and each problem of `kin` the configuration of `knobs`,
    rendered for its own sizes by its family's space, in `own`'s executable target (IR text; the
    model's dispatches share it: a CPU batch_mmt4d's codegen repeats it on its function); leave
    out a kin whose reduced loops the tiles do not divide. Return how many kin it configures."""
    context = ir.Context()
    with context:
        variant_target = ir.Attribute.parse(executable_target) if executable_target else None
    entries = []
    for problem in (own, *kin):
        request = SpaceRequest(problem, variant_target, None, 0)
        configuration = space_for(target, problem).configuration_for(request, knobs, context)
        if problem is own or _tiles_fit(problem, configuration.compilation_info):
            entries.append(MatcherEntry.of_configuration(problem, configuration))
    prologue = tuple(
        dict.fromkeys(name for entry in entries for name in target.spec_prologue(entry.problem))
    )
    write_text_atomically(path, render_spec(build_spec(entries, context, prologue)))
    return len(entries) - 1


@dataclass(frozen=True)
class KeptCandidate:
    """A tuned dispatch's candidate kept for the model: its spec, its knobs, and whether it was
    faster than the default alone (only a gain is worth carrying to kin)."""

    spec: Path
    knobs: Knobs | None
    faster_alone: bool

    @classmethod
    def of(cls, record: CandidateRecord, folder: Path, baseline_ms: float) -> KeptCandidate:
        """Return a measured candidate of a dispatch run in `folder` whose default took
        `baseline_ms`."""
        faster = record.median_ms is not None and 0 < record.median_ms < baseline_ms
        return cls(folder / record.spec_path, record.knobs, faster)


@dataclass(frozen=True)
class Extended:
    """The specs the model tries for a tuned dispatch, the kept candidate each comes from (its
    index), what to say about them (None: nothing was extended, nothing to say) and the kin
    dispatches they were extended to."""

    specs: list[Path]
    sources: list[int]
    note: str | None = None
    kin_names: tuple[str, ...] = ()

    def note_kin(self, tuned: str, notes: dict[str, str]) -> None:
        """Say, in `notes` (a dispatch's note in the report), of each kin the specs were extended
        to that `tuned`'s candidates are tried on it; a note said already stays."""
        for kin in self.kin_names:
            notes.setdefault(
                kin, f"not tuned alone: {tuned}'s candidates are tried on it (its kin)"
            )


def extend_with_kin(
    target: Target,
    hot: DispatchProfile,
    ranked: Sequence[DispatchProfile],
    kept: Sequence[KeptCandidate],
    folder: Path,
) -> Extended:
    """Return the specs the model tries for a tuned dispatch: its own first candidate, then each
    kept candidate that was faster than the default alone with its knobs on the dispatch and on
    the kin whose reduced loops its tiles divide (`folder/<name>_c<rank>_kin.mlir`), then its
    other kept specs. Only the kept specs when the target renders no configuration without its
    dispatch, nothing is kin, no candidate was faster alone (a loss carried to every kin only
    slows the model more: densenet121's 0.455x candidate on twelve kin), or no candidate's
    knobs carry to a kin (said in the note)."""
    own = Extended([c.spec for c in kept], list(range(len(kept))))
    gains = [rank for rank, c in enumerate(kept) if c.faster_alone and c.knobs is not None]
    if not target.traits.renders_without_dispatch or not gains or hot.kin is None:
        return own
    try:
        group = find_kin(hot, ranked)
        problem, executable_target = read_dispatch(hot.benchmark_path)
    except IreetuneError as error:
        return replace(own, note=f"its candidates were not carried over to its kin: {error}")
    if not group.problems:
        return own
    folder.mkdir(parents=True, exist_ok=True)
    extended, sources, failures = [], [], []
    for rank in gains:
        knobs = kept[rank].knobs
        assert knobs is not None
        path = folder / f"{hot.name.replace('$', '_')}_c{rank}_kin.mlir"
        try:
            carried = write_kin_spec(
                target, problem, group.problems, knobs, path, executable_target
            )
        except (IreetuneError, ir.MLIRError) as error:
            failures.append(str(error).splitlines()[0] if str(error) else type(error).__name__)
            continue
        if carried:
            extended.append(path)
            sources.append(rank)
    if not extended:
        why = f": {failures[0]}" if failures else " (their tiles do not divide the kin's sizes)"
        return replace(own, note=f"its candidates were not carried over to its kin{why}")
    note = (
        f"its {len(extended)} candidate(s) faster alone also tried on its {len(group.names)} kin "
        f"dispatch(es) (same op and parallel sizes, other reduced sizes: "
        f"{len(group.problems)} problem(s))"
    )
    # The own winner stays first, so that every variant joining the dispatches' first
    # candidates joins their own; the carried ones come next.
    specs = [own.specs[0], *extended, *own.specs[1:]]
    return Extended(specs, [0, *sources, *own.sources[1:]], note, group.names)
