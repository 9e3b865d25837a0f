"""Read a benchmarked run folder back: records, the verified winner, its proof and its spec."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

from iree.compiler import ir

from ireetune.benchmark.campaign import campaign_from_json
from ireetune.benchmark.outcomes import apply_campaign
from ireetune.dispatch_tuner import TuneResult
from ireetune.errors import IreetuneError
from ireetune.frontend.dispatches import parse_module, read_mlir_file
from ireetune.handoff.manifest import RESULTS_NAME, read_manifest
from ireetune.problem.root_op import find_root_op, parse_problem
from ireetune.report.ranking import is_real_improvement, rank_candidates
from ireetune.report.records import (
    CandidateRecord,
    CandidateStatus,
    render_csv,
    write_results,
    write_text_atomically,
)
from ireetune.search.candidate import make_knobs
from ireetune.targets import parse_target
from ireetune.verify.landing import prove_config_landed


def record_from_json(data: dict[str, Any]) -> CandidateRecord:
    """Rebuild a CandidateRecord from its results.json form."""
    fields = dict(data)
    fields["status"] = CandidateStatus(fields["status"])
    fields["knobs"] = make_knobs(fields["knobs"]) if fields["knobs"] is not None else None
    fields["times_ms"] = tuple(fields["times_ms"])
    return CandidateRecord(**fields)


def finish_run(run_dir: Path) -> TuneResult:
    """Fold the benchmark results into the run, pick the best verified candidate, write its spec."""
    try:
        manifest = read_manifest(run_dir)
    except ValueError as error:
        raise IreetuneError(str(error)) from None
    results_path = run_dir / RESULTS_NAME
    if not results_path.exists():
        raise IreetuneError(
            f"{run_dir} has no {RESULTS_NAME}; benchmark it first: ireetune benchmark-folder {run_dir}"
        )
    run_data = json.loads((run_dir / "results.json").read_text())
    results = json.loads(results_path.read_text())
    info = {key: value for key, value in run_data.items() if key != "candidates"}
    records = {r.candidate_id: r for r in map(record_from_json, run_data["candidates"])}

    campaign = campaign_from_json(results["campaign"])
    changed, baseline_ms = apply_campaign(records, campaign, info)
    records.update({record.candidate_id: record for record in changed})
    info["devices"] = results["devices"]
    notes = list(campaign.notes)
    verification = results.get("verification", {})
    if "baseline_error" in verification:
        notes.append(f"verification could not run: {verification['baseline_error']}")
    for key, verdict in verification.get("verdicts", {}).items():
        record = records[int(key)]
        status = {"verified": CandidateStatus.VERIFIED, "wrong": CandidateStatus.WRONG}.get(
            verdict["status"]
        )
        records[record.candidate_id] = replace(
            record, status=status or record.status, reason=verdict.get("reason", record.reason),
            max_abs_error=verdict.get("max_abs_error"),
        )  # fmt: skip
    if verification.get("model_level_baseline_ms") is not None:
        info["model_level_baseline_ms"] = verification["model_level_baseline_ms"]

    noise = float(info.get("baseline_noise", 0.0))
    ranked = rank_candidates(list(records.values()))
    best = next(
        (
            r
            for r in ranked
            if r.status is CandidateStatus.VERIFIED and is_real_improvement(r.speedup or 0.0, noise)
        ),
        None,
    )
    best_spec_path: Path | None = None
    context = ir.Context()
    original = run_dir / "inputs" / "original_benchmark.mlir"
    module = parse_module(read_mlir_file(original), context, original)
    with context:
        problem = parse_problem(find_root_op(module))
    if best is not None:
        target = parse_target(manifest.target)
        prove_config_landed(
            target, run_dir / "inputs" / "stripped_benchmark.mlir", run_dir / best.spec_path,
            _compilation_info_of(run_dir / best.spec_path, context),
            run_dir / "verify" / "best_configuration", context,
        )  # fmt: skip
        best_spec_path = run_dir / "best_spec.mlir"
        shutil.copyfile(run_dir / best.spec_path, best_spec_path)
        info.update(outcome="improved", best_candidate=best.candidate_id, best_speedup=best.speedup)
    else:
        info["outcome"] = "no-improvement"
        notes.append(
            "no verified candidate beat the default configuration beyond the noise; no spec written"
        )
    info["notes"] = notes
    ordered = sorted(records.values(), key=lambda r: r.candidate_id)
    write_results(run_dir / "results.json", info, ordered)
    write_text_atomically(run_dir / "candidates.csv", render_csv(ordered))
    attempts = [r for r in ordered if not r.is_baseline]
    compiled = [r for r in attempts if r.binary_hash]
    return TuneResult(
        run_dir=run_dir, problem=problem, records=tuple(ordered), baseline_ms=baseline_ms, best=best,
        best_spec_path=best_spec_path,
        compile_success_rate=len(compiled) / len(attempts) if attempts else 0.0, notes=tuple(notes),
    )  # fmt: skip


def _compilation_info_of(spec_path: Path, context: ir.Context) -> str:
    """Read the compilation_info constant of a one-matcher spec (the winner's own spec)."""
    with context:
        module = ir.Module.parse(spec_path.read_text())
        found: list[str] = []

        def visit(operation: ir.Operation) -> ir.WalkResult:
            if operation.name == "transform.param.constant":
                found.append(str(operation.attributes["value"]))
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit)
    assert len(found) == 1, f"expected one configuration in {spec_path}, found {len(found)}"
    return found[0]
