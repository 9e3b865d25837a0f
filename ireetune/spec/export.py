"""Build one tuning spec from the database's best results (`ireetune db export --format spec`)."""

from __future__ import annotations

from collections.abc import Sequence

from iree.compiler import ir

from ireetune.core.errors import IreetuneError
from ireetune.core.target import needs_more_than_compilation_info, space_for
from ireetune.database.exchange import problem_from_key
from ireetune.database.store import StoredResult, parse_config_key
from ireetune.spec.builder import MatcherEntry, build_spec, render_spec
from ireetune.targets import parse_target


def render_linked_spec(results: Sequence[StoredResult]) -> str:
    """Build one tuning spec with a matcher for the best verified config of each problem."""
    if not results:
        raise IreetuneError("no verified result to export")
    targets = {r.key.target for r in results}
    if len(targets) > 1:
        raise IreetuneError(
            f"results for several targets ({', '.join(sorted(targets))}); choose one with --target"
        )
    context = ir.Context()
    # The stored target names its prologue (llvm-cpu's convolutions need one; a spec runs it
    # once for all its matchers) and says whether a configuration needs more than the stored
    # compilation_info, which a CPU space renders again from the stored knobs.
    target = parse_target(next(iter(targets)).split("#", 1)[0])
    entries: list[MatcherEntry] = []
    partial: list[str] = []
    for result in results:
        problem = problem_from_key(result.key.problem)
        knobs = parse_config_key(result.config)
        if not needs_more_than_compilation_info(target, problem, knobs):
            entries.append(MatcherEntry(problem, result.compilation_info))
        elif target.traits.renders_without_dispatch and knobs is not None:
            try:
                configuration = space_for(target, problem).configuration(problem, knobs, context)
            except IreetuneError:
                # It sets what only its dispatch holds (a CPU batch_mmt4d's codegen).
                partial.append(problem.signature)
                continue
            entries.append(MatcherEntry.of_configuration(problem, configuration))
        else:
            partial.append(problem.signature)
    if partial:
        raise IreetuneError(
            f"the stored results of {', '.join(partial)} on {target.name} keep only the "
            "compilation_info, and their configuration sets more; use the best_spec.mlir of "
            "their tuning runs (or tune them again)"
        )
    prologue = tuple(
        dict.fromkeys(name for entry in entries for name in target.spec_prologue(entry.problem))
    )
    try:
        return render_spec(build_spec(entries, context, prologue))
    except ir.MLIRError as error:
        raise IreetuneError(
            f"a stored configuration does not parse: {str(error).splitlines()[0]}"
        ) from error
