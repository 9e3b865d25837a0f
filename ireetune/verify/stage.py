"""The checks after the search: build the reference program, compare outputs, time on real data.

The reference program is the root op alone as `@main` (verify/reference.py), compiled with a
candidate's spec. It serves two checks: its outputs on random inputs must equal the default's,
and, where the target decides on real inputs, it is timed side by side with the default's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from iree.compiler import ir

from ireetune.compile.driver import CompileStatus, build_request
from ireetune.compile.pool import CompileBatch, CompileJob
from ireetune.core.input_archive import write_input_archive
from ireetune.core.target import Target
from ireetune.problem.family import Problem
from ireetune.problem.registry import family_of
from ireetune.verify.compare import OutputChecks, check_reference_outputs, make_random_inputs
from ireetune.verify.reference import build_reference_module

if TYPE_CHECKING:
    from ireetune.executor.base import Executor


@dataclass(frozen=True)
class ReferenceSetup:
    """The reference program's source and the random inputs every check uses."""

    source_path: Path
    inputs_path: Path


def write_reference(
    root_op: ir.Operation, context: ir.Context, problem: Problem, verify_dir: Path, seed: int
) -> ReferenceSetup:
    """Write the reference program and its random inputs (drawn from `seed`)."""
    verify_dir.mkdir(parents=True, exist_ok=True)
    source_path = verify_dir / "reference.mlir"
    source_path.write_text(str(build_reference_module(root_op, context, problem)))
    arguments = family_of(problem).reference_inputs(problem)
    inputs = make_random_inputs(list(arguments.shapes), list(arguments.types), seed=seed)
    inputs_path = verify_dir / "inputs.npz"
    write_input_archive(inputs_path, inputs)
    return ReferenceSetup(source_path, inputs_path)


def reference_jobs(
    target: Target,
    setup: ReferenceSetup,
    spec_paths: Mapping[int, Path],
    work_dir: Path,
    failures_dir: Path,
) -> list[CompileJob]:
    """Return the compiles of the reference program with each candidate's spec (its binary in
    `work_dir`, what a failure leaves in `failures_dir`)."""
    return [
        CompileJob(
            candidate_id=candidate_id,
            request=build_request(
                target,
                setup.source_path,
                work_dir / f"reference_{candidate_id}.vmfb",
                spec_path=spec_path,
                reproducer_path=failures_dir / f"{candidate_id}_reference_reproducer.mlir",
            ),
            log_path=failures_dir / f"{candidate_id}_reference_compile.log",
        )
        for candidate_id, spec_path in sorted(spec_paths.items())
    ]


def compile_references(
    executor: Executor, batch: CompileBatch
) -> dict[int, tuple[Path | None, str]]:
    """Compile the reference programs (`reference_jobs`) on `executor`: id -> (binary, hash or
    error)."""
    binaries = {job.candidate_id: job.request.output_path for job in batch.jobs}
    built: dict[int, tuple[Path | None, str]] = {}
    for outcome in executor.compile(batch):
        if outcome.status is CompileStatus.COMPILED:
            built[outcome.candidate_id] = (binaries[outcome.candidate_id], outcome.binary_hash)
        else:
            built[outcome.candidate_id] = (
                None,
                f"reference program failed to compile: {outcome.reason}",
            )
    return built


def check_outputs(
    executor: Executor,
    problem: Problem,
    binaries: Mapping[int, tuple[Path | None, str]],
    setup: ReferenceSetup,
    device: str,
) -> OutputChecks:
    """Check each contender's outputs against the default's (`check_reference_outputs`, in id
    order); where the default's program is missing or fails, none is compared."""
    if binaries[0][0] is None:
        return OutputChecks(
            {cid: (None, binaries[0][1]) for cid in binaries if cid}, {}, None, binaries[0][1]
        )
    reduction = family_of(problem).reference_inputs(problem).reduction_size
    checked = check_reference_outputs(
        executor, dict(sorted(binaries.items())), setup.inputs_path, device,
        problem.output_type, reduction,
    )  # fmt: skip
    baseline_run = checked.baseline
    if baseline_run is None or baseline_run.output is None:
        reason = f"the default's reference program failed: {baseline_run.reason if baseline_run else 'no result'}"
        return OutputChecks({cid: (None, reason) for cid in binaries if cid}, {}, None, reason)
    return checked
