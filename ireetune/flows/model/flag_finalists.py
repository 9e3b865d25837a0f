"""The flag phase's finalists judged with the tuned dispatches (in process, the decide phase's
first step).

The flag phase picks its winner on default dispatch configurations, and the dispatches are
tuned under the winner only. A runner-up that was close there (its confirmed interval overlaps
the winner's) may do better once the dispatches are tuned: another fusion or data tiling can
give the spec more to reach, or less. So, once the selection has kept its specs:

    spec       the kept candidates linked into one spec; when none was kept, each tuned
               dispatch's best candidate (what the selection tried first), said in the note
    compile    each runner-up (at most `MAX_RUNNERS_UP`, highest lower bound first) with the
               spec, and the winner with it when it was kept, plainly; beside each, a compile
               that stops once the executables are configured dumps their configurations, to
               count how many of the spec's matchers land under each set; the final check
               copies the kept flags' binary instead of compiling them again
               (`ModelUnderTuning.built`)
    time       the runners-up side by side with what the run keeps (the winner and the kept
               spec; the winner alone when none was kept), in one interleaved session
    decide     FINALIST_RULE (MODEL_RULE on the medians: flag sets can change how the calls
               wait for a core) over the session's paired intervals, outputs equal to the default's;
               a runner-up that wins replaces the kept flags: its binary without the spec is
               compiled as the run's default, and the final check, tuned_flags.txt and the
               report use its flags

The step runs only when one compile per finalist, the session and that last compile fit in
what the time budget leaves the decide and report phases; runners-up that do not fit are
skipped with a note. A finalist that fails to compile, to run or to match the default's outputs
is dropped with a note: the step never loses what the run kept. Its result goes into
model_run.json (`finalists`), so a continued run does not judge again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

from ireetune.compile.driver import (
    CONFIGURED_PHASE,
    DUMP_CONFIGURATIONS_FLAG,
    CompileStatus,
    build_request,
)
from ireetune.compile.pool import CompileBatch, CompileJob, default_jobs
from ireetune.core.errors import IreetuneError
from ireetune.core.target import Target
from ireetune.decision.rules import CandidateFacts, pick_winner
from ireetune.decision.stats import Statistic
from ireetune.flags.trials import FlagSearchResult, FlagTrial
from ireetune.flows.model.local_select import session_plan
from ireetune.flows.model.run import ModelCosts, ModelTuningRun
from ireetune.flows.model.state import FinalistFile, FinalistsFile
from ireetune.flows.model.state_restore import save_run
from ireetune.model.outputs import outputs_match
from ireetune.model.select import MODEL_RULE
from ireetune.model.timing import ModelComparison
from ireetune.model.variant_sessions import estimate_against_default
from ireetune.spec.apply import count_landed_matchers
from ireetune.spec.link import link_spec_files
from ireetune.targets import parse_target

# Flag sets are judged by their median calls, as the flag phase judges them (flags/trials.py).
FINALIST_RULE = replace(MODEL_RULE, statistic=Statistic.MEDIAN)

FOLDER = "finalists"

# What a compile that stops once the executables are configured costs, as a share of a whole
# compile: 21% for GoogLeNet, 13% for SqueezeNet (2-core EPYC, IREE 3.13, 2026-12-04).
CONFIGURED_SHARE = 0.25

# The runners-up judged beside the winner, at most.
MAX_RUNNERS_UP = 2


@dataclass(frozen=True)
class FlagChoice:
    """What a runner-up kept by the finalists replaces: the flags the run compiles with, its
    default, the flag search's result and the accepted specs, put back by `restore` when the
    final check does not keep every spec the runner-up was judged with."""

    target: Target
    default_vmfb: Path | None
    default_ms: float
    costs: ModelCosts
    flag_search: FlagSearchResult | None
    accepted: dict[str, Path]
    dispatch_notes: dict[str, str]

    @classmethod
    def of(cls, run: ModelTuningRun) -> FlagChoice:
        return cls(
            run.target, run.default_vmfb, run.default_ms, run.costs, run.flag_search,
            dict(run.accepted), dict(run.dispatch_notes),
        )  # fmt: skip

    def restore(self, run: ModelTuningRun) -> None:
        run.target = run.under_tuning.target = self.target
        run.default_vmfb, run.default_ms, run.costs = self.default_vmfb, self.default_ms, self.costs
        run.flag_search = self.flag_search
        run.accepted, run.dispatch_notes = dict(self.accepted), dict(self.dispatch_notes)
        if run.finalists is not None:
            run.finalists = run.finalists.model_copy(update={"kept": run.finalists.flag_winner})


def find_runners_up(search: FlagSearchResult) -> list[FlagTrial]:
    """Return the flag sets that passed the flag rule beside the winner and whose confirmed
    interval overlaps the winner's, highest lower bound first, at most `MAX_RUNNERS_UP`."""
    winner = next((t for t in search.trials if t.verdict == "winner"), None)
    if winner is None or winner.confirmed is None:
        return []
    best = winner.confirmed
    close = [
        t
        for t in search.trials
        if t.verdict == "beaten"
        and t.outputs_match is True
        and t.confirmed is not None
        and t.confirmed.high >= best.low
        and t.confirmed.low <= best.high
    ]
    close.sort(key=lambda t: (-(t.confirmed.low if t.confirmed else 0.0), t.trial_id))
    return close[:MAX_RUNNERS_UP]


def finalists_seconds(run: ModelTuningRun, runners_up: int, spec_kept: bool) -> float:
    """Estimate what judging `runners_up` runners-up takes: their compiles (and the winner's
    with a kept spec) in parallel batches, each with its configuration dump, one session of
    them and the reference, and the compile of a runner-up's own default should it win."""
    jobs = run.options.jobs or default_jobs()
    batches = math.ceil((runners_up + spec_kept) / jobs)
    plan = session_plan(run.options.rounds, runners_up, run.default_ms)
    calls_s = plan.rounds * plan.calls_per_round * run.default_ms / 1000.0
    session_s = (runners_up + 1) * (run.costs.load_s + calls_s)
    return (batches * (1 + CONFIGURED_SHARE) + 1) * run.costs.compile_s + session_s


def _that_fit(run: ModelTuningRun, runners_up: int, spec_kept: bool) -> int:
    """Return how many runners-up the time budget can judge and still leave the decide and
    report phases their time (all of them without a budget)."""
    left = run.seconds_left()
    if left is None:
        return runners_up
    room = left - run.scheduler.tail_seconds(run.costs.load_s)
    while runners_up and finalists_seconds(run, runners_up, spec_kept) > room:
        runners_up -= 1
    return runners_up


def judge_flag_finalists(run: ModelTuningRun) -> None:
    """Judge the flag phase's winner and its close runners-up with the tuned dispatches; keep
    the runner-up's flags when it wins by the model rule; record the result and save the run."""
    search = run.flag_search
    if run.finalists is not None or search is None:
        return
    runners_up = find_runners_up(search)
    if not runners_up:
        return
    (winner,) = [t for t in search.trials if t.verdict == "winner"]
    rows = [FinalistFile(trial=winner.trial_id, verdict="reference")]
    specs, kept = _specs_to_judge(run)
    if not specs:
        # No dispatch was tuned: the flag phase's own judgement stands, and nothing is said.
        return
    count = _that_fit(run, len(runners_up), kept)
    why = ""
    for trial in runners_up[count:]:
        why = why or (
            f"the time budget leaves {max(0.0, run.seconds_left() or 0.0):.0f} s, too little "
            "for a compile of the model per finalist and one session before the final check"
        )
        rows.append(FinalistFile(trial=trial.trial_id, verdict="skipped", reason=why))
    kept_trial = winner.trial_id
    try:
        if count:
            kept_trial = _judge(run, winner, runners_up[:count], specs, kept, rows)
    except IreetuneError as failure:
        # The run keeps what it had: the judging is a chance to do better, never a risk.
        judged = {row.trial for row in rows}
        rows.extend(
            FinalistFile(trial=t.trial_id, verdict="dropped", reason=str(failure))
            for t in runners_up[:count]
            if t.trial_id not in judged
        )
    run.finalists = FinalistsFile(
        line=_describe(search, rows, kept_trial, kept),
        flag_winner=winner.trial_id, kept=kept_trial, finalists=tuple(rows),
    )  # fmt: skip
    run.notes.append(run.finalists.line)
    save_run(run)


def _specs_to_judge(run: ModelTuningRun) -> tuple[list[Path], bool]:
    """Return the specs the finalists are compiled with, and whether they are the kept ones:
    the selection's accepted specs, else each tuned dispatch's best candidate."""
    if run.accepted:
        return list(run.accepted.values()), True
    best = [run.candidates[p.name][0] for p in run.hot_set.selected if run.candidates.get(p.name)]
    return best, False


def _judge(
    run: ModelTuningRun,
    winner: FlagTrial,
    runners_up: list[FlagTrial],
    specs: list[Path],
    spec_kept: bool,
    rows: list[FinalistFile],
) -> int:
    """Compile, time and decide (see the module's docstring); fill in `rows`; return the trial
    whose flags the run keeps."""
    model, folder = run.under_tuning, run.run_dir / FOLDER
    folder.mkdir(exist_ok=True)
    spec = folder / "spec.mlir"
    link_spec_files(specs, spec)
    compiled = _compile_with_spec(run, [*([winner] if spec_kept else []), *runners_up], spec)
    reference = run.default_vmfb
    if spec_kept:
        reference, landed, matchers = compiled[winner.trial_id]
        rows[0] = rows[0].model_copy(update={"landed": landed, "matchers": matchers})
    if reference is None:
        rows[0] = rows[0].model_copy(update={"reason": "did not compile with the spec"})
        rows.extend(
            FinalistFile(trial=t.trial_id, verdict="skipped", reason="no reference to time")
            for t in runners_up
        )
        return winner.trial_id
    binaries = {f"t{t.trial_id}": compiled[t.trial_id][0] for t in runners_up}
    timed = [(label, path) for label, path in binaries.items() if path is not None]
    plan = session_plan(run.options.rounds, len(timed), run.default_ms)
    runtime_flags = run.flag_search.runtime_flags if run.flag_search else ()
    (folder / "session").mkdir(exist_ok=True)
    runs = run.executor.run_models_side_by_side(
        ModelComparison(
            [("default", reference), *timed], model.function, model.inputs_path,
            folder / "session", model.device, plan.rounds, plan.calls_per_round,
            runtime_flags=runtime_flags,
        )
    ) if timed else {}  # fmt: skip
    facts, estimates = [], {}
    for trial in runners_up if timed and runs["default"].ok else []:
        if f"t{trial.trial_id}" not in runs:
            continue
        measured = runs[f"t{trial.trial_id}"]
        matches = measured.ok and outputs_match(model.default_outputs, measured.outputs)[0]
        estimate = estimate_against_default(
            runs, f"t{trial.trial_id}", plan.calls_per_round, FINALIST_RULE.statistic
        )
        estimates[trial.trial_id] = estimate
        facts.append(
            CandidateFacts(trial.trial_id, estimate, outputs_match=matches, confirmed=True)
        )
    decision = pick_winner(facts, [f.candidate_id for f in facts], FINALIST_RULE)
    for trial in runners_up:
        path, landed, matchers = compiled.get(trial.trial_id, (None, None, None))
        judgement = decision.judgements.get(trial.trial_id)
        verdict = judgement.verdict.value if judgement else "dropped"
        reason = judgement.reason if judgement else ""
        if path is None:
            reason = "did not compile with the spec"
        elif any(f.candidate_id == trial.trial_id and f.outputs_match is False for f in facts):
            verdict = "dropped"
        elif judgement is None:
            reason = runs[f"t{trial.trial_id}"].reason or runs["default"].reason
        if verdict == "winner" and not _keep(run, trial, spec_kept, specs):
            verdict, reason = "dropped", "its own default did not compile"
        rows.append(
            FinalistFile(
                trial=trial.trial_id, verdict="kept" if verdict == "winner" else verdict,
                reason=reason, estimate=estimates.get(trial.trial_id), landed=landed,
                matchers=matchers,
            )
        )  # fmt: skip
    kept = [row.trial for row in rows if row.verdict == "kept"]
    return kept[0] if kept else winner.trial_id


def _compile_with_spec(
    run: ModelTuningRun, trials: list[FlagTrial], spec: Path
) -> dict[int, tuple[Path | None, int | None, int | None]]:
    """Compile the model with `spec` under each trial's flags, in parallel; return by trial its
    binary (None: it did not compile) and how many of the spec's matchers landed, of how many.
    The binary is compiled plainly, as the user's iree-compile builds it (a build that dumps
    its configurations runs slower: compile/driver.binary_inputs), and kept for the final
    check to copy; the matchers are counted in the dump of a compile that stops once the
    executables are configured, beside it."""
    model, folder, options = run.under_tuning, run.run_dir / FOLDER, run.options
    jobs, plain = [], {}
    for trial in trials:
        target = parse_target(options.target).with_global_flags(
            (*options.extra_flags, *trial.flag_set.flags)
        )
        name = folder / f"t{trial.trial_id}"
        plain[trial.trial_id] = build_request(
            target, model.mlir_path, name.with_suffix(".vmfb"), spec_path=spec,
            default_specs=model.with_default_specs,
            reproducer_path=name.with_name(f"{name.name}_reproducer.mlir"),
        )  # fmt: skip
        configured = build_request(
            target, model.mlir_path, name.with_name(f"{name.name}_configured.mlir"),
            phase_flags=(CONFIGURED_PHASE,), spec_path=spec,
            default_specs=model.with_default_specs,
            dumps=((DUMP_CONFIGURATIONS_FLAG, name.with_name(f"{name.name}_configurations")),),
        )  # fmt: skip
        jobs.append(CompileJob(trial.trial_id, plain[trial.trial_id], name.with_suffix(".log")))
        jobs.append(CompileJob(-trial.trial_id - 1, configured, name.with_suffix(".configure.log")))
    batch = CompileBatch(jobs, options.jobs or default_jobs(), model.compile_timeout_s)
    outcomes = {outcome.candidate_id: outcome for outcome in run.executor.compile(batch)}
    compiled: dict[int, tuple[Path | None, int | None, int | None]] = {}

    def built(candidate_id: int) -> bool:
        outcome = outcomes.get(candidate_id)
        return outcome is not None and outcome.status is CompileStatus.COMPILED

    for trial_id, request in plain.items():
        if not built(trial_id):
            compiled[trial_id] = (None, None, None)
            continue
        model.remember(request, outcomes[trial_id].binary_hash)
        landed, matchers = (None, None)
        if built(-trial_id - 1):
            configurations = folder / f"t{trial_id}_configurations"
            landed, matchers = count_landed_matchers(spec, configurations)
        compiled[trial_id] = (request.output_path, landed, matchers)
    for trial in trials:
        # The configured programs hold the model's weights (ZFNet-512's: 666 MiB each); only
        # their dumps are read.
        (folder / f"t{trial.trial_id}_configured.mlir").unlink(missing_ok=True)
    return compiled


def _keep(run: ModelTuningRun, trial: FlagTrial, spec_kept: bool, specs: list[Path]) -> bool:
    """Make `trial`'s flags the run's: its binary without the spec is the default the final
    check compares with (flags/N.vmfb, as the flag phase names a winner's), the flag search's
    winner is `trial`, and the specs judged are the accepted ones. False when its default does
    not compile (nothing changes)."""
    search, options = run.flag_search, run.options
    assert search is not None
    target = parse_target(options.target).with_global_flags(
        (*options.extra_flags, *trial.flag_set.flags)
    )
    binary = run.run_dir / "flags" / f"{trial.trial_id}.vmfb"
    model = replace(run.under_tuning, target=target)
    if model.compile(None, binary):
        return False
    run.target = run.under_tuning.target = target
    assert trial.confirmed is not None, "a runner-up has its confirmed interval"
    run.default_vmfb, run.default_ms = binary, trial.confirmed.candidate_ms
    run.costs = replace(run.costs, compile_s=max(run.costs.compile_s, trial.compile_s))
    reason = "kept after being judged with the tuned dispatches"
    trials = tuple(
        replace(t, verdict="winner", reason=reason)
        if t.trial_id == trial.trial_id
        else replace(t, verdict="beaten", reason=f"trial {trial.trial_id} was faster with the tuned dispatches")
        if t.verdict == "winner"
        else t
        for t in search.trials
    )  # fmt: skip
    run.flag_search = replace(
        search, winner=trial.flag_set, estimate=trial.confirmed, trials=trials,
        winner_binary=binary,
    )  # fmt: skip
    if not spec_kept:
        dispatch_of = {
            run.candidates[name][0]: name for name in run.candidates if run.candidates[name]
        }
        run.accepted = {dispatch_of[path]: path for path in specs}
        for name, path in run.accepted.items():
            run.dispatch_notes[name] = (
                f"kept candidate spec {path.parent.parent.name}/{path.name} (with the flags of "
                f"trial {trial.trial_id}, judged with the tuned dispatches)"
            )
    return True


def _describe(
    search: FlagSearchResult, rows: list[FinalistFile], kept: int, spec_kept: bool
) -> str:
    """Say in one line how the flags were judged with their tuned dispatches and what was kept."""
    label = {t.trial_id: t.flag_set.label for t in search.trials}
    with_what = (
        "the kept dispatch candidates linked"
        if spec_kept
        else "each tuned dispatch's best candidate: none was kept, the winner alone is the reference"
    )
    parts = []
    for row in rows:
        figure = f"{row.estimate.describe()} " if row.estimate else ""
        landed = f", {row.landed} of {row.matchers} matchers landed" if row.matchers else ""
        # The rule's verdict on an interval says no more than the interval; any other says why.
        said = row.reason and (row.estimate is None or row.verdict == "dropped")
        reason = f" ({row.reason})" if said else ""
        parts.append(f"[{label[row.trial]}] {figure}{row.verdict}{landed}{reason}")
    return (
        f"flags judged with their tuned dispatches ({with_what}; the model rule, above "
        f"{MODEL_RULE.threshold:g}x): {'; '.join(parts)}; kept [{label[kept]}]"
    )
