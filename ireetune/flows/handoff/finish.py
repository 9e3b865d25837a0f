"""Read a benchmarked run folder back and decide it: records, the verified winner, its proof and
its spec (`continue`, the run continued at its decide stage)."""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from iree.compiler import ir
from iree.compiler.dialects import iree_codegen

from ireetune.benchmark.outcomes import apply_campaign
from ireetune.core.errors import IreetuneError
from ireetune.core.records import (
    DECISION_CHECKS,
    CandidateChecks,
    CandidateRecord,
    check_values,
)
from ireetune.database.run_files import (
    BenchmarkResultsFile,
    CandidateRecordFile,
    DispatchRunFile,
    campaign_from_file,
    check_id_keys,
    read_json_object,
    validate_document,
)
from ireetune.decision.facts import facts_from_campaign, with_outputs, with_real_input
from ireetune.decision.rules import CandidateFacts, DecisionRule, choose_contenders
from ireetune.decision.stats import Basis
from ireetune.flows.dispatch.decide import RunOutline
from ireetune.flows.handoff.benchmark_folder import folder_contender_limit, folder_rule
from ireetune.flows.handoff.folder_flags import check_folder_flags
from ireetune.flows.handoff.manifest import (
    MANIFEST_NAME,
    RESULTS_NAME,
    Manifest,
    check_results_match_manifest,
    read_manifest,
)
from ireetune.frontend.dispatches import parse_module, read_mlir_file
from ireetune.model.real_inputs import estimates_from_rounds
from ireetune.problem.root_op import find_root_op, parse_problem
from ireetune.report.recorder import RunRecorder
from ireetune.report.result import TuneResult
from ireetune.spec.inspect import list_matchers
from ireetune.targets import parse_target
from ireetune.verify.landing import prove_config_landed


def record_from_json(data: CandidateRecordFile) -> CandidateRecord:
    """Return the plain CandidateRecord of a checked results.json candidate."""
    return CandidateRecord(**{f.name: getattr(data, f.name) for f in fields(CandidateRecord)})


def read_compiling_manifest(run_dir: Path) -> Manifest:
    """Read the manifest of a folder whose global flags this side passes to iree-compile."""
    try:
        manifest = read_manifest(run_dir)
    except ValueError as error:
        raise IreetuneError(str(error)) from None
    check_folder_flags(manifest.global_flags, f"{run_dir / MANIFEST_NAME}: global_flags")
    return manifest


def read_run_record(run_dir: Path) -> tuple[dict[str, Any], dict[int, CandidateRecord]]:
    """Read results.json as untrusted data: the run's facts and its candidates' records.

    Every record's spec and binary path must stay inside the folder: the winner's spec becomes
    the run's best_spec.mlir.
    """
    path = run_dir / "results.json"
    run_data = read_json_object(path)
    run_file = validate_document(path, DispatchRunFile, run_data, run_dir)
    records = {record.candidate_id: record_from_json(record) for record in run_file.candidates}
    if len(records) != len(run_file.candidates) or 0 not in records:
        raise IreetuneError(f"{path}: candidates must hold candidate 0 and no id twice")
    return {key: value for key, value in run_data.items() if key != "candidates"}, records


def _read_benchmark_results(
    run_dir: Path, known: Collection[int]
) -> tuple[dict[str, Any], BenchmarkResultsFile]:
    """Read benchmark_results.json as untrusted data; every id it names must be a candidate."""
    path = run_dir / RESULTS_NAME
    results = read_json_object(path)
    checked = validate_document(path, BenchmarkResultsFile, results, run_dir)
    verification = checked.verification
    check_id_keys(path, "verification.verdicts", verification.verdicts)
    if verification.real_input_timings is not None:
        check_id_keys(
            path,
            "verification.real_input_timings.times_ms",
            verification.real_input_timings.times_ms,
        )
    timed = verification.real_input_timings.times_ms if verification.real_input_timings else {}
    named = (
        {("campaign.candidates", m.candidate_id) for m in checked.campaign.candidates}
        | {("verification.verdicts", cid) for cid in verification.verdict_ids()}
        | {("verification.real_input_timings.times_ms", int(key)) for key in timed}
    )
    for where, candidate_id in sorted(named):
        if candidate_id not in known:
            raise IreetuneError(f"{path}: {where} names candidate {candidate_id}, not in this run")
    return results, checked


@dataclass
class FinishRun:
    """A benchmarked run folder read back to be decided: the same fields the decide stage reads
    from an in-process run (flows/dispatch/decide.py `DecidingRun`)."""

    run_dir: Path
    manifest: Manifest
    recorder: RunRecorder
    results: dict[str, Any]
    checked: BenchmarkResultsFile
    rule: DecisionRule
    facts: dict[int, CandidateFacts] = field(default_factory=dict)
    contenders: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    baseline_ms: float = math.nan
    result: TuneResult | None = None
    # The deferred reference programs the references stage compiled (flows/handoff/references.py):
    # then the outputs are checked on the device host before the run is decided.
    compiled_references: list[int] = field(default_factory=list)

    def summarise(self) -> RunOutline:
        """Return what the summary names: the problem read back from the folder's dispatch."""
        context = ir.Context()
        original = self.run_dir / "inputs" / "original_benchmark.mlir"
        module = parse_module(read_mlir_file(original), context, original)
        with context:
            problem = parse_problem(find_root_op(module))
        attempts = [r for r in self.recorder.records.values() if not r.is_baseline]
        compiled = [r for r in attempts if r.binary_hash]
        rate = len(compiled) / len(attempts) if attempts else 0.0
        return RunOutline(problem, self.manifest.target, self.baseline_ms, rate)

    def prove_winner(self, best: CandidateRecord) -> None:
        """Prove the winner's configuration (read from its spec) lands in the dispatch."""
        run_dir, context = self.run_dir, ir.Context()
        if not best.spec_path:
            raise IreetuneError(f"{run_dir / 'results.json'}: the winner names no spec_path")
        target = parse_target(self.manifest.target).with_global_flags(self.manifest.global_flags)
        spec = run_dir / best.spec_path
        prove_config_landed(
            target, run_dir / "inputs" / "stripped_benchmark.mlir", spec,
            _compilation_info_of(spec, context), run_dir / "verify" / "best_configuration",
            context, _function_attributes_of(spec, context),
        )  # fmt: skip


def finish_run(run_dir: Path) -> TuneResult:
    """Fold the benchmark results into the run, reach the verdict, write the winner's spec:
    the run continued at its decide stage (flows/handoff/references.py continues it at its
    references stage). Nothing is written before the verdict: a folder refused on the way is
    left as it was."""
    from ireetune.flows.dispatch.decide import decide_stage
    from ireetune.flows.sequence import named, run_sequence

    finish = load_finish_run(run_dir)
    run_sequence(finish, named(fold_stage, decide_stage), ())
    assert finish.result is not None
    return finish.result


def load_finish_run(run_dir: Path) -> FinishRun:
    """Read a benchmarked folder back as untrusted data: manifest, record and results."""
    if not run_dir.is_dir():
        raise IreetuneError(f"run folder not found: {run_dir}")
    manifest = read_compiling_manifest(run_dir)
    info, records = read_run_record(run_dir)
    try:
        check_results_match_manifest(run_dir)
    except ValueError as error:
        raise IreetuneError(str(error)) from None
    results, checked = _read_benchmark_results(run_dir, records)
    rule = folder_rule(manifest)
    return FinishRun(run_dir, manifest, RunRecorder(run_dir, info, records), results, checked, rule)


def fold_stage(run: FinishRun) -> None:
    """Fold the measurements and checks the device host wrote into the run's records and facts.

    The facts and contenders come from the decision stage (ireetune/decision) with the same
    calls, in the same order, as the in-process flow's measure and check stages: facts from the
    campaign, contenders, output checks, real-input timings where the target decides there.
    """
    recorder, info, checked = run.recorder, run.recorder.info, run.checked
    # A folder finished before keeps that verdict's checks in results.json; this verdict is
    # reached afresh, so a candidate that is no contender now carries none of them.
    cleared = check_values(CandidateChecks(), DECISION_CHECKS)
    for record in list(recorder.records.values()):
        recorder.records[record.candidate_id] = replace(record, **cleared, max_abs_error=None)
    campaign = campaign_from_file(checked.campaign)
    changed, run.baseline_ms = apply_campaign(recorder.records, campaign, info)
    for record in changed:
        recorder.update(record)
    info["devices"] = list(checked.devices)
    run.notes = list(campaign.notes)
    verification = checked.verification
    if verification.pending:
        pending = ", ".join(map(str, verification.pending))
        raise IreetuneError(
            f"the outputs of candidates {pending} are not checked yet: "
            f"run `ireetune measure {run.run_dir}` again where the device is"
        )
    if checked.stage != "check":
        raise IreetuneError(
            f"{run.run_dir / RESULTS_NAME}: the output checks did not complete (saved after the "
            f"{checked.stage} stage): run `ireetune measure {run.run_dir}` again "
            "where the device is"
        )
    if verification.baseline_error is not None:
        run.notes.append(f"verification could not run: {verification.baseline_error}")
    if verification.model_level_baseline_ms is not None:
        info["model_level_baseline_ms"] = verification.model_level_baseline_ms
    info["rule"] = run.rule.name
    facts = facts_from_campaign(campaign, Basis.DISPATCH)
    recorder.record_facts(facts)
    run.contenders = choose_contenders(
        list(facts.values()), run.rule, folder_contender_limit(run.manifest)
    )
    outputs: dict[int, tuple[bool | None, str]] = {}
    for key, verdict in verification.verdicts.items():
        outputs[int(key)] = (verdict.outputs_match, verdict.reason)
        if verdict.max_abs_error is not None:
            cid = int(key)
            recorder.records[cid] = replace(
                recorder.records[cid], max_abs_error=verdict.max_abs_error
            )
    facts = with_outputs(facts, {cid: outputs[cid] for cid in run.contenders if cid in outputs})
    if verification.real_input_timings is not None and verification.real_input_timings.times_ms:
        facts = with_real_input(
            facts, estimates_from_rounds(run.results["verification"]["real_input_timings"])
        )
    run.facts = facts


def _compilation_info_of(spec_path: Path, context: ir.Context) -> str:
    """Read the compilation_info constant of a one-matcher spec (the winner's own spec); other
    constants (attention's decomposition_config, the lowering_configs of a reduction's other
    ops, a loop count) are not it."""
    with context:
        module = ir.Module.parse(spec_path.read_text())
        found: list[str] = []

        def visit(operation: ir.Operation) -> ir.WalkResult:
            if operation.name == "transform.param.constant":
                value = operation.attributes["value"]
                if iree_codegen.CompilationInfoAttr.isinstance(value):
                    found.append(str(value))
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit)
    assert len(found) == 1, f"expected one configuration in {spec_path}, found {len(found)}"
    return found[0]


def _function_attributes_of(spec_path: Path, context: ir.Context) -> tuple[tuple[str, str], ...]:
    """Read what the winner's spec (one matcher, unless the folder was edited) sets on the
    matched op's function (spec/inspect.py)."""
    with context:
        matchers = list_matchers(ir.Module.parse(spec_path.read_text()).operation)
    return tuple(attribute for matcher in matchers for attribute in matcher.function_attributes)
