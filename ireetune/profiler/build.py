"""The compile phase: generate each operation, find its dispatch, attach configurations, compile.

For every operation (seeds/003's layout, under `generated/linalg/<kind>/<operation>/`):

1. write `<operation>.mlir`, a model function computing the operation;
2. compile it once for the target with dispatch benchmarks dumped and tuner attributes on: this
   gives the default configuration's verification binary and the dispatch benchmark, whose
   configuration is stripped into `<operation>_benchmark.mlir`;
3. read the root op from the benchmark with the IREE bindings; ask the target for the first N
   configurations of its search space (contractions) and write one tuning spec per configuration;
4. compile every dispatch twice in parallel: the benchmark with the spec (`<dispatch>_profile.vmfb`,
   timed at dispatch level) and the model function with the spec (`<dispatch>_verify.vmfb`, run on
   real inputs). A profile binary identical to the default's means the configuration was not applied.

Nothing here stops the sweep for one broken operation or configuration: each is recorded in the
manifest with its reason.
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from iree.compiler import ir
from iree.compiler.dialects import iree_codegen

from ireetune.compile.driver import (
    DUMP_BENCHMARKS_FLAG,
    TUNER_ATTRIBUTES_FLAG,
    CompileStatus,
    build_request,
)
from ireetune.compile.pool import CompileBatch, CompileJob, default_jobs
from ireetune.core.candidate import Knobs, format_knobs
from ireetune.core.errors import IreetuneError
from ireetune.core.target import FamilySpace, SpaceRequest, Target, prepare_space
from ireetune.frontend.dispatches import parse_module, strip_configurations
from ireetune.problem.root_op import Problem, find_root_op, parse_problem
from ireetune.profiler.configs import (
    DEFAULT_CONFIGURATION,
    ConfigKind,
    ConfigRequest,
    Configuration,
    compile_patterns,
    is_selected,
    name_knobs,
)
from ireetune.profiler.generate import operation_dir, write_operation
from ireetune.profiler.manifest import DispatchEntry, DispatchStatus, Manifest, write_manifest
from ireetune.profiler.operations import Operation
from ireetune.report.progress import StageProgress, progress_enabled
from ireetune.spec.builder import build_configuration_spec
from ireetune.targets import parse_target as resolve_target

if TYPE_CHECKING:
    from ireetune.executor.base import Executor


# Candidates drawn from the search space before ordering, per configuration asked for.
POOL_FACTOR = 4


@dataclass(frozen=True)
class BuildOptions:
    """How to generate and compile a sweep."""

    generated_dir: Path
    target: str = "cpu"
    configs: ConfigRequest = ConfigRequest(0, ())
    dispatch_patterns: tuple[str, ...] = ()
    jobs: int = 0
    seed: int = 0
    compile_timeout_s: float = 120.0
    device: str | None = None
    show_progress: bool | None = None


@dataclass(frozen=True)
class _Prepared:
    """An operation whose dispatch was found: its folder, benchmark and configurations."""

    operation: Operation
    folder: Path
    benchmark_path: Path
    configurations: tuple[Configuration, ...]
    failed: tuple[tuple[Configuration, str], ...]


def dispatch_name(operation: Operation, configuration: Configuration) -> str:
    return f"{operation.name}_{configuration.name}"


def _logs(folder: Path) -> Path:
    logs = folder / "logs"
    logs.mkdir(exist_ok=True)
    return logs


def _dump_job(index: int, operation: Operation, generated_dir: Path, target: Target) -> CompileJob:
    folder = operation_dir(generated_dir, operation)
    source = write_operation(generated_dir, operation)
    dump_dir = folder / "benchmarks"
    shutil.rmtree(dump_dir, ignore_errors=True)
    logs = _logs(folder)
    return CompileJob(
        candidate_id=index,
        request=build_request(
            target,
            source,
            folder / f"{dispatch_name(operation, DEFAULT_CONFIGURATION)}_verify.vmfb",
            phase_flags=(TUNER_ATTRIBUTES_FLAG,),
            dumps=((DUMP_BENCHMARKS_FLAG, dump_dir),),
            reproducer_path=logs / "dump_reproducer.mlir",
        ),
        log_path=logs / "dump_compile.log",
    )


def _pick_benchmark(dump_dir: Path) -> Path:
    """Return the dispatch benchmark holding the root op (the one dispatch of the operation)."""
    files = sorted(dump_dir.glob("*_benchmark.mlir"))
    if not files:
        raise IreetuneError("the compiler dumped no dispatch benchmark")
    with_root = [path for path in files if "#iree_codegen.root_op" in path.read_text()]
    return (with_root or files)[0]


def _search_space_configs(
    space: FamilySpace, request: SpaceRequest, count: int
) -> list[Configuration]:
    pool_size = max(POOL_FACTOR * count, 16)
    pool = list(itertools.islice(space.generate(request), pool_size))
    ordered = space.order(request, pool)[:count]
    return [
        Configuration(name_knobs(knobs), ConfigKind.SEARCH_SPACE, knobs=knobs)
        for knobs, _ in ordered
    ]


def _prepare(
    operation: Operation, folder: Path, target: Target, options: BuildOptions, notes: list[str]
) -> _Prepared:
    """Strip the dumped benchmark, parse its root op and write a spec for every configuration."""
    dumped = _pick_benchmark(folder / "benchmarks")
    benchmark_path = folder / f"{operation.name}_benchmark.mlir"
    strip_configurations(dumped, benchmark_path, timeout_s=options.compile_timeout_s)
    context = ir.Context()
    module = parse_module(dumped.read_text(), context, dumped)
    problem: Problem | None = None
    space: FamilySpace | None = None
    default_knobs: Knobs | None = None
    reason = ""
    with context:
        root_op = find_root_op(module)
        variants = iree_codegen.get_executable_variant_ops(module)
        assert len(variants) == 1, f"{dumped} holds {len(variants)} executable variants"
        variant_target = variants[0].attributes["target"]
        try:
            problem = parse_problem(root_op)
            # The target learns its space from the dispatch (GPU targets ask the compiler).
            space = prepare_space(target, problem, dumped, folder / "target_space", context)
        except IreetuneError as error:
            reason = str(error)
            problem = None
        if problem is not None and space is not None:
            default_knobs = space.parse_default_knobs(problem, root_op)
    configurations: list[Configuration] = [DEFAULT_CONFIGURATION]
    failed: list[tuple[Configuration, str]] = []
    wanted = list(options.configs.fixed)
    if options.configs.search_space_count and problem is not None and space is not None:
        request = SpaceRequest(problem, variant_target, default_knobs, options.seed)
        found = _search_space_configs(space, request, options.configs.search_space_count)
        if len(found) < options.configs.search_space_count:
            notes.append(
                f"{operation.name}: the search space of {target.name} gave {len(found)} of the "
                f"{options.configs.search_space_count} configurations asked for"
            )
        wanted = found + wanted
    elif options.configs.search_space_count:
        notes.append(f"{operation.name}: no search space on {target.name} ({reason}); default only")
    specs = folder / "configs"
    specs.mkdir(exist_ok=True)
    for configuration in wanted:
        if configuration.kind is ConfigKind.SPEC:
            configurations.append(configuration)
            continue
        assert configuration.knobs is not None
        if problem is None or space is None:
            failed.append((configuration, f"knob configurations need a contraction ({reason})"))
            continue
        try:
            spec_text = build_configuration_spec(
                problem,
                space.configuration_for(
                    SpaceRequest(problem, variant_target, default_knobs, options.seed),
                    configuration.knobs,
                    context,
                ),
                target.spec_prologue(problem),
                context,
            )
        except (IreetuneError, KeyError, ValueError, TypeError, ir.MLIRError) as error:
            failed.append(
                (configuration, f"invalid configuration: {type(error).__name__}: {error}")
            )
            continue
        spec_path = specs / f"{configuration.name}.spec.mlir"
        spec_path.write_text(spec_text)
        configurations.append(replace(configuration, spec_path=spec_path))
    return _Prepared(operation, folder, benchmark_path, tuple(configurations), tuple(failed))


def build_dispatches(
    executor: Executor, operations: Sequence[Operation], options: BuildOptions
) -> Manifest:
    """Generate and compile (on `executor`) every selected dispatch of the sweep; write and
    return the manifest."""
    target = resolve_target(options.target)
    patterns = compile_patterns(options.dispatch_patterns)
    generated_dir = options.generated_dir.resolve()
    generated_dir.mkdir(parents=True, exist_ok=True)
    workers = options.jobs or default_jobs()
    notes: list[str] = []
    entries: list[DispatchEntry] = []
    prepared: list[_Prepared] = []
    with StageProgress(progress_enabled(options.show_progress)) as progress:
        dump_jobs = [_dump_job(i, op, generated_dir, target) for i, op in enumerate(operations)]
        with progress.stage("generating dispatches", len(dump_jobs)):
            outcomes = {
                o.candidate_id: o
                for o in executor.compile(
                    CompileBatch(dump_jobs, workers, options.compile_timeout_s)
                )
            }
            progress.advance(len(dump_jobs))
        for index, operation in enumerate(operations):
            outcome = outcomes[index]
            folder = operation_dir(generated_dir, operation)
            if outcome.status is not CompileStatus.COMPILED:
                reason = f"the operation does not compile with the default configuration: {outcome.reason}"
                entries.append(
                    _entry(operation, DEFAULT_CONFIGURATION, DispatchStatus.COMPILE_FAILED, reason)
                )
                continue
            try:
                prepared.append(_prepare(operation, folder, target, options, notes))
            except IreetuneError as error:
                entries.append(
                    _entry(
                        operation, DEFAULT_CONFIGURATION, DispatchStatus.CONFIG_FAILED, str(error)
                    )
                )
        jobs: list[CompileJob] = []
        owners: dict[int, tuple[int, str]] = {}
        staged: list[DispatchEntry] = []
        hidden: set[int] = set()
        for item in prepared:
            selected = [
                c
                for c in item.configurations
                if is_selected(dispatch_name(item.operation, c), patterns)
            ]
            for configuration, reason in item.failed:
                if is_selected(dispatch_name(item.operation, configuration), patterns):
                    entries.append(
                        _entry(item.operation, configuration, DispatchStatus.CONFIG_FAILED, reason)
                    )
            if not selected:
                continue
            if DEFAULT_CONFIGURATION not in selected:
                # The default's profile binary is still built (not reported): it tells which
                # configurations were applied.
                selected.insert(0, DEFAULT_CONFIGURATION)
                hidden.add(len(staged))
            for configuration in selected:
                entry_index = len(staged)
                staged.append(_entry(item.operation, configuration, DispatchStatus.COMPILED, ""))
                jobs.extend(
                    _compile_jobs(item, configuration, target, len(jobs), entry_index, owners)
                )
        with progress.stage("compiling", len(jobs)):
            results: dict[int, dict[str, tuple[CompileStatus, str, str]]] = {}
            batch = CompileBatch(jobs, workers, options.compile_timeout_s)
            for outcome in executor.compile(batch):
                entry_index, role = owners[outcome.candidate_id]
                results.setdefault(entry_index, {})[role] = (
                    outcome.status,
                    outcome.reason,
                    outcome.binary_hash,
                )
                progress.advance()
    entries.extend(_classify(staged, results, hidden, generated_dir))
    device = options.device or target.runtime_device
    manifest = Manifest(target.name, device, tuple(entries), tuple(notes))
    write_manifest(generated_dir, manifest)
    return manifest


def _entry(
    operation: Operation, configuration: Configuration, status: DispatchStatus, reason: str
) -> DispatchEntry:
    return DispatchEntry(
        name=dispatch_name(operation, configuration),
        operation=operation,
        config_name=configuration.name,
        config_kind=configuration.kind.value,
        knobs=format_knobs(configuration.knobs),
        status=status,
        reason=reason,
    )


def _compile_jobs(
    item: _Prepared,
    configuration: Configuration,
    target: Target,
    first_id: int,
    entry_index: int,
    owners: dict[int, tuple[int, str]],
) -> list[CompileJob]:
    """Return the profile (and, for non-default configurations, verify) compile of a dispatch."""
    name = dispatch_name(item.operation, configuration)
    logs = _logs(item.folder)
    # Each role's source and phase: the dispatch benchmark, and the model function on real inputs.
    roles: list[tuple[str, Path, tuple[str, ...]]] = [
        ("profile", item.benchmark_path, ("--compile-from=executable-sources",))
    ]
    if configuration.kind is not ConfigKind.DEFAULT:
        roles.append(("verify", item.folder / f"{item.operation.name}.mlir", ()))
    jobs = []
    for job_id, (role, source, phase_flags) in enumerate(roles, start=first_id):
        request = build_request(
            target,
            source,
            item.folder / f"{name}_{role}.vmfb",
            phase_flags=phase_flags,
            spec_path=configuration.spec_path,
            reproducer_path=logs / f"{name}_{role}_reproducer.mlir",
        )
        jobs.append(CompileJob(job_id, request, log_path=logs / f"{name}_{role}.log"))
        owners[job_id] = (entry_index, role)
    return jobs


def _classify(
    staged: Sequence[DispatchEntry],
    results: dict[int, dict[str, tuple[CompileStatus, str, str]]],
    hidden: set[int],
    generated_dir: Path,
) -> list[DispatchEntry]:
    """Turn compile outcomes into entries; flag configurations whose binary equals the default's."""
    default_hashes: dict[str, str] = {}
    finished: list[DispatchEntry] = []
    for index, entry in enumerate(staged):
        roles = results.get(index, {})
        failures = [
            (status, reason)
            for status, reason, _ in roles.values()
            if status is not CompileStatus.COMPILED
        ]
        folder = operation_dir(generated_dir, entry.operation)
        relative = folder.relative_to(generated_dir)
        if failures:
            status, reason = failures[0]
            kind = (
                DispatchStatus.COMPILE_TIMED_OUT
                if status is CompileStatus.TIMED_OUT
                else DispatchStatus.COMPILE_FAILED
            )
            finished.append(replace(entry, status=kind, reason=reason))
            continue
        binary_hash = roles["profile"][2]
        entry = replace(
            entry,
            profile_vmfb=str(relative / f"{entry.name}_profile.vmfb"),
            verify_vmfb=str(relative / f"{entry.name}_verify.vmfb"),
            binary_hash=binary_hash,
        )
        if entry.config_kind == ConfigKind.DEFAULT.value:
            default_hashes[entry.operation.name] = binary_hash
            if index in hidden:
                continue
        elif default_hashes.get(entry.operation.name) == binary_hash:
            entry = replace(
                entry,
                not_applied=True,
                reason="binary identical to the default's: configuration not applied",
            )
        finished.append(entry)
    return finished
