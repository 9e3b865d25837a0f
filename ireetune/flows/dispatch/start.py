"""Start a dispatch run: the run object, the generate stage and the run folder.

open_run           load the dispatch, open the database, fix the run's key and rule
generate_stage     draw and order the candidates; read what the database has of them
reusable_winner    a stored winner reached here under the same rule, if the run may reuse it
start_run_folder   lay out the run folder and start its record (results.json)
marked_failed      whatever ends the run early, its folder must not look finished
"""

from __future__ import annotations

import itertools
import json
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from iree.compiler import ir

from ireetune.compile.pool import default_jobs
from ireetune.core.errors import IreetuneError
from ireetune.core.files import write_text_atomically
from ireetune.core.target import Target
from ireetune.core.version import __version__
from ireetune.database.keys import describe_device, describe_target
from ireetune.database.store import (
    ResultKey,
    StoredResult,
    TuningDatabase,
    compiler_version,
    default_database_path,
    find_reusable,
    problem_key,
    stale_candidates,
)
from ireetune.decision.rules import DecisionRule
from ireetune.decision.stats import Basis
from ireetune.executor import Executor
from ireetune.flags.file import FLAGS_FILE_NAME, write_flags_file
from ireetune.flows.dispatch.options import TuneOptions
from ireetune.flows.dispatch.run_options import write_run_options
from ireetune.flows.dispatch.state import DispatchRun, searches_on_real_inputs
from ireetune.frontend.dispatches import strip_configurations
from ireetune.frontend.load import load_dispatch
from ireetune.problem.registry import family_of
from ireetune.report.recorder import RunRecorder
from ireetune.search.strategies import find_strategy
from ireetune.search.strategy import SearchInput
from ireetune.verify.compare import check_inputs


def decision_rule(target: Target, options: TuneOptions) -> DecisionRule:
    """Return the rule this target's verdicts are reached (and reused) under: on real inputs
    where the target decides there, unless the run is asked to decide on the benchmark."""
    real_input_decides = target.traits.decides_at_model_level
    return DecisionRule(
        threshold=options.threshold,
        real_input_decides=real_input_decides and not options.decide_on_dispatch_benchmark,
    )


@contextmanager
def open_run(options: TuneOptions, target: Target, executor: Executor) -> Iterator[DispatchRun]:
    """Load the dispatch and open the database; yield the run (its folder not started yet),
    then close the database and remove the scratch folder."""
    if options.use_database:
        # What is slow to read again (a GPU space) is kept beside the database.
        target.cache_folder = (options.database_path or default_database_path()).parent / "spaces"
    context = ir.Context()
    with tempfile.TemporaryDirectory(prefix="ireetune_") as scratch_name:
        dispatch = load_dispatch(
            options.input_path, options.dispatch, target, Path(scratch_name), context
        )
        # Refuse what the output check cannot make inputs for before any work or run folder.
        reference_inputs = family_of(dispatch.problem).reference_inputs(dispatch.problem)
        check_inputs(reference_inputs.shapes, reference_inputs.types, "the dispatch's inputs")
        devices = list(options.devices) or [target.runtime_device]
        database = (
            TuningDatabase(options.database_path or default_database_path())
            if options.use_database
            else None
        )
        # Results under global flags are keyed apart: the same config may compile differently.
        variant_key = str(dispatch.variant_target) + "".join(f" {f}" for f in target.global_flags)
        result_key = ResultKey(
            compiler_version(), describe_target(target.name, variant_key),
            describe_device(devices[0]), problem_key(dispatch.problem), dispatch.problem.signature,
        )  # fmt: skip
        try:
            yield DispatchRun(
                executor, options, target, context, dispatch, devices,
                decision_rule(target, options), database, result_key,
                workers=options.jobs or default_jobs(),
            )  # fmt: skip
        finally:
            if database is not None:
                database.close()


@contextmanager
def _dispatch_failure(what: str) -> Iterator[None]:
    """Turn a fault of a space or a strategy into this dispatch's failure, with its reason: a
    model run records it and goes on with the other dispatches; a dispatch run ends in one
    line."""
    try:
        yield
    except IreetuneError:
        raise
    except Exception as error:
        raise IreetuneError(
            f"{what}: {type(error).__name__}: {' '.join(str(error).split())}"
        ) from error


def generate_stage(run: DispatchRun) -> None:
    """Draw the pool and keep the N candidates the search strategy `--order` names proposes
    (search/strategies/); say how it chose them (`run.ordering`); read what the database holds
    for this dispatch (`run.stored`).

    A strategy that learns from measurements proposes only the first round here; its rounds
    (`run.search`) pick the later ones from the rest of the pool as measurements arrive.
    Other compilers' winners and imported results are put first, to be measured again.
    """
    options, target, dispatch = run.options, run.target, run.dispatch
    pool_size = max(4 * options.num_candidates, 64)
    request = run.request
    what = f"the search space of {dispatch.problem.signature} on {target.name}"
    with _dispatch_failure(f"{what} could not be built"):
        pool = list(itertools.islice(dispatch.space.generate(request), pool_size))
    if not pool:
        raise IreetuneError(
            f"the search space of {dispatch.problem.signature} on {target.name} is empty"
        )
    search = SearchInput(
        target, dispatch.space, request, run.database, options.num_candidates,
        online=options.online and options.stop_after is None,
    )  # fmt: skip
    with _dispatch_failure(f"{what} could not be ordered ({options.order})"):
        proposal = find_strategy(options.order)(search, pool)
    run.candidates, run.ordering, run.search = (
        proposal.candidates,
        proposal.ordering,
        proposal.rounds,
    )
    if run.database is not None:
        run.stored = run.database.lookup(run.result_key)
        run.candidates = stale_candidates(run.database, run.result_key, run.candidates)


def reusable_winner(run: DispatchRun) -> StoredResult | None:
    """Return the stored winner reached here under this rule, unless the run is to tune again."""
    options = run.options
    if run.database is None or options.retune or options.stop_after is not None:
        return None
    return find_reusable(run.stored, run.rule.name)


def start_run_folder(run: DispatchRun, run_dir: Path) -> None:
    """Lay out the run folder, copy the dispatch in and start its record (results.json)."""
    options, target, dispatch = run.options, run.target, run.dispatch
    run.real_input_search = searches_on_real_inputs(run)
    basis = Basis.REAL_INPUT if run.real_input_search else Basis.DISPATCH
    # Timings of another basis (a model run's on the benchmark, a standalone run's on real
    # inputs, under the same key) are not this run's to restore: they are measured again.
    run.stored = {
        config: row for config, row in run.stored.items() if row.basis in ("", basis.value)
    }
    for folder in ("inputs", "specs", "binaries", "failures", "verify"):
        (run_dir / folder).mkdir()
    original_path = run_dir / "inputs" / "original_benchmark.mlir"
    shutil.copyfile(dispatch.benchmark_path, original_path)
    strip_configurations(
        original_path,
        run_dir / "inputs" / "stripped_benchmark.mlir",
        timeout_s=options.compile_timeout_s,
    )
    info = {
        "ireetune_version": __version__,
        "outcome": "running",
        "input": str(options.input_path),
        "target": target.name,
        "devices": run.devices,
        "problem": dispatch.problem.signature,
        "seed": options.seed,
        "num_candidates": options.num_candidates,
        "compiler_version": run.result_key.compiler_version,
        "database": str(run.database.path) if run.database is not None else None,
        "rule": run.rule.name,
        "timing_basis": basis.value,
        "global_flags": list(target.global_flags),
        "ordering": run.ordering,
    }
    if target.global_flags:
        write_flags_file(run_dir / FLAGS_FILE_NAME, target.global_flags)
    run.recorder = RunRecorder(run_dir, info)
    write_run_options(run_dir, options)


@contextmanager
def marked_failed(run_dir: Path) -> Iterator[None]:
    """Whatever ends the run inside, mark its results.json failed and remove best_spec.mlir."""
    try:
        yield
    except BaseException:
        marker = run_dir / "results.json"
        if marker.exists():
            data = json.loads(marker.read_text())
            data["outcome"] = "failed"
            write_text_atomically(marker, json.dumps(data, indent=2) + "\n")
        (run_dir / "best_spec.mlir").unlink(missing_ok=True)
        raise
