"""Whole-model tuning split between a compile host and a runtime-only device host.

The run folder is a state machine (`split.json`). The compile host runs the compile phases; the
device host runs `ireetune device-step RUN`, which does whatever `device_step.json` lists. Each
`ireetune continue RUN` on the compile host reads the device's results and does what is due next:

    prepare     import, inputs, the default model, the dispatch benchmarks (dumped, compiled,
                launches counted), and the candidates of the dispatches a static ranking puts
                first (FLOPs x launches): one dispatch-level benchmark folder each
    [device]    profile the model and every dispatch; measure every dispatch folder
    candidates  only when the measured hot set names a dispatch the static ranking missed: its
                folder, measured in one more round trip
    variants    each hot dispatch's verified winner and runners-up (handoff/finish.py, the
                decision stage) become model variants: each alone, and the winners together
    [device]    every variant timed against the default, interleaved in one process; the fastest
                by point estimate timed again in a fresh session
    decide      the decision stage's rule (MODEL_RULE) on the fresh session's intervals and the
                outputs; the winner's spec is `tuned_spec.mlir`; the report

Two round trips when the static ranking covers the hot set. Every phase can be run again after a
kill: finished sub-steps are recorded in `split.json` and kept. A folder whose model, device
manifest or results do not match the hashes recorded is refused with one line.
"""

from __future__ import annotations

import enum
import math
import shlex
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from iree.compiler import ir

from ireetune.compile.driver import CompileStatus, build_request
from ireetune.compile.pool import CompileBatch, CompileJob, default_jobs
from ireetune.core.target import Target
from ireetune.decision.rules import CandidateFacts, Decision, pick_winner
from ireetune.decision.stats import Basis, SpeedupEstimate, estimate_speedup, split_rounds
from ireetune.dispatch_options import References, StopAfter, TuneOptions
from ireetune.dispatch_tuner import tune_dispatch
from ireetune.errors import IreetuneError
from ireetune.flags.check import check_flags_with_compiler
from ireetune.flags.model_search import repetitions_for
from ireetune.frontend.dispatches import parse_module, read_mlir_file
from ireetune.frontend.model_import import import_model
from ireetune.handoff.finish import finish_run
from ireetune.handoff.manifest import read_manifest
from ireetune.handoff.model_folder import (
    DEVICE_MANIFEST_NAME,
    DeviceManifest,
    LabelledBinary,
    ProfileTask,
    VariantTask,
    check_device_results,
    hash_device_manifest,
    hash_file,
    results_name,
    write_device_manifest,
)
from ireetune.model.gate import skip_small_dispatches
from ireetune.model.hot import (
    DispatchProfile,
    HotSet,
    count_dispatch_invocations,
    select_hot_dispatches,
)
from ireetune.model.outputs import outputs_match
from ireetune.model.prepare import ModelUnderTuning, write_model_inputs
from ireetune.model.profile import compile_dispatch_benchmarks, describe_dispatches, write_profile
from ireetune.model.select import MODEL_RULE
from ireetune.model_options import ModelTuneOptions
from ireetune.problem.family import map_dim_positions
from ireetune.problem.registry import family_of
from ireetune.problem.root_op import find_root_op, parse_problem
from ireetune.report.ranking import rank_candidates
from ireetune.run_dir import check_output_dir, create_run_dir
from ireetune.run_files import RunFileError, read_json_file
from ireetune.spec.link import link_spec_files
from ireetune.split_report import first_session_estimate, write_split_report
from ireetune.split_state import (
    STATE_FORMAT,
    options_from_json,
    options_to_json,
    read_state,
    save_state,
)
from ireetune.targets import parse_target

if TYPE_CHECKING:
    from ireetune.executor.base import Executor


class Phase(enum.StrEnum):
    """Where a split run stands (the values stored in split.json)."""

    PREPARING = "preparing"
    AWAITING_DEVICE = "awaiting-device"
    DONE = "done"


@dataclass(frozen=True)
class SplitStatus:
    """What a compile-host step left: the folder, its phase, and the next command to run."""

    run_dir: Path
    phase: str
    round_trip: int
    next_command: str
    report: str = ""


@dataclass(frozen=True)
class VariantPlan:
    """One model variant: the candidate specs linked into it, in dispatch order."""

    label: str
    specs: tuple[Path, ...]


# Where an op turns from memory-bound to compute-bound, in FLOPs per byte: a rough knee for the
# GPUs and CPUs targeted (an H100 running sm_80 code: about 100; a CPU core: about 20).
FLOPS_PER_BYTE = 50


def estimate_cost(flops: int, operand_bytes: int) -> float:
    """Estimate one launch's time, in bytes-moved units, from a roofline with one knee."""
    return max(flops / FLOPS_PER_BYTE, float(operand_bytes))


def pre_rank_dispatches(
    profiles: Sequence[DispatchProfile], costs: dict[str, float], max_dispatches: int
) -> list[DispatchProfile]:
    """Rank tunable dispatches by estimated cost x launches before anything was timed.

    The measured hot set (after the device's profile) is a subset of the tunable problems of at
    most `max_dispatches`; taking the top `max_dispatches` by estimated cost makes it likely
    that every hot problem's candidates are compiled before the first round trip.
    """
    estimated = [
        replace(p, dispatch_ms=costs.get(p.name, 0.0) * 1e-9 if p.tunable else 0.0)
        for p in profiles
    ]
    return list(select_hot_dispatches(estimated, 0.0, 1.0, max_dispatches).selected)


def plan_variants(candidates: Sequence[tuple[str, Sequence[Path]]]) -> list[VariantPlan]:
    """Plan the model variants from each hot dispatch's candidate specs (best first).

    Each candidate alone (`d<i>c<k>`), and, with two or more dispatches, every dispatch's first
    candidate together (`best`): the combination the per-dispatch verdicts point to.
    """
    plans = [
        VariantPlan(f"d{index}c{rank}", (spec,))
        for index, (_, specs) in enumerate(candidates)
        for rank, spec in enumerate(specs)
    ]
    firsts = tuple(specs[0] for _, specs in candidates if specs)
    if len(firsts) > 1:
        plans.append(VariantPlan("best", firsts))
    return plans


def decide_variants(
    variants: dict[str, Any], labels: Sequence[str], outputs_of: dict[str, tuple[bool, str]]
) -> tuple[Decision, dict[str, SpeedupEstimate | None]]:
    """Reach the verdict on the confirmed variants with the decision stage's MODEL_RULE.

    `labels` gives each variant its id (position + 1; 0 is the default); `outputs_of` each
    variant's output check. Only the confirmation session's intervals decide.
    """
    calls = int(variants["calls_per_round"])
    confirm = variants["confirm"]
    default_times = confirm.get("default", {}).get("times_ms", [])
    estimates: dict[str, SpeedupEstimate | None] = {}
    facts = []
    for label in variants["contenders"]:
        times = confirm.get(label, {}).get("times_ms", [])
        estimate = (
            estimate_speedup(
                split_rounds(default_times, calls), split_rounds(times, calls), Basis.MODEL
            )
            if default_times and times
            else None
        )
        estimates[label] = estimate
        matches, why = outputs_of.get(label, (False, "no outputs"))
        facts.append(
            CandidateFacts(
                labels.index(label) + 1, dispatch=estimate, outputs_match=matches,
                output_reason=why, confirmed=True,
            )
        )  # fmt: skip
    decision = pick_winner(facts, [f.candidate_id for f in facts], MODEL_RULE)
    return decision, estimates


# --- The run's state (split.json: split_state.py) -------------------------------------


def _target_of(options: ModelTuneOptions) -> Target:
    return parse_target(options.target).with_global_flags(options.extra_flags)


def _model_of(run_dir: Path, state: dict[str, Any], target: Target) -> ModelUnderTuning:
    model = state["model"]
    under_tuning = ModelUnderTuning(
        run_dir / model["mlir"], model["function"], run_dir / "inputs.npz", target,
        state["options"]["with_default_specs"],
    )  # fmt: skip
    under_tuning.compile_timeout_s = model.get("compile_timeout_s", 1200.0)
    return under_tuning


def _record_time(state: dict[str, Any], phase: str, host: str, seconds: float) -> None:
    state.setdefault("timings", []).append({"phase": phase, "host": host, "seconds": seconds})


def _relative(run_dir: Path, path: Path) -> str:
    return str(path.resolve().relative_to(run_dir.resolve()))


# --- Compile-host phases --------------------------------------------------------------------


def prepare_split_run(options: ModelTuneOptions) -> SplitStatus:
    """Start a split run: everything the first device step needs, compiled with the executor
    the options choose (`continue_split_run` compiles on this host)."""
    from ireetune.executor import open_executor

    target = _target_of(options)
    check_flags_with_compiler(options.extra_flags, target, "--flags")
    if not 0 < options.coverage <= 1:
        raise IreetuneError("--coverage must be in (0, 1]")
    check_output_dir(options.output_dir)
    run_dir = create_run_dir(options.output_dir, f"model_{options.model_path.stem}")
    state: dict[str, Any] = {
        "format": STATE_FORMAT,
        "phase": Phase.PREPARING,
        "round_trip": 0,
        "options": options_to_json(options),
        "devices": list(options.devices) or [target.runtime_device],
        "done_steps": [],
        "folders": {},
    }
    save_state(run_dir, state)
    with open_executor(options.executor, options.ray) as executor:
        return _prepare(executor, run_dir, state, options)


def _prepare(
    executor: Executor, run_dir: Path, state: dict[str, Any], options: ModelTuneOptions
) -> SplitStatus:
    """Run (or resume) the prepare phase; each finished sub-step is recorded and kept."""
    started = time.monotonic()
    target = _target_of(options)
    done = state["done_steps"]
    if "import" not in done:
        weights = run_dir / "import" / "weights.irpa"
        externalize = options.externalize_weights and options.model_path.suffix == ".onnx"
        mlir_path = import_model(
            options.model_path, run_dir / "import", weights if externalize else None
        )
        if not mlir_path.resolve().is_relative_to(run_dir.resolve()):
            # The folder holds its own copy: later phases compile it, and check its hash.
            copied = run_dir / "import" / mlir_path.name
            copied.parent.mkdir(exist_ok=True)
            shutil.copyfile(mlir_path, copied)
            mlir_path = copied
        function = write_model_inputs(
            mlir_path, options.inputs, options.seed, run_dir / "inputs.npz"
        )
        state["model"] = {
            "source": str(options.model_path), "mlir": _relative(run_dir, mlir_path),
            "mlir_sha256": hash_file(mlir_path), "function": function,
            "parameters": ["import/weights.irpa"] if externalize else [],
        }  # fmt: skip
        done.append("import")
        save_state(run_dir, state)
    model = _model_of(run_dir, state, target)
    if "default" not in done:
        compile_started = time.monotonic()
        error = model.compile(None, run_dir / "default.vmfb")
        if error:
            raise IreetuneError(f"the model does not compile for {target.name}: {error}")
        state["model"]["compile_timeout_s"] = max(60.0, 10.0 * (time.monotonic() - compile_started))
        done.append("default")
        save_state(run_dir, state)
    if "dispatches" not in done:
        dumped, binaries = compile_dispatch_benchmarks(executor, model, run_dir, options.jobs)
        counts = count_dispatch_invocations(model.mlir_path, target, run_dir)
        profiles = describe_dispatches(dumped, counts, {}, target)
        state["dispatches"] = [
            {
                "index": d.index, "name": d.name, "benchmark": _relative(run_dir, d.path),
                "vmfb": _relative(run_dir, binaries[d.index]) if d.index in binaries else "",
                "problem": p.problem, "tunable": p.tunable, "invocations": p.invocations,
                **dict(zip(("flops", "bytes"), _problem_work(d.path) if p.tunable else (0, 0), strict=True)),
            }
            for d, p in zip(dumped, profiles, strict=True)
        ]  # fmt: skip
        done.append("dispatches")
        save_state(run_dir, state)
    profiles = _profiles(run_dir, state, {})
    costs = {d["name"]: estimate_cost(d["flops"], d.get("bytes", 0)) for d in state["dispatches"]}
    ranked = pre_rank_dispatches(profiles, costs, options.max_dispatches)
    _compile_folders(executor, run_dir, state, options, ranked)
    _record_time(state, "prepare", "compile", time.monotonic() - started)
    dispatch_binaries = [
        LabelledBinary(d["name"], d["vmfb"]) for d in state["dispatches"] if d["vmfb"]
    ]
    return _send_to_device(
        run_dir, state, ProfileTask(tuple(dispatch_binaries), options.rounds),
        sorted(state["folders"].values()), None,
    )  # fmt: skip


def _problem_work(benchmark_path: Path) -> tuple[int, int]:
    """Return a dispatch problem's FLOPs and the bytes its operands occupy (2 per element)."""
    context = ir.Context()
    module = parse_module(read_mlir_file(benchmark_path), context, benchmark_path)
    with context:
        problem = parse_problem(find_root_op(module))
        output = [p for p in map_dim_positions(problem.indexing_maps[-1]) if p >= 0]
    inputs = family_of(problem).reference_inputs(problem).shapes
    elements = sum(math.prod(shape) for shape in inputs)
    elements += math.prod(problem.loop_sizes[p] for p in output)
    return problem.flops, 2 * elements


def _profiles(
    run_dir: Path, state: dict[str, Any], dispatch_ms: dict[str, float | None]
) -> list[DispatchProfile]:
    return [
        DispatchProfile(
            d["name"],
            run_dir / d["benchmark"],
            d["problem"],
            d["tunable"],
            dispatch_ms.get(d["name"]),
            d["invocations"],
        )  # fmt: skip
        for d in state["dispatches"]
    ]


def _compile_folders(
    executor: Executor, run_dir: Path, state: dict[str, Any], options: ModelTuneOptions,
    dispatches: Sequence[DispatchProfile],
) -> None:  # fmt: skip
    """Compile a dispatch-level benchmark folder for each problem that has none."""
    for profile in dispatches:
        if profile.problem in state["folders"]:
            continue
        try:
            result = tune_dispatch(
                TuneOptions(
                    input_path=profile.benchmark_path, target=options.target,
                    num_candidates=options.num_candidates, output_dir=run_dir / "tuning",
                    jobs=options.jobs, seed=options.seed, devices=tuple(state["devices"]),
                    use_database=False, show_progress=options.show_progress,
                    extra_flags=options.extra_flags, stop_after=StopAfter.COMPILE,
                    # Every candidate's reference program now, so that one device step both
                    # measures and verifies (deferring them to the leaders costs a round trip).
                    references=References.ALL,
                ),
                executor,
            )  # fmt: skip
        except IreetuneError as failure:
            state.setdefault("notes", []).append(f"{profile.name}: not tuned: {failure}")
            state["folders"][profile.problem] = ""
            save_state(run_dir, state)
            continue
        state["folders"][profile.problem] = _relative(run_dir, result.run_dir)
        save_state(run_dir, state)


def _send_to_device(
    run_dir: Path, state: dict[str, Any], profile: ProfileTask | None, folders: Sequence[str],
    variants: VariantTask | None,
) -> SplitStatus:  # fmt: skip
    """Write the next device manifest, with the hash of every file the step will read."""
    folders = [f for f in folders if f]
    parameters = state["model"].get("parameters", [])
    files = ["inputs.npz", "default.vmfb", *parameters]
    files += [d.vmfb for d in profile.dispatches] if profile else []
    files += [v.vmfb for v in variants.variants] if variants else []
    for folder in folders:
        folder_manifest = read_manifest(run_dir / folder)
        files.append(f"{folder}/handoff.json")
        for entry in (folder_manifest.baseline, *folder_manifest.candidates):
            files += [f"{folder}/{path}" for path in (entry.vmfb, entry.reference_vmfb) if path]
    round_trip = state["round_trip"] + 1
    manifest = DeviceManifest(
        round_trip=round_trip, target=state["options"]["target"], devices=tuple(state["devices"]),
        function=state["model"]["function"], inputs="inputs.npz", default_model="default.vmfb",
        files={f: hash_file(run_dir / f) for f in files}, profile=profile,
        folders=tuple(folders), variants=variants, parameters=tuple(parameters),
    )  # fmt: skip
    state["device_manifest_sha256"] = write_device_manifest(run_dir, manifest)
    state.update(phase=Phase.AWAITING_DEVICE, round_trip=round_trip)
    save_state(run_dir, state)
    return SplitStatus(run_dir, Phase.AWAITING_DEVICE, round_trip, _device_step_command(run_dir))


def continue_split_run(run_dir: Path, jobs: int | None = None) -> SplitStatus:
    """Do what is due next in a split run, after a device step (or resume a stopped phase);
    compile on this host (the local executor)."""
    from ireetune.executor.base import LocalExecutor

    executor = LocalExecutor()
    state = read_state(run_dir)
    options = options_from_json(state["options"], jobs)
    model = state.get("model")
    if model is not None and hash_file(run_dir / model["mlir"]) != model["mlir_sha256"]:
        raise IreetuneError(
            f"{run_dir / model['mlir']} changed since the run was prepared; start a new run"
        )
    if state["phase"] == Phase.DONE:
        return SplitStatus(run_dir, Phase.DONE, state["round_trip"], "", _report_text(run_dir))
    if state["phase"] == Phase.PREPARING:
        return _prepare(executor, run_dir, state, options)
    if hash_device_manifest(run_dir) != state["device_manifest_sha256"]:
        raise IreetuneError(
            f"{run_dir / DEVICE_MANIFEST_NAME} is not the one this run wrote; the folder was "
            "changed after it was compiled"
        )
    results = _read_results(run_dir, state)
    started = time.monotonic()
    if f"device {state['round_trip']}" not in [t["phase"] for t in state.get("timings", [])]:
        _record_time(
            state, f"device {state['round_trip']}", "device", float(results["seconds"]["total"])
        )
        save_state(run_dir, state)
    if "profile" in results:
        state["profile"] = results["profile"]
    # `device-step --devices` may have measured on other devices than the run was prepared for.
    state["devices"] = list(results.get("devices") or state["devices"])
    for folder, outcome in results.get("folders", {}).items():
        state.setdefault("folder_outcomes", {})[folder] = outcome
    if "profile" not in state:
        raise IreetuneError(f"{run_dir}: the device results hold no profile; run the device step")
    hot = _hot_set(run_dir, state, options)
    if "variants" in results and "variants" in state:
        return _decide(run_dir, state, options, hot, results["variants"], started)
    missing = [p for p in hot.selected if p.problem not in state["folders"]]
    if missing:
        _compile_folders(executor, run_dir, state, options, missing)
        _record_time(state, "candidates", "compile", time.monotonic() - started)
    # Folders of hot problems that no device step has measured yet (compiled just now, or
    # before a kill) go out in one more round trip.
    outcomes = state.get("folder_outcomes", {})
    unmeasured = sorted(
        {state["folders"][p.problem] for p in hot.selected if state["folders"].get(p.problem)}
        - set(outcomes)
    )
    if unmeasured:
        return _send_to_device(run_dir, state, None, unmeasured, None)
    variants = _build_variants(executor, run_dir, state, options, hot)
    _record_time(state, "variants", "compile", time.monotonic() - started)
    if variants is None:
        return _decide(run_dir, state, options, hot, None, started)
    return _send_to_device(run_dir, state, None, [], variants)


def _device_step_command(run_dir: Path) -> str:
    """Spell the device step of a run folder as a shell command (a path with spaces quoted)."""
    return shlex.join(["ireetune", "device-step", str(run_dir)])


def _read_results(run_dir: Path, state: dict[str, Any]) -> dict[str, Any]:
    """Read the current round trip's device results; refuse those of another manifest."""
    path = run_dir / results_name(state["round_trip"])
    if not path.exists():
        raise IreetuneError(
            f"{run_dir} waits for the device: run `{_device_step_command(run_dir)}` on the GPU "
            "host, then continue"
        )
    results = read_json_file(path)
    if (
        not isinstance(results, dict)
        or results.get("manifest_sha256") != state["device_manifest_sha256"]
    ):
        raise IreetuneError(
            f"{path} was not measured from this run's {DEVICE_MANIFEST_NAME}; run the device "
            f"step again: {_device_step_command(run_dir)}"
        )
    try:
        check_device_results(path, results, run_dir)
    except RunFileError as error:
        raise IreetuneError(f"{error}; run the device step again") from None
    if results.get("done") is not True:
        raise IreetuneError(
            f"the device step of {run_dir} was stopped before it finished; run it again (it "
            f"keeps what was measured): {_device_step_command(run_dir)}"
        )
    return results


def _hot_set(run_dir: Path, state: dict[str, Any], options: ModelTuneOptions) -> HotSet:
    profile = state["profile"]
    profiles = _profiles(run_dir, state, profile["dispatch_ms"])
    hot = select_hot_dispatches(
        profiles, profile["model_ms"], options.coverage, options.max_dispatches
    )
    hot, skipped = skip_small_dispatches(hot, MODEL_RULE.threshold)
    state.setdefault("dispatch_notes", {}).update(skipped)
    write_profile(run_dir, hot)
    return hot


def _ranked_specs(folder: Path, limit: int) -> tuple[list[Path], str]:
    """Finish a measured dispatch folder; return its candidate specs, verified winner first."""
    result = finish_run(folder)
    ranked = [r for r in rank_candidates(list(result.records)) if r.spec_path]
    if result.best is not None:
        ranked = [result.best, *(r for r in ranked if r.candidate_id != result.best.candidate_id)]
    note = (
        f"dispatch winner {result.best.candidate_id}: {result.decision.winner_estimate.describe()}"
        if result.best is not None and result.decision and result.decision.winner_estimate
        else "no candidate won at dispatch level; the fastest measured are tried in the model"
    )
    return [folder / r.spec_path for r in ranked[:limit]], note


def _build_variants(
    executor: Executor, run_dir: Path, state: dict[str, Any], options: ModelTuneOptions, hot: HotSet
) -> VariantTask | None:
    """Link and compile the model variants; None when no hot dispatch has a candidate."""
    candidates: list[tuple[str, list[Path]]] = []
    notes = state.setdefault("dispatch_notes", {})
    for profile in hot.selected:
        folder = state["folders"].get(profile.problem, "")
        outcome = state.get("folder_outcomes", {}).get(folder, "not measured")
        if not folder or outcome != "measured":
            notes[profile.name] = notes.get(profile.name) or f"not tuned: {outcome}"
            continue
        try:
            specs, note = _ranked_specs(run_dir / folder, options.candidates_per_dispatch)
        except IreetuneError as failure:
            notes[profile.name] = f"not tuned: {failure}"
            continue
        notes[profile.name] = note
        if specs:
            candidates.append((profile.name, specs))
    plans = plan_variants(candidates)
    if not plans:
        return None
    target = _target_of(options)
    model = _model_of(run_dir, state, target)
    variant_dir = run_dir / "variants"
    variant_dir.mkdir(exist_ok=True)
    jobs = []
    for index, plan in enumerate(plans):
        spec = variant_dir / f"{plan.label}_spec.mlir"
        link_spec_files(list(plan.specs), spec)
        jobs.append(
            CompileJob(
                candidate_id=index,
                request=build_request(
                    target, model.mlir_path, variant_dir / f"{plan.label}.vmfb", spec_path=spec,
                    default_specs=model.with_default_specs,
                    reproducer_path=variant_dir / f"{plan.label}_reproducer.mlir",
                ),
                log_path=variant_dir / f"{plan.label}.log",
            )
        )  # fmt: skip
    default_hash = hash_file(run_dir / "default.vmfb")
    built: list[LabelledBinary] = []
    variant_rows = []
    for outcome in sorted(
        executor.compile(
            CompileBatch(jobs, options.jobs or default_jobs(), model.compile_timeout_s)
        ),
        key=lambda o: o.candidate_id,
    ):
        plan = plans[outcome.candidate_id]
        row = {
            "label": plan.label, "specs": [_relative(run_dir, s) for s in plan.specs],
            "spec": f"variants/{plan.label}_spec.mlir", "status": outcome.status.value,
            "reason": outcome.reason,
        }  # fmt: skip
        if outcome.status is CompileStatus.COMPILED and outcome.binary_hash == default_hash:
            row.update(status="not-applied", reason="the binary equals the default model's")
        elif outcome.status is CompileStatus.COMPILED:
            built.append(LabelledBinary(plan.label, f"variants/{plan.label}.vmfb"))
        variant_rows.append(row)
    state["variants"] = variant_rows
    save_state(run_dir, state)
    if not built:
        return None
    model_ms = float(state["profile"]["model_ms"])
    return VariantTask(
        tuple(built), rounds=options.rounds, calls_per_round=repetitions_for(model_ms),
        confirm_top=3, confirm_rounds=max(2 * options.rounds, 10), threshold=MODEL_RULE.threshold,
    )  # fmt: skip


def _load_outputs(path: Path) -> tuple[np.ndarray[Any, Any], ...]:
    with np.load(path) as archive:
        return tuple(archive[f"arr_{i}"] for i in range(len(archive.files)))


def _decide(
    run_dir: Path, state: dict[str, Any], options: ModelTuneOptions, hot: HotSet,
    variants: dict[str, Any] | None, started: float,
) -> SplitStatus:  # fmt: skip
    """Decide among the confirmed variants; write tuned_spec.mlir (if one won) and the report."""
    labels = [row["label"] for row in state.get("variants", [])]
    decision: Decision | None = None
    estimates: dict[str, SpeedupEstimate | None] = {}
    winner_label = None
    if variants is not None:
        first = variants["first"]
        default_outputs = _load_outputs(run_dir / first["default"]["outputs"])
        outputs_of = {
            label: outputs_match(default_outputs, _load_outputs(run_dir / entry["outputs"]))
            if entry.get("outputs")
            else (False, entry.get("reason") or "did not run")
            for label, entry in first.items()
            if label != "default"
        }
        decision, estimates = decide_variants(variants, labels, outputs_of)
        for row in state["variants"]:
            judgement = decision.judgements.get(labels.index(row["label"]) + 1)
            estimate = estimates.get(row["label"])
            run = first.get(row["label"])
            row["outputs_match"] = outputs_of.get(row["label"], (None, ""))[0]
            row["confirmed"] = row["label"] in variants["contenders"]
            row["speedup"] = estimate.speedup if estimate else None
            row["speedup_low"] = estimate.low if estimate else None
            row["speedup_high"] = estimate.high if estimate else None
            row["verdict"] = judgement.verdict.value if judgement else ""
            row["why"] = judgement.reason if judgement else (run or {}).get("reason", "")
            first_estimate = first_session_estimate(variants, row["label"])
            row["first_speedup"] = first_estimate.speedup if first_estimate else None
            if not judgement and first_estimate and not row["why"]:
                row["why"] = f"not pre-selected: first session {first_estimate.speedup:.3f}x" + (
                    "" if row["outputs_match"] else ", outputs differ"
                )
        if decision.winner is not None:
            winner_label = labels[decision.winner - 1]
    tuned_spec = run_dir / "tuned_spec.mlir"
    if winner_label is not None:
        shutil.copyfile(run_dir / "variants" / f"{winner_label}_spec.mlir", tuned_spec)
    state.update(phase=Phase.DONE, winner=winner_label, rule=MODEL_RULE.name)
    _record_time(state, "decide", "compile", time.monotonic() - started)
    save_state(run_dir, state)
    write_split_report(run_dir, state, options, hot, variants, decision, estimates)
    return SplitStatus(run_dir, Phase.DONE, state["round_trip"], "", _report_text(run_dir))


def _report_text(run_dir: Path) -> str:
    path = run_dir / "report.txt"
    return path.read_text() if path.exists() else ""


def describe_status(status: SplitStatus) -> str:
    """Say, for the command line, where the run stands and what to run next."""
    if status.phase == Phase.DONE:
        return f"{status.report}run folder: {status.run_dir}\n"
    return (
        f"run folder: {status.run_dir}\nround trip {status.round_trip}: copy the folder to the "
        f"GPU host and run there (runtime only): {status.next_command}\n"
        f"then, here: {shlex.join(['ireetune', 'continue', str(status.run_dir)])}\n"
    )
