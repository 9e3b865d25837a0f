"""Model variants built: each plan's specs linked into one spec, the model compiled with it.

Both modes of the model flow build their spec variants here (in process, batch by batch while
the time budget lasts; split mode, all at once before the device times them).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ireetune.compile.driver import CompileStatus, build_request
from ireetune.compile.pool import CompileBatch, CompileJob, CompileOutcome
from ireetune.model.prepare import ModelUnderTuning
from ireetune.model.variants import VariantPlan
from ireetune.spec.link import link_spec_files

if TYPE_CHECKING:
    from ireetune.executor.base import Executor


def compile_variants(
    executor: Executor,
    model: ModelUnderTuning,
    plans: Sequence[VariantPlan],
    folder: Path,
    jobs: int,
) -> list[tuple[VariantPlan, CompileOutcome]]:
    """Link each plan's specs into `folder/<label>_spec.mlir` and compile the model with it into
    `folder/<label>.vmfb`, `jobs` compiles at once; return each plan with its outcome, in plan
    order (a failure's log is `<label>.log`, its crash reproducer `<label>_reproducer.mlir`).

    Each binary built is remembered by the model: the final check's compile of the same specs,
    and the flags' combined check's after it, copy it instead of compiling again."""
    compile_jobs = []
    for index, plan in enumerate(plans):
        spec = folder / f"{plan.label}_spec.mlir"
        link_spec_files(list(plan.specs), spec)
        compile_jobs.append(
            CompileJob(
                candidate_id=index,
                request=build_request(
                    model.target, model.mlir_path, folder / f"{plan.label}.vmfb", spec_path=spec,
                    default_specs=model.with_default_specs,
                    reproducer_path=folder / f"{plan.label}_reproducer.mlir",
                ),
                log_path=folder / f"{plan.label}.log",
            )
        )  # fmt: skip
    outcomes = list(executor.compile(CompileBatch(compile_jobs, jobs, model.compile_timeout_s)))
    for outcome in outcomes:
        request = compile_jobs[outcome.candidate_id].request
        if outcome.status is CompileStatus.COMPILED and request.output_path.is_file():
            model.remember(request, outcome.binary_hash)
    return [(plans[o.candidate_id], o) for o in sorted(outcomes, key=lambda o: o.candidate_id)]
