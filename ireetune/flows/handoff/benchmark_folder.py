"""Benchmark and verify a compiled run folder with only the IREE runtime and NumPy installed.

    ireetune measure RUN_DIR [--devices cuda://0,cuda://1]
    python -m ireetune.cli measure RUN_DIR [--devices ...]   (the same, without the console script)

Reads the folder's manifest (written by `ireetune tune-dispatch --stop-after compile`), times
every candidate against each device's baseline (benchmark/campaign.py), runs the reference
programs of the fastest confirmed candidates and of the baseline on the same random inputs,
compares their outputs, and writes `benchmark_results.json` beside the manifest. `ireetune
continue RUN_DIR` then picks the winner and writes its spec.

Nothing on this path may import the IREE compiler or z3 (tests/flows/handoff/test_handoff.py checks).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ireetune.benchmark.campaign import (
    CampaignResult,
    CampaignSettings,
    campaign_to_json,
    run_campaign,
)
from ireetune.benchmark.runner import BenchmarkJob
from ireetune.core.files import write_text_atomically
from ireetune.core.input_archive import write_input_archive
from ireetune.database.run_files import (
    BenchmarkResultsFile,
    RunFileError,
    dump_document,
    read_json_file,
    validate_document,
)
from ireetune.decision.facts import facts_from_campaign
from ireetune.decision.rules import DecisionRule, choose_contenders, contender_limit
from ireetune.decision.stats import Basis
from ireetune.flows.handoff.manifest import (
    RESULTS_NAME,
    Manifest,
    check_inside_folder,
    hash_manifest,
    read_manifest,
    read_references,
)
from ireetune.model.real_inputs import time_on_real_inputs
from ireetune.verify.compare import check_reference_outputs, make_random_inputs

if TYPE_CHECKING:
    from ireetune.executor.base import Executor


def log_step(message: str) -> None:
    """Say on stderr what a runtime-only step is doing, at once (the host may be remote)."""
    sys.stderr.write(f"{message}\n")
    sys.stderr.flush()


def folder_rule(manifest: Manifest) -> DecisionRule:
    """Return the decision rule the folder was compiled for."""
    return DecisionRule(
        threshold=manifest.threshold, real_input_decides=manifest.real_input_decides
    )


def folder_contender_limit(manifest: Manifest) -> int:
    """How many candidates are checked further: more where real inputs decide (pre-selection)."""
    return contender_limit(manifest.verify.top, manifest.real_input_decides)


def choose_folder_contenders(result: CampaignResult, manifest: Manifest) -> list[int]:
    """Return the contenders under the folder's rule (the same call `continue` makes)."""
    facts = facts_from_campaign(result, Basis.DISPATCH)
    return choose_contenders(
        list(facts.values()), folder_rule(manifest), folder_contender_limit(manifest)
    )


def verify_contenders(
    executor: Executor, run_dir: Path, manifest: Manifest, contenders: Sequence[int], device: str
) -> dict[str, Any]:
    """Run the baseline's and the contenders' reference programs on `executor`; compare outputs
    to the baseline's."""
    references = read_references(run_dir, manifest)
    binaries: dict[int, tuple[Path | None, str]] = {}
    for candidate_id in (0, *contenders):
        reference_vmfb, reference_hash = references.get(candidate_id, ("", ""))
        binaries[candidate_id] = (
            (run_dir / reference_vmfb, reference_hash)
            if reference_vmfb
            else (None, "reference program failed to compile")
        )
    inputs_path = run_dir / "verify" / "inputs.npz"
    inputs = make_random_inputs(
        list(manifest.verify.input_shapes), list(manifest.verify.input_types), manifest.verify.seed
    )
    write_input_archive(inputs_path, inputs)
    checked = check_reference_outputs(
        executor, binaries, inputs_path, device,
        manifest.verify.output_type, manifest.verify.reduction_size,
    )  # fmt: skip
    # Outputs that cannot be compared are `unverified`, never `wrong`: nothing says they differ.
    verdicts = {
        str(cid): (
            {"status": "unverified", "reason": why}
            if matches is None
            else {
                "status": "verified" if matches else "wrong",
                "max_abs_error": checked.max_abs_errors[cid],
                "reason": why,
            }
        )
        for cid, (matches, why) in checked.results.items()
    }
    baseline_run = checked.baseline
    if baseline_run is None or baseline_run.output is None:
        reason = (
            baseline_run.reason if baseline_run else "the baseline's reference program did not run"
        )
        return {"baseline_error": reason, "verdicts": verdicts}
    return {"model_level_baseline_ms": baseline_run.median_ms, "verdicts": verdicts}


@dataclass
class MeasureRun:
    """A compiled run folder read back to be measured and checked on this host.

    `load_measure_run` reads the manifest; `measure_folder_stage` times the candidates (or takes
    the first pass's timings where only the output checks of deferred references are due) and
    chooses the contenders; `check_folder_stage` checks their outputs. `save_folder_results`
    writes the results as far as they go (benchmark_results.json) after each stage, with the
    stage reached: "measure" (timed; the output checks not run yet, or waiting for deferred
    references) or "check" (complete). A folder measured but not checked is checked without
    measuring again; `continue` refuses it until then.
    """

    run_dir: Path
    manifest: Manifest
    manifest_hash: str
    results_path: Path
    executor: Executor
    devices: tuple[str, ...]
    # The results as far as they go: on load, an earlier pass's that wait for their output
    # checks; after measuring, this pass's.
    results: dict[str, Any] | None = None
    contenders: list[int] = field(default_factory=list)
    measured_devices: list[str] = field(default_factory=list)
    # The output checks wait for references `continue` compiles: this pass ends after measuring.
    checks_deferred: bool = False


def benchmark_folder(run_dir: Path, devices: Sequence[str] = ()) -> Path:
    """Measure and verify a run folder; return the path of the results file it wrote.

    Where the manifest deferred the reference programs, the first call measures and names the
    leaders whose references `continue` must compile ("pending"); once they are there, the next
    call checks their outputs without measuring again. Everything runs on this host. This is
    the run continued at its measure stage (`ireetune measure`, flows/continue_folder.py).
    """
    from ireetune.flows.sequence import named, run_sequence

    measure_run = load_measure_run(run_dir, devices)
    run_sequence(
        measure_run, named(measure_folder_stage, check_folder_stage), (save_folder_results,)
    )
    return measure_run.results_path


def load_measure_run(run_dir: Path, devices: Sequence[str]) -> MeasureRun:
    """Read a compiled folder's manifest; refuse links that lead out of it before any work."""
    from ireetune.executor.base import LocalExecutor

    manifest = read_manifest(run_dir)
    manifest_hash = hash_manifest(run_dir)
    # Everything written below goes into the folder: refuse links that lead out of it, first.
    results_path = check_inside_folder(run_dir, RESULTS_NAME)
    check_inside_folder(run_dir, "verify").mkdir(exist_ok=True)
    candidate_ids = (0, *(c.candidate_id for c in manifest.candidates))
    for name in ("inputs.npz", *(f"output_{i}.npy" for i in candidate_ids)):
        check_inside_folder(run_dir, f"verify/{name}")
    return MeasureRun(
        run_dir, manifest, manifest_hash, results_path, LocalExecutor(),
        tuple(devices) or manifest.devices,
        results=_pending_verification(run_dir, manifest, manifest_hash),
    )  # fmt: skip


def measure_folder_stage(run: MeasureRun) -> None:
    """Time every candidate against each device's baseline and choose the contenders; where
    the first pass's timings wait for their output checks, take those instead."""
    if run.results is not None:
        run.contenders = [int(cid) for cid in run.results["contenders"]]
        baselines = run.results["campaign"]["baselines"]
        run.measured_devices = [b["device"] for b in baselines if not b.get("error")]
        return
    manifest, run_dir, chosen = run.manifest, run.run_dir, run.devices
    settings = CampaignSettings(
        repetitions=manifest.repetitions, min_repetition_s=manifest.min_repetition_s,
        hopeless_factor=manifest.hopeless_factor, confirm_top=manifest.confirm_top,
        confirm_rounds=manifest.confirm_rounds, min_timeout_s=manifest.benchmark_timeout_s,
    )  # fmt: skip
    jobs = [BenchmarkJob(c.candidate_id, run_dir / c.vmfb) for c in manifest.candidates]
    log_step(f"benchmarking {len(jobs)} candidates of {manifest.problem} on {', '.join(chosen)}")
    result = run_campaign(run.executor, run_dir / manifest.baseline.vmfb, jobs, chosen, settings)
    log_step(f"measured in {result.seconds:.1f} s ({result.measured_per_second:.2f} candidates/s)")
    run.contenders = choose_folder_contenders(result, manifest)
    run.measured_devices = [b.device for b in result.baselines.values() if not b.error]
    if not run.measured_devices:
        errors = "; ".join(f"{b.device}: {b.error}" for b in result.baselines.values())
        raise ValueError(f"no device could be measured ({errors}); nothing was written")
    run.results = {
        "format": BenchmarkResultsFile.FORMAT,
        "devices": list(chosen),
        "campaign": campaign_to_json(result),
        "contenders": run.contenders,
        "verification": {"verdicts": {}},
        "baseline_ms_by_device": {
            b.device: b.reference_ms for b in result.baselines.values() if not b.error
        },
        "numpy_version": np.__version__,
        "manifest_sha256": run.manifest_hash,
        "stage": "measure",
    }
    if run.contenders and run.manifest.references_deferred:
        run.results["verification"]["pending"] = [0, *run.contenders]
        log_step(
            f"candidates {', '.join(map(str, run.contenders))} lead: their reference programs "
            "are compiled by `ireetune continue`, then this command checks their outputs"
        )
        # The output checks wait for `continue`: the results are complete as far as they go.
        run.checks_deferred = True


def check_folder_stage(run: MeasureRun) -> None:
    """Check the contenders' outputs (and time them on real inputs where those decide)."""
    if run.checks_deferred or run.results is None:
        return
    if run.contenders:
        run.results["verification"] = _verify(
            run.executor, run.run_dir, run.manifest, run.contenders, run.measured_devices[0]
        )
    run.results["stage"] = "check"


def save_folder_results(run: MeasureRun, stage: str) -> None:
    """Write benchmark_results.json after every stage, atomically, with the stage it reached
    (its "stage" field): a folder whose checks were cut short is checked again, without
    measuring again, and is never finished on half its results."""
    del stage
    if run.results is not None:
        write_text_atomically(run.results_path, dump_document(BenchmarkResultsFile, run.results))


def _verify(
    executor: Executor, run_dir: Path, manifest: Manifest, contenders: Sequence[int], device: str
) -> dict[str, Any]:
    """Check the contenders' outputs and, where real inputs decide, time them there."""
    log_step(f"verifying candidates {', '.join(map(str, contenders))}")
    verification = verify_contenders(executor, run_dir, manifest, contenders, device)
    passing = [
        c
        for c in contenders
        if verification["verdicts"].get(str(c), {}).get("status") == "verified"
    ]
    if manifest.real_input_decides and passing:
        log_step(
            f"timing candidates {', '.join(map(str, passing))} on real inputs beside the default"
        )
        references = read_references(run_dir, manifest)
        _, raw = time_on_real_inputs(
            executor, {cid: run_dir / references[cid][0] for cid in (0, *passing)},
            run_dir / "verify" / "inputs.npz", run_dir / "verify", device,
            manifest.real_input_rounds,
        )  # fmt: skip
        verification["real_input_timings"] = raw
    return verification


def _pending_verification(
    run_dir: Path, manifest: Manifest, manifest_hash: str
) -> dict[str, Any] | None:
    """Return this folder's results when they wait for output checks: checks cut short, or
    checks whose deferred references are now compiled; None when the folder is to be measured."""
    path = run_dir / RESULTS_NAME
    if not path.exists():
        return None
    try:
        results = read_json_file(path)
        if not isinstance(results, dict) or results.get("manifest_sha256") != manifest_hash:
            return None
        checked = validate_document(path, BenchmarkResultsFile, results, run_dir)
    except RunFileError as error:
        raise RunFileError(f"{error} (remove it to measure the folder again)") from None
    pending = checked.verification.pending
    # Complete: measured again. (An older version's file holds no stage; its pending checks
    # are still due.)
    if checked.stage == "check" and not pending:
        return None
    pending = pending or ()
    missing = [cid for cid in pending if cid not in read_references(run_dir, manifest)]
    if missing:
        raise ValueError(
            f"the reference programs of candidates {', '.join(map(str, missing))} are not compiled "
            f"yet: run `ireetune continue {run_dir}` where the compiler is, then this again"
        )
    if not any(not baseline.error for baseline in checked.campaign.baselines):
        raise ValueError(f"{path}: campaign.baselines holds no measured device")
    return results
