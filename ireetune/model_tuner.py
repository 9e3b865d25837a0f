"""Tune a whole model: find its hot dispatches, tune each, keep only what speeds up the model.

Stages (each writes into the run folder):
1. import the model (MLIR as is; ONNX through iree-import-onnx) and make its inputs;
2. compile once with per-dispatch benchmark dumps, count each dispatch's launches, time each
   dispatch and the whole model, and pick the hot set (`--coverage`, `--max-dispatches`);
3. tune each hot problem with the dispatch tuner, keeping its top candidates even when none beats
   the default on its own;
4. model-level selection: first every dispatch's verified winner together (one trial), then,
   greedily for each hot dispatch still without a spec, the linked spec grows by a candidate
   only if the model, timed side by side with the current best, gets faster and its outputs
   still equal the default model's;
5. a final side-by-side check of the default and the tuned model; specs found harmful are dropped.
"""

from __future__ import annotations

import json
import logging
import shutil
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ireetune.compile.driver import (
    DEFAULT_SPECS_FLAG,
)
from ireetune.compile.pool import default_jobs
from ireetune.core.files import write_text_atomically
from ireetune.core.flag_space import FlagSpace
from ireetune.core.records import MODEL_REPORT_FORMAT
from ireetune.core.target import Target
from ireetune.database.keys import describe_device
from ireetune.database.store import compiler_version, default_database_path
from ireetune.decision.rules import DecisionRule, clears_threshold
from ireetune.decision.stats import SpeedupEstimate
from ireetune.dispatch_options import TuneOptions
from ireetune.dispatch_tuner import tune_dispatch
from ireetune.errors import IreetuneError
from ireetune.executor import Executor, open_executor
from ireetune.flags.check import check_flags_with_compiler
from ireetune.flags.file import write_flag_files
from ireetune.flags.model_search import (
    ModelFlagSearch,
    apply_command,
    measure_combined,
    repetitions_for,
    search_model_flags,
)
from ireetune.flags.store import ModelKey, ModelResult, hash_model, record_model_result
from ireetune.flags.trials import FlagSearchResult, describe_trial, trial_row
from ireetune.frontend.model_import import export_torch_module, import_model
from ireetune.frontend.model_inputs import (
    parse_input_spec,
)
from ireetune.model.hot import (
    DispatchProfile,
    HotSet,
    count_dispatch_invocations,
    select_hot_dispatches,
)
from ireetune.model.outputs import outputs_match
from ireetune.model.prepare import ModelUnderTuning, write_model_inputs
from ireetune.model.profile import (
    compile_dispatch_benchmarks,
    describe_dispatches,
    explain_profile,
    write_profile,
)
from ireetune.model.select import (
    MODEL_RULE,
    find_harmful,
    is_faster,
    is_undecided,
    model_speedup,
)
from ireetune.model.timing import ModelComparison, ModelRun, time_dispatch_benchmarks
from ireetune.model_options import ModelTuneOptions
from ireetune.report.ranking import rank_candidates
from ireetune.run_dir import check_output_dir, create_run_dir
from ireetune.spec.link import link_spec_files
from ireetune.targets import parse_target
from ireetune.verify.compare import check_inputs

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DispatchOutcome:
    """What happened to one hot dispatch."""

    name: str
    problem: str
    invocations: int
    share: float
    default_ms: float | None
    tuned_ms: float | None
    kept_spec: str | None
    note: str


@dataclass(frozen=True)
class ModelTuneResult:
    run_dir: Path
    default_ms: float
    tuned_ms: float
    tuned_spec_path: Path | None
    dispatches: tuple[DispatchOutcome, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)
    # The final side-by-side check's paired speedup and interval (None without a tuned spec).
    # With flags tuned, default and tuned here both use them: this is the specs' contribution.
    estimate: SpeedupEstimate | None = None
    # Every global flag of the tuned model (the user's, then the flag phase's winner).
    flags: tuple[str, ...] = ()
    flag_search: FlagSearchResult | None = None
    tuned_flags_path: Path | None = None
    # The untouched default model against the tuned one (flags and spec), side by side.
    combined: SpeedupEstimate | None = None
    # The MLIR that was tuned (an ONNX model's import): what iree-compile takes.
    mlir_path: Path | None = None

    @property
    def speedup(self) -> float:
        return self.default_ms / self.tuned_ms if self.tuned_ms else 1.0


def _profile_dispatches(
    executor: Executor,
    model: ModelUnderTuning,
    run_dir: Path,
    options: ModelTuneOptions,
    device: str,
) -> list[DispatchProfile]:
    dumped, binaries = compile_dispatch_benchmarks(executor, model, run_dir, options.jobs)
    counts = count_dispatch_invocations(model.mlir_path, model.target, run_dir)
    timings = time_dispatch_benchmarks(executor, binaries, device)
    return describe_dispatches(dumped, counts, timings, model.target)


def tune_model(options: ModelTuneOptions) -> ModelTuneResult:
    """Tune a model end to end; see the module docstring for the stages.

    A run that fails before it has learned anything (the model does not import, compile or
    run) leaves no folder behind; a later failure marks the folder's report as failed.
    """
    target = parse_target(options.target).with_global_flags(options.extra_flags)
    check_flags_with_compiler(options.extra_flags, target, "--flags")
    if not 0 < options.coverage <= 1:
        raise IreetuneError("--coverage must be in (0, 1]")
    check_output_dir(options.output_dir)
    # Each --input on its own, before the run folder exists (the model is read later).
    input_specs = [parse_input_spec(text) for text in options.inputs]
    check_inputs(
        [spec.shape for spec in input_specs],
        [spec.element_type for spec in input_specs],
        "the --input values",
    )
    output_existed = options.output_dir.exists()
    run_dir = create_run_dir(options.output_dir, f"model_{options.model_path.stem}")
    try:
        with open_executor(options.executor, options.ray) as executor:
            return _tune_model(options, target, run_dir, executor)
    except BaseException as failure:
        if not (run_dir / "profile.json").exists():
            shutil.rmtree(run_dir, ignore_errors=True)
            if not output_existed and not any(options.output_dir.iterdir()):
                options.output_dir.rmdir()
        else:
            write_text_atomically(
                run_dir / "report.json",
                json.dumps(
                    {"format": MODEL_REPORT_FORMAT, "outcome": "failed", "error": str(failure)},
                    indent=2,
                )
                + "\n",
            )
        raise


def _tune_model(
    options: ModelTuneOptions, target: Target, run_dir: Path, executor: Executor
) -> ModelTuneResult:
    started = time.monotonic()
    mlir_path = import_model(options.model_path, run_dir / "import")
    inputs_path = run_dir / "inputs.npz"
    function = write_model_inputs(mlir_path, options.inputs, options.seed, inputs_path)
    model = ModelUnderTuning(mlir_path, function, inputs_path, target, options.with_default_specs)
    device = options.devices[0] if options.devices else target.runtime_device
    model.device = device
    notes: list[str] = []

    default_vmfb = run_dir / "default.vmfb"
    compile_started = time.monotonic()
    error = model.compile(None, default_vmfb)
    if error:
        raise IreetuneError(f"the model does not compile for {target.name}: {error}")
    model.compile_timeout_s = max(60.0, 10.0 * (time.monotonic() - compile_started))
    first = executor.run_models_side_by_side(
        ModelComparison(
            [("default", default_vmfb)], function, inputs_path, run_dir, device, options.rounds
        )
    )
    if not first["default"].ok:
        raise IreetuneError(f"the default model does not run: {first['default'].reason}")
    model.default_outputs = first["default"].outputs
    default_ms = statistics.median(first["default"].times_ms)
    original_vmfb, flag_search = default_vmfb, None
    flag_request = _flag_search_request(model, options, default_ms)
    if options.search_flags and flag_request.space.options + flag_request.space.combinations:
        flag_search = search_model_flags(executor, flag_request, run_dir / "flags")
        notes.extend(flag_search.notes)
        if flag_search.winner_binary is not None and flag_search.estimate is not None:
            # Everything after this phase (dumps, dispatch tuning, selection) uses the winner.
            model.target = target = target.with_global_flags(
                (*options.extra_flags, *flag_search.winner.flags)
            )
            default_vmfb, default_ms = flag_search.winner_binary, flag_search.estimate.candidate_ms

    profiles = _profile_dispatches(executor, model, run_dir, options, device)
    hot = select_hot_dispatches(profiles, default_ms, options.coverage, options.max_dispatches)
    write_profile(run_dir, hot)

    candidates_by_dispatch: dict[str, list[Path]] = {}
    # Each dispatch's verified winner (decided on real inputs where the target asks for it).
    winners: dict[str, Path] = {}
    # Per spec: (default ms, candidate ms) from the same tuning session of that dispatch.
    session_ms: dict[Path, tuple[float, float]] = {}
    dispatch_notes: dict[str, str] = {}
    for profile in hot.selected:
        if options.time_budget_s is not None and time.monotonic() - started > options.time_budget_s:
            dispatch_notes[profile.name] = "not tuned: time budget spent"
            continue
        try:
            result = tune_dispatch(
                TuneOptions(
                    input_path=profile.benchmark_path,
                    target=options.target,
                    num_candidates=options.num_candidates,
                    output_dir=run_dir / "tuning",
                    jobs=options.jobs,
                    seed=options.seed,
                    database_path=options.database_path,
                    use_database=options.use_database,
                    retune=options.retune,
                    show_progress=options.show_progress,
                    extra_flags=target.global_flags,
                    devices=options.devices,
                ),
                executor,
            )
        except IreetuneError as failure:
            dispatch_notes[profile.name] = f"not tuned: {failure}"
            continue
        if result.reused:
            dispatch_notes[profile.name] = "stored result reused from the tuning database"
        ranked = [r for r in rank_candidates(list(result.records)) if r.spec_path]
        if result.best is not None:
            # The dispatch tuner's verified winner (decided on real inputs where the target asks
            # for it) goes first; the others follow in dispatch-level order.
            winners[profile.name] = result.run_dir / result.best.spec_path
            ranked = [
                result.best,
                *(r for r in ranked if r.candidate_id != result.best.candidate_id),
            ]
        kept = ranked[: options.candidates_per_dispatch]
        candidates_by_dispatch[profile.name] = [result.run_dir / r.spec_path for r in kept]
        for record in kept:
            if record.median_ms and result.baseline_ms == result.baseline_ms:
                session_ms[result.run_dir / record.spec_path] = (
                    result.baseline_ms,
                    record.median_ms,
                )
        if not kept:
            dispatch_notes[profile.name] = "no candidate could be measured"

    accepted: dict[str, Path] = {}
    trials: list[dict[str, Any]] = []
    current_vmfb = default_vmfb
    trial_dir = run_dir / "selection"
    trial_dir.mkdir()

    def run_trial(
        label: str, specs: list[Path], dispatch: str, candidate: str
    ) -> tuple[Path | None, str]:
        """Link `specs`, compile and time the model against the current best; return the
        trial's binary when it is faster with the default's outputs, else why not."""
        trial_spec = trial_dir / f"{label}_spec.mlir"
        link_spec_files(specs, trial_spec)
        trial_vmfb = trial_dir / f"{label}.vmfb"
        error = model.compile(trial_spec, trial_vmfb)
        if error:
            return None, f"a candidate broke the model's compile: {error}"
        runs = time_pair_until_decided(
            executor,
            ModelComparison(
                [("current", current_vmfb), ("trial", trial_vmfb)], function, inputs_path,
                trial_dir, device, options.rounds,
            ),
        )  # fmt: skip
        trial = runs["trial"]
        if not trial.ok:
            return None, f"a candidate broke the model: {trial.reason}"
        matches, why = outputs_match(model.default_outputs, trial.outputs)
        if not matches:
            return None, f"dropped a candidate that changed the model's outputs ({why})"
        estimate = model_speedup(runs["current"].times_ms, trial.times_ms)
        faster = clears_threshold(estimate, MODEL_RULE)
        trials.append(
            {
                "dispatch": dispatch,
                "candidate_spec": candidate,
                "linked_spec": str(trial_spec),
                "current_ms": statistics.median(runs["current"].times_ms),
                "trial_ms": statistics.median(trial.times_ms),
                "speedup": estimate.speedup if estimate else None,
                "speedup_low": estimate.low if estimate else None,
                "speedup_high": estimate.high if estimate else None,
                "rounds": len(trial.times_ms),
                "rule": MODEL_RULE.name,
                "accepted": faster,
            }
        )
        write_text_atomically(trial_dir / "trials.json", json.dumps(trials, indent=2) + "\n")
        return (trial_vmfb, "") if faster else (None, "")

    # The verified winners together first: each alone may move the model by less than a loaded
    # machine's model timing resolves, together by more (docs/benchmarks.md); the final check
    # still drops any that harm.
    if len(winners) > 1:
        joint_vmfb, why = run_trial(
            "joint", list(winners.values()), ", ".join(winners), "every verified winner"
        )
        if joint_vmfb is not None:
            accepted.update(winners)
            current_vmfb = joint_vmfb
            for name, spec in winners.items():
                dispatch_notes[name] = (
                    f"kept candidate spec {spec.parent.parent.name}/{spec.name} "
                    "(with the other verified winners)"
                )
        elif why:
            notes.append(f"the verified winners together were not tried: {why}")
    for trial_index, profile in enumerate(
        p for p in hot.selected if p.name in candidates_by_dispatch and p.name not in accepted
    ):
        for candidate_index, spec in enumerate(candidates_by_dispatch[profile.name]):
            if (
                options.time_budget_s is not None
                and time.monotonic() - started > options.time_budget_s
            ):
                notes.append("time budget spent during model-level selection")
                break
            trial_vmfb, why = run_trial(
                f"t{trial_index}_{candidate_index}",
                [*accepted.values(), spec],
                profile.name,
                str(spec),
            )
            if why:
                dispatch_notes[profile.name] = why
            if trial_vmfb is not None:
                accepted[profile.name] = spec
                current_vmfb = trial_vmfb
                dispatch_notes[profile.name] = (
                    f"kept candidate spec {spec.parent.parent.name}/{spec.name}"
                )
                break
        else:
            dispatch_notes.setdefault(
                profile.name, "no candidate made the model faster; default kept"
            )

    tuned_spec_path, final_default, final_tuned, final_estimate = _finish(
        executor, model, run_dir, accepted, default_vmfb, options, notes
    )
    for name in [n for n in accepted if tuned_spec_path is None or n in _dropped(notes)]:
        dispatch_notes[name] = "candidate spec kept in selection, then dropped at the final check"
        del accepted[name]

    def columns(profile: DispatchProfile) -> tuple[float | None, float | None]:
        # Default and tuned come from the same session: the dispatch's own tuning run.
        spec = accepted.get(profile.name)
        if spec is not None and spec in session_ms:
            return session_ms[spec]
        return profile.dispatch_ms, None

    outcomes = tuple(
        DispatchOutcome(
            name=p.name,
            problem=p.problem,
            invocations=p.invocations,
            share=p.total_ms / max(hot.model_ms, hot.explained_ms) if hot.model_ms else 0.0,
            default_ms=columns(p)[0],
            tuned_ms=columns(p)[1],
            kept_spec=str(accepted[p.name]) if p.name in accepted else None,
            note=dispatch_notes.get(p.name, "" if p in hot.selected else "not selected"),
        )
        for p in hot.ranked
    )
    combined, tuned_flags_path = _finish_flags(
        executor, model, options, run_dir, original_vmfb, default_vmfb, tuned_spec_path, flag_search,
        flag_request, notes,
    )  # fmt: skip
    model_result = ModelTuneResult(
        run_dir, final_default, final_tuned, tuned_spec_path, outcomes, tuple(notes),
        final_estimate, target.global_flags, flag_search, tuned_flags_path, combined, mlir_path,
    )  # fmt: skip
    _write_report(run_dir, options, hot, model_result, time.monotonic() - started)
    return model_result


def tune_torch_module(
    module: Any, example_inputs: tuple[Any, ...], work_dir: Path, **options: Any
) -> ModelTuneResult:
    """Export a torch.nn.Module through iree-turbine and tune the exported model.

    `options` are ModelTuneOptions fields other than `model_path`; inputs are random by default,
    with the example inputs' shapes and types (the exported function's signature).
    """
    mlir_path = export_torch_module(module, example_inputs, work_dir)
    return tune_model(ModelTuneOptions(model_path=mlir_path, **options))


def _flag_search_request(
    model: ModelUnderTuning, options: ModelTuneOptions, default_ms: float
) -> ModelFlagSearch:
    """Describe the flag phase's search from the model and the run's options."""
    default_specs = [DEFAULT_SPECS_FLAG] if model.with_default_specs else []
    return ModelFlagSearch(
        source_path=model.mlir_path, function=model.function, inputs_path=model.inputs_path,
        base_flags=(*model.target.compile_flags(), *default_specs), user_flags=options.extra_flags,
        device=model.device,
        space=FlagSpace((), options.flag_sets) if options.flag_sets else model.target.flag_space(),
        rounds=options.rounds, repetitions=repetitions_for(default_ms),
        max_sets=options.max_flag_sets, jobs=options.jobs or default_jobs(),
        compile_timeout_s=model.compile_timeout_s,
        rule=DecisionRule(threshold=options.flag_threshold, real_input_decides=True),
        run_budget_s=options.time_budget_s,
    )  # fmt: skip


def _finish_flags(
    executor: Executor,
    model: ModelUnderTuning,
    options: ModelTuneOptions,
    run_dir: Path,
    original_vmfb: Path,
    flagged_vmfb: Path,
    tuned_spec_path: Path | None,
    flag_search: FlagSearchResult | None,
    flag_request: ModelFlagSearch,
    notes: list[str],
) -> tuple[SpeedupEstimate | None, Path | None]:
    """Write tuned_flags.txt, time the untouched default against flags plus spec, record both."""
    flags = model.target.global_flags
    runtime_flags = flag_search.runtime_flags if flag_search is not None else ()
    tuned_flags_path = write_flag_files(run_dir, flags, runtime_flags)
    combined = None
    if flag_search is not None and flag_search.improved:
        final_vmfb = flagged_vmfb
        if tuned_spec_path is not None:
            final_vmfb = run_dir / "tuned.vmfb"
            error = model.compile(tuned_spec_path, final_vmfb)
            assert not error, f"the tuned model compiled in the final check: {error}"
        combined, why = measure_combined(
            executor, original_vmfb, final_vmfb, flag_request, run_dir / "final", runtime_flags
        )
        if combined is None:
            notes.append(f"the combined check of flags and spec failed: {why}")
    if options.use_database:
        record_model_result(
            options.database_path or default_database_path(),
            ModelKey(compiler_version(), model.target.name, describe_device(model.device), hash_model(model.mlir_path)),
            ModelResult(
                options.model_path.name, flags,
                flag_search.estimate.speedup if flag_search and flag_search.estimate else None,
                flag_search.estimate.low if flag_search and flag_search.estimate else None,
                flag_search.estimate.high if flag_search and flag_search.estimate else None,
                (flag_search.rule if flag_search else MODEL_RULE).name,
                tuned_spec_path.read_text() if tuned_spec_path else "",
                combined.speedup if combined else None, combined.low if combined else None,
                combined.high if combined else None, str(run_dir),
            ),
        )  # fmt: skip
    return combined, tuned_flags_path


def _dropped(notes: Sequence[str]) -> list[str]:
    """Return the dispatch names the final check dropped (recorded in a note)."""
    for note in notes:
        if note.startswith(_DROPPED_NOTE):
            return note.removeprefix(_DROPPED_NOTE).split(", ")
    return []


_DROPPED_NOTE = "dropped specs that slowed the linked model: "


def _finish(
    executor: Executor,
    model: ModelUnderTuning,
    run_dir: Path,
    accepted: dict[str, Path],
    default_vmfb: Path,
    options: ModelTuneOptions,
    notes: list[str],
) -> tuple[Path | None, float, float, SpeedupEstimate | None]:
    """Link the kept specs, check the tuned model against the default side by side, drop harm.

    Every subset that is kept has been measured: each trial (the current set less one spec,
    or the default model when one spec is left) is timed side by side with the current set.
    """
    final_dir = run_dir / "final"
    final_dir.mkdir()
    counter = iter(range(10_000))
    binaries: dict[tuple[str, ...], Path | None] = {(): default_vmfb}

    def binary_of(names: Sequence[str]) -> Path | None:
        key = tuple(names)
        if key not in binaries:
            label = f"set{next(counter)}"
            spec = final_dir / f"{label}_spec.mlir"
            link_spec_files([accepted[n] for n in names], spec)
            binary = final_dir / f"{label}.vmfb"
            binaries[key] = None if model.compile(spec, binary) else binary
        return binaries[key]

    def compare(first: Path, second: Path) -> dict[str, ModelRun]:
        return time_pair_until_decided(
            executor,
            ModelComparison(
                [("default", first), ("tuned", second)], model.function, model.inputs_path,
                final_dir, model.device, 2 * options.rounds,
            ),
        )  # fmt: skip

    names = list(accepted)
    if names:
        full = binary_of(names)
        full_runs = compare(default_vmfb, full) if full is not None else None
        if (
            full_runs is None
            or not full_runs["tuned"].ok
            or not is_faster(full_runs["default"].times_ms, full_runs["tuned"].times_ms, MODEL_RULE)
        ):

            def better_without(current: Sequence[str], trial: Sequence[str]) -> bool:
                current_binary = binary_of(current)
                if current_binary is None:
                    return True
                trial_binary = binary_of(trial)
                if trial_binary is None:
                    return False
                runs = compare(current_binary, trial_binary)
                if not runs["tuned"].ok:
                    return False
                if not runs["default"].ok:
                    return True
                return is_faster(runs["default"].times_ms, runs["tuned"].times_ms, MODEL_RULE)

            dropped = find_harmful(names, better_without)
            if dropped:
                notes.append(_DROPPED_NOTE + ", ".join(dropped))
            names = [n for n in names if n not in dropped]
    final = binary_of(names) if names else None
    if final is None:
        runs = executor.run_models_side_by_side(
            ModelComparison(
                [("default", default_vmfb)], model.function, model.inputs_path, final_dir,
                model.device, 2 * options.rounds,
            )
        )  # fmt: skip
        default_ms = statistics.median(runs["default"].times_ms)
        notes.append("no dispatch spec made the model faster; no tuned spec written")
        return None, default_ms, default_ms, None
    # The figures reported are one fresh side-by-side session of default and the final set.
    runs = compare(default_vmfb, final)
    matches, why = outputs_match(runs["default"].outputs, runs["tuned"].outputs)
    if not matches:
        raise IreetuneError(
            f"the tuned model's outputs differ from the default's ({why}); no spec written"
        )
    estimate = model_speedup(runs["default"].times_ms, runs["tuned"].times_ms)
    if not clears_threshold(estimate, MODEL_RULE):
        default_ms = statistics.median(runs["default"].times_ms)
        notes.append(
            "the linked spec did not make the model faster in the final side-by-side check "
            f"({estimate.describe() if estimate else 'no timing'}); no tuned spec written"
        )
        return None, default_ms, default_ms, estimate
    tuned_spec = run_dir / "tuned_spec.mlir"
    shutil.copyfile(final.with_name(final.name.removesuffix(".vmfb") + "_spec.mlir"), tuned_spec)
    return (
        tuned_spec,
        statistics.median(runs["default"].times_ms),
        statistics.median(runs["tuned"].times_ms),
        estimate,
    )


# Batches of rounds a comparison may add while it is undecided (`is_undecided`): on this
# project's loaded 2-core machine, 5 rounds of a real-weights ResNet-50 gave intervals 20-60%
# wide (docs/benchmarks.md), wider than the gain of most single dispatches.
MAX_EXTRA_BATCHES = 2


def time_pair_until_decided(executor: Executor, pair: ModelComparison) -> dict[str, ModelRun]:
    """Time two models (`pair.models`, the second the one tried) side by side on `executor` for
    `pair.rounds` rounds, then, while the second looks faster but its interval does not yet
    clear the model rule, for up to `MAX_EXTRA_BATCHES` more batches of rounds; return each
    model's run with every round it was timed in."""
    first, second = pair.models
    labels = (first[0], second[0])
    runs = executor.run_models_side_by_side(pair)
    for _ in range(MAX_EXTRA_BATCHES):
        if not all(runs[label].ok for label in labels):
            break
        estimate = model_speedup(runs[labels[0]].times_ms, runs[labels[1]].times_ms)
        if not is_undecided(estimate, MODEL_RULE):
            break
        more = executor.run_models_side_by_side(pair)
        if not all(more[label].ok for label in labels):
            break
        runs = {
            label: replace(runs[label], times_ms=runs[label].times_ms + more[label].times_ms)
            for label in labels
        }
    return runs


def _flag_report_lines(options: ModelTuneOptions, result: ModelTuneResult) -> list[str]:
    """Say which global flags the tuned model uses, what they were worth, and how to apply them."""
    search = result.flag_search
    lines: list[str] = [""]
    if search is None:
        lines.append(
            "flag phase: not run"
            + (f"; flags given: {' '.join(result.flags)}" if result.flags else "")
        )
    else:
        timed = sum(1 for t in search.trials if t.first is not None)
        skipped = sum(1 for t in search.trials if t.status.value in ("no-effect", "duplicate"))
        verdict = (
            f"kept {search.winner.label}: {search.estimate.describe()} over default flags"
            if search.estimate is not None
            else "no flag set beat the default flags by the rule; defaults kept"
        )
        lines.append(
            f"flag phase ({search.rule.name}): {verdict}; {len(search.trials) - 1} sets tried, "
            f"{skipped} with no effect on the binary or duplicates (not timed), {timed} timed"
        )
        lines.extend(f"  {describe_trial(t)}" for t in search.trials[1:])
        lines.append(f"  all trials: {search.trials_path}")
    if result.combined is not None:
        lines.append(
            f"combined (tuned flags and spec) over default flags without spec: "
            f"{result.combined.describe()} ({result.combined.baseline_ms:.3f} -> "
            f"{result.combined.candidate_ms:.3f} ms, interleaved in one process)"
        )
    if result.tuned_flags_path is not None:
        lines.append(f"tuned flags: {result.tuned_flags_path}")
    if result.tuned_flags_path is not None or result.tuned_spec_path is not None:
        target = parse_target(options.target)
        lines.append(
            "apply: "
            + apply_command(
                result.mlir_path or options.model_path,
                target,
                result.tuned_flags_path,
                result.tuned_spec_path,
            )  # fmt: skip
        )
    return lines


def _write_report(
    run_dir: Path, options: ModelTuneOptions, hot: HotSet, result: ModelTuneResult, wall_s: float
) -> None:
    lines = [
        f"model: {options.model_path}   target: {options.target}",
        ("specs, both under the tuned flags: " if result.flags else "")
        + f"default {result.default_ms:.3f} ms, tuned {result.tuned_ms:.3f} ms, speedup "
        + (result.estimate.describe() if result.estimate else f"{result.speedup:.3f}x")
        + f" (whole model, {2 * options.rounds} calls each, default and tuned interleaved in one "
        "process, 95% paired interval)",
        explain_profile(hot),
        f"tuning wall time {wall_s:.0f} s; {len(hot.selected)} dispatch problem(s) selected, covering "
        f"{hot.covered_ms / max(hot.model_ms, hot.explained_ms, 1e-9):.0%} of dispatch time",
        "",
        f"{'share':>6} {'runs':>4} {'default ms':>10} {'tuned ms':>9}  {'dispatch':<40} problem / note"
        "   (default and tuned ms of a tuned dispatch: its own tuning session)",
    ]
    for outcome in result.dispatches:
        if outcome.share < 0.005 and not outcome.kept_spec and outcome.note == "not selected":
            continue
        lines.append(
            f"{outcome.share:>6.1%} {outcome.invocations:>4} {outcome.default_ms or 0:>10.4f} "
            f"{'-' if outcome.tuned_ms is None else f'{outcome.tuned_ms:.4f}':>9}  "
            f"{outcome.name[:40]:<40} {outcome.problem}"
            + (f" | {outcome.note}" if outcome.note else "")
        )
    lines.extend(f"note: {n}" for n in result.notes)
    if result.tuned_spec_path is not None:
        lines.append(f"tuned spec: {result.tuned_spec_path}")
    lines.extend(_flag_report_lines(options, result))
    text = "\n".join(lines) + "\n"
    write_text_atomically(run_dir / "report.txt", text)
    payload = {
        "format": MODEL_REPORT_FORMAT,
        "model": str(options.model_path),
        "target": options.target,
        # The model and its dispatches were profiled and timed on the first; candidates on all.
        "devices": list(options.devices) or [parse_target(options.target).runtime_device],
        "default_ms": result.default_ms,
        "tuned_ms": result.tuned_ms,
        "speedup": result.speedup,
        "speedup_low": result.estimate.low if result.estimate else None,
        "speedup_high": result.estimate.high if result.estimate else None,
        "rule": MODEL_RULE.name,
        "wall_s": wall_s,
        "tuned_spec": str(result.tuned_spec_path) if result.tuned_spec_path else None,
        "notes": list(result.notes),
        "dispatches": [outcome.__dict__ for outcome in result.dispatches],
        "flags": list(result.flags),
        "tuned_flags": str(result.tuned_flags_path) if result.tuned_flags_path else None,
        "flag_search": (
            {"winner": list(result.flag_search.winner.flags), "rule": result.flag_search.rule.name,
             "trials": [trial_row(t) for t in result.flag_search.trials],
             "trials_file": str(result.flag_search.trials_path)}
            if result.flag_search else None
        ),
        "combined_speedup": result.combined.speedup if result.combined else None,
        "combined_low": result.combined.low if result.combined else None,
        "combined_high": result.combined.high if result.combined else None,
    }  # fmt: skip
    write_text_atomically(
        run_dir / "report.json", json.dumps(payload, indent=2, default=str) + "\n"
    )
