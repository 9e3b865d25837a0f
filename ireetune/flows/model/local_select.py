"""The in-process variants phase: the tuned dispatches' specs tried in the whole model.

Each hot dispatch's kept candidates (best first) become variants of the whole model, as in split
mode (`model/variants.plan_variants`): each candidate alone, every dispatch's first candidate
(its verified winner, when it has one) together, and the candidates of each later rank
together. They are linked and compiled in parallel, the joint variant and each dispatch's first
candidate first, then the later ranks' joint variants, then the rest alone, while the time
budget lasts; a variant whose binary equals the default model's or an earlier variant's is not
timed.
Then all are timed beside the default model in one process and the pre-selected few again in a
fresh one (`model/variant_sessions.py`, the device step's way), and MODEL_RULE decides on the
confirmation's intervals (`decide_variants`). The winner's specs are the accepted set that the
decide phase checks once more, dropping any that harm.

One session for every variant instead of one per trial: on a 2-core machine a trial cost a
model compile and a pair of timing processes of its own, and with `--time-budget 600`
MobileNet-v2's selection ran out after 14 trials, 5 of its 24 candidates never tried
(docs/benchmarks.md).
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from ireetune.compile.driver import CompileStatus
from ireetune.compile.pool import default_jobs, hash_binary
from ireetune.core.files import write_text_atomically
from ireetune.flows.model.run import ModelTuningRun, Pause
from ireetune.model.in_model_times import InModelTimes
from ireetune.model.outputs import outputs_match
from ireetune.model.select import MODEL_RULE
from ireetune.model.timing import ModelComparison, ModelRun, repetitions_for
from ireetune.model.variant_build import compile_variants
from ireetune.model.variant_profiles import (
    IN_MODEL_LABEL,
    group_exports,
    group_ratios,
    pick_in_model,
    picked_variant,
    profiles_seconds,
    variant_calls,
)
from ireetune.model.variant_sessions import (
    SessionPlan,
    estimate_against_default,
    sessions_document,
    time_variant_sessions,
)
from ireetune.model.variants import (
    VariantPlan,
    decide_variants,
    dispatch_count,
    held_count,
    plan_variants,
)


class VariantRow(TypedDict):
    """One variant's row of `selection/trials.json`: its specs and how its compile went, then,
    once profiled, its dispatches' ratios inside the model, and once timed, its session's
    figures and the rule's verdict."""

    variant: str
    specs: list[str]
    linked_spec: str
    status: str
    reason: str
    binary_hash: str
    in_model_ratios: NotRequired[dict[str, float]]
    current_ms: NotRequired[float]
    trial_ms: NotRequired[float | None]
    speedup: NotRequired[float | None]
    speedup_low: NotRequired[float | None]
    speedup_high: NotRequired[float | None]
    session: NotRequired[str]
    outputs_match: NotRequired[bool]
    rule: NotRequired[str]
    accepted: NotRequired[bool]


# The variants the first session pre-selects for the confirmation, at most (as in split mode).
CONFIRM_TOP = 3

# The least time each session lasts (when ten times the least rounds allow it). On the 2-core
# development machine a model's calls moved between two speeds 1.5x apart within one session
# (MobileNet-v2, 7.7 and 12.0 ms, every model alike; docs/benchmarks.md): a first session of 5
# rounds of 26 models lasted 6 s and ranked candidates by which speed they happened to run at.
SESSION_MIN_S = 20.0

# How a kept spec's note names the variant it was kept in, when others were kept with it.
_WITH_OTHERS = {
    "best": " (with the other dispatches' first candidates)",
    "combined": " (with the other dispatches' fastest candidates in the first session)",
    IN_MODEL_LABEL: " (with the other dispatches' candidates fastest inside the model)",
}
_WITH_SAME_RANK = " (with the other dispatches' candidates of the same rank)"


# Bisection steps of `fitting_plan`: the session length it finds is within SESSION_MIN_S / 2^20.
FIT_STEPS = 20


def session_plan(
    rounds: int, variants: int, model_ms: float, least_s: float = SESSION_MIN_S
) -> SessionPlan:
    """Plan the two sessions: at least `rounds` rounds in the first (as split mode), and as many
    more, up to ten times that, as make it last `least_s`; the confirmation likewise, from
    at least `max(2 * rounds, 10)` rounds, for the default, `CONFIRM_TOP` variants and a
    combined one."""
    calls = repetitions_for(model_ms)

    def lasting(models: int, least: int) -> int:
        round_s = max(models * calls * model_ms, 1e-3) / 1000.0
        return min(10 * least, max(least, math.ceil(least_s / round_s)))

    confirm = max(2 * rounds, 10)
    return SessionPlan(
        lasting(variants + 1, rounds), calls, CONFIRM_TOP, lasting(CONFIRM_TOP + 2, confirm),
        MODEL_RULE.threshold,
    )  # fmt: skip


def selection_seconds(run: ModelTuningRun, dispatches: int) -> float:
    """Estimate what trying `dispatches` tuned dispatches in the model needs: each one's first
    candidate alone and all of them together, compiled in parallel batches (and a combined
    variant's compile, when there are two dispatches to combine), then timed, then the decide
    and report phases, as `room_for_sessions` counts them before the last batch."""
    variants = dispatches + 1 if dispatches > 1 else dispatches
    batches = math.ceil(variants / (run.options.jobs or default_jobs())) + (dispatches > 1)
    plan = session_plan(run.options.rounds, variants, run.default_ms)
    profiles_s = profiles_seconds(variants, run.default_ms, run.costs.load_s)
    return (
        batches * run.costs.compile_s
        + sessions_seconds(plan, variants, run.default_ms, run.costs.load_s)
        + (dispatches > 1) * profiles_s
        + run.scheduler.tail_seconds(run.costs.load_s)
    )


def confirmation_seconds(plan: SessionPlan, model_ms: float, load_s: float) -> float:
    """Estimate how long the confirmation of `plan` takes: the default, the pre-selected and a
    combined variant, each loaded (`load_s`) and called `confirm_rounds x calls` times."""
    calls = plan.confirm_rounds * plan.calls_per_round
    return (plan.confirm_top + 2) * (load_s + calls * model_ms / 1000.0)


def sessions_seconds(plan: SessionPlan, variants: int, model_ms: float, load_s: float) -> float:
    """Estimate how long both sessions of `plan` take for `variants` variants: the first times
    them and the default, each loaded and called `rounds x calls` times; then the confirmation."""
    calls = plan.rounds * plan.calls_per_round
    first = (variants + 1) * (load_s + calls * model_ms / 1000.0)
    return first + confirmation_seconds(plan, model_ms, load_s)


def fitting_plan(
    rounds: int, variants: int, model_ms: float, load_s: float, available_s: float | None
) -> SessionPlan:
    """Plan the sessions as `session_plan` does, shortened (down to the least rounds) to last
    at most `available_s` when that is given: each lasts as long as the longest `least_s` up to
    `SESSION_MIN_S` whose plan fits (their time grows with it, so it is found by bisection)."""

    def fits(least_s: float) -> bool:
        plan = session_plan(rounds, variants, model_ms, least_s)
        return available_s is None or sessions_seconds(plan, variants, model_ms, load_s) <= (
            available_s
        )

    if fits(SESSION_MIN_S):
        return session_plan(rounds, variants, model_ms)
    low, high = 0.0, SESSION_MIN_S
    for _ in range(FIT_STEPS):
        middle = (low + high) / 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return session_plan(rounds, variants, model_ms, low)


# Whether a batch of compiles fits in the time budget: `room(variants, batch_s)`, with the
# variants built once the batch is, and how long a batch takes.
Room = Callable[[int, float], bool]


def room_for_sessions(run: ModelTuningRun, combinable: bool = True) -> Room:
    """Room for a batch when, after it, the sessions of its variants and the ones before at
    their planned length, their profiles and a combined variant's compile (when `combinable`:
    two dispatches or more were tuned) and the decide and report phases fit in what is left of
    the time budget."""

    def room(variants: int, batch_s: float) -> bool:
        left = run.seconds_left()
        if left is None:
            return True
        plan = session_plan(run.options.rounds, variants, run.default_ms)
        sessions = sessions_seconds(plan, variants, run.default_ms, run.costs.load_s)
        tail_s = run.scheduler.tail_seconds(run.costs.load_s)
        profiles_s = combinable * profiles_seconds(variants, run.default_ms, run.costs.load_s)
        return (1 + combinable) * batch_s + sessions + profiles_s + tail_s <= left

    return room


def room_for_confirmation(run: ModelTuningRun, plan: SessionPlan) -> Room:
    """Room for a batch (the combined variant, after the first session) when, after it, the
    confirmation of `plan` and the decide and report phases fit in what is left."""

    def room(_: int, batch_s: float) -> bool:
        left = run.seconds_left()
        if left is None:
            return True
        confirmation = confirmation_seconds(plan, run.default_ms, run.costs.load_s)
        return batch_s + confirmation + run.scheduler.tail_seconds(run.costs.load_s) <= left

    return room


def _compile_order(plans: list[VariantPlan], joints_first: bool = False) -> list[VariantPlan]:
    """The joint variant of the first candidates first, then every dispatch's first candidate
    alone, then the joint variants of the later ranks (every candidate in a model soonest),
    then the second candidates alone, the third...

    `joints_first` (the variants will be profiled: a joint variant's profile reads each of its
    dispatches' candidates as a variant of one would): every rank's joint variant, then the
    candidates alone, the first ones first."""

    def rank(plan: VariantPlan) -> tuple[int, int, int]:
        if joints_first:
            return (
                plan.dispatch is not None,
                plan.rank,
                -1 if plan.dispatch is None else plan.dispatch,
            )
        if plan.dispatch is None:
            return (0, 0, -1) if plan.rank == 0 else (1, plan.rank, 0)
        return (0, 0, plan.dispatch) if plan.rank == 0 else (2, plan.rank, plan.dispatch)

    return sorted(plans, key=rank)


def _profile(run: ModelTuningRun, folder: Path, label: str, vmfb: Path) -> InModelTimes:
    """Profile one binary of the model inside runs of it (a variant's short stretch)."""
    model = run.under_tuning
    comparison = ModelComparison(
        [(label, vmfb)], model.function, model.inputs_path, folder / "profiles", model.device, 1,
        runtime_flags=run.flag_search.runtime_flags if run.flag_search else (),
    )  # fmt: skip
    return run.executor.profile_model(comparison, variant_calls(run.default_ms))


def _compile_plans(
    run: ModelTuningRun, plans: list[VariantPlan], folder: Path, room: Room
) -> tuple[dict[str, Path], list[VariantRow]]:
    """Link and compile the variants, a batch of parallel compiles at a time while the time
    budget has room for it (`room`); return the distinct binaries by label and a row for each
    variant tried."""
    built: dict[str, Path] = {}
    rows: list[VariantRow] = []
    jobs_at_once = run.options.jobs or default_jobs()
    seen: set[str] | None = None
    batch_s = run.costs.compile_s
    start = 0
    while start < len(plans):
        # A batch that does not fit is cut to the variants that do: on a model that compiles
        # slowly the budget may leave room for one more variant, not for a batch of `jobs`
        # (ZFNet-512, a 58 s compile: its one tuned dispatch, 1.47x alone, was never tried in
        # the model; 2026-12-06).
        batch = plans[start : start + jobs_at_once]
        while batch and not room(len(built) + len(batch), batch_s):
            batch = batch[:-1]
        if not batch:
            break
        start += len(batch)
        if seen is None:
            seen = {hash_binary(run.current_vmfb)} if run.current_vmfb else set()
        batch_started = time.monotonic()
        outcomes = compile_variants(run.executor, run.under_tuning, batch, folder, jobs_at_once)
        batch_s = max(batch_s, time.monotonic() - batch_started)
        for plan, outcome in outcomes:
            row: VariantRow = {
                "variant": plan.label,
                "specs": [str(spec) for spec in plan.specs],
                "linked_spec": str(folder / f"{plan.label}_spec.mlir"),
                "status": outcome.status.value,
                "reason": outcome.reason,
                # The binary is deleted once the run is reported (`remove_variant_binaries`).
                "binary_hash": outcome.binary_hash,
            }
            if outcome.status is not CompileStatus.COMPILED:
                row["reason"] = f"a candidate broke the model's compile: {outcome.reason}"
            elif outcome.binary_hash in seen:
                row.update(
                    {"status": "not-applied", "reason": "the binary equals an earlier model's"}
                )
            else:
                seen.add(outcome.binary_hash)
                built[plan.label] = folder / f"{plan.label}.vmfb"
            rows.append(row)
    return built, rows


def select_variants(run: ModelTuningRun) -> Pause | None:
    """Try the tuned dispatches' specs in the whole model; accept the variant that wins."""
    run.current_vmfb = run.default_vmfb
    folder = run.run_dir / "selection"
    # A selection cut short starts again (`ireetune continue`), its trials with it.
    folder.mkdir(exist_ok=True)
    pending = [
        (hot.name, run.candidates[hot.name])
        for hot in run.hot_set.selected
        if run.candidates.get(hot.name)
    ]
    planned = plan_variants(pending)
    combinable = dispatch_count(planned) > 1
    room = room_for_sessions(run, combinable=combinable)
    # Where the default can be profiled, the variants will be: joint variants read every
    # dispatch's candidates of a rank at once, so they are compiled first. Not when the budget
    # leaves no room for one variant.
    before = None
    if combinable and run.current_vmfb is not None and room(1, run.costs.compile_s):
        before = _profile(run, folder, "default", run.current_vmfb)
    plans = _compile_order(planned, joints_first=before is not None and before.ok)
    built, rows = _compile_plans(run, plans, folder, room) if plans else ({}, [])
    winner = _time_and_decide(run, plans, built, rows, folder, before) if built else None
    if winner is not None:
        run.current_vmfb = built[winner.label]
        dispatch_of = {spec: name for name, specs in pending for spec in specs}
        run.accepted = {dispatch_of[spec]: spec for spec in winner.specs}
        for name, spec in run.accepted.items():
            run.dispatch_notes[name] = (
                f"kept candidate spec {spec.parent.parent.name}/{spec.name}"
                + (
                    _WITH_OTHERS.get(winner.label, _WITH_SAME_RANK if winner.joined else "")
                    if len(winner.specs) > 1
                    else ""
                )
            )
    _note_the_rest(run, pending, rows)
    write_text_atomically(folder / "trials.json", json.dumps(rows, indent=2) + "\n")
    return None


def _fastest_per_dispatch(
    first: dict[str, ModelRun], calls: int, plans: Sequence[VariantPlan]
) -> VariantPlan | None:
    """Combine each dispatch's candidate that the first session found fastest (faster than the
    default, with its outputs) into one variant; None when fewer than two dispatches have one
    or the combination is a planned joint variant's."""
    fastest: dict[int, tuple[float, Path]] = {}
    for plan in plans:
        run = first.get(plan.label)
        if plan.dispatch is None or run is None or not run.ok:
            continue
        if not outputs_match(first["default"].outputs, run.outputs)[0]:
            continue
        estimate = estimate_against_default(first, plan.label, calls)
        if estimate and estimate.speedup > max(1.0, fastest.get(plan.dispatch, (0.0,))[0]):
            fastest[plan.dispatch] = (estimate.speedup, plan.specs[0])
    specs = tuple(fastest[dispatch][1] for dispatch in sorted(fastest))
    joints = {plan.specs for plan in plans if plan.dispatch is None}
    return VariantPlan("combined", specs) if len(specs) > 1 and specs not in joints else None


def _room_for_profiles(run: ModelTuningRun, variants: int, timing: SessionPlan) -> bool:
    """Whether profiling `variants` variants (and the default twice), compiling the picks'
    variant, its confirmation of `timing` and the decide and report phases fit in what is left."""
    left = run.seconds_left()
    needed = (
        profiles_seconds(variants, run.default_ms, run.costs.load_s)
        + run.costs.compile_s
        + confirmation_seconds(timing, run.default_ms, run.costs.load_s)
        + run.scheduler.tail_seconds(run.costs.load_s)
    )
    return left is None or needed <= left


def _pick_in_model(
    run: ModelTuningRun,
    plans: Sequence[VariantPlan],
    built: dict[str, Path],
    first: dict[str, ModelRun],
    rows: list[VariantRow],
    folder: Path,
    before: InModelTimes | None,
) -> tuple[bool, VariantPlan | None]:
    """Profile the default and the built variants inside the model (model/variant_profiles.py)
    and return whether it could, and the variant of each dispatch's candidate fastest there
    (None: no candidate passed, or a planned variant holds those specs). It cannot when two
    dispatches' candidates were not built or the profiler fails. Each variant's row gets its
    dispatches' ratios; selection/in_model.json keeps the profiles' figures."""
    if held_count(plan for plan in plans if plan.label in built) < 2:
        return False, None
    names = [hot.name for hot in run.hot_set.selected if run.candidates.get(hot.name)]
    try:
        groups = group_exports(run.hot_set, names)
    except (OSError, KeyError):
        return False, None
    assert run.current_vmfb is not None
    if before is None:
        before = _profile(run, folder, "default", run.current_vmfb)
    if not before.ok:
        return False, None
    profiles = {label: _profile(run, folder, label, built[label]) for label in built}
    after = _profile(run, folder, "default", run.current_vmfb)
    if not after.ok:
        return False, None
    if not any(group_ratios((before, after), times, groups) for times in profiles.values()):
        # The variants' profiles name no tuned dispatch's export: not a profile to judge by.
        return False, None
    trusted = {
        label
        for label, measured in first.items()
        if label != "default"
        and measured.ok
        and outputs_match(first["default"].outputs, measured.outputs)[0]
    }
    picks = pick_in_model(plans, (before, after), profiles, groups, trusted.__contains__)
    by_label = {plan.label: plan for plan in plans}
    document: dict[str, Any] = {"calls": after.calls, "variants": {}, "picks": []}
    for row in rows:
        label = row["variant"]
        if label in profiles and profiles[label].ok:
            members = by_label[label].members
            ratios = group_ratios((before, after), profiles[label], groups, members)
            row["in_model_ratios"] = {
                names[index]: round(ratios[index], 4) for index in members if index in ratios
            }
            document["variants"][label] = row["in_model_ratios"]
        elif label in profiles:
            document["variants"][label] = profiles[label].reason
    document["picks"] = [
        {"dispatch": names[pick.dispatch], "spec": str(pick.spec), "ratio": round(pick.ratio, 4)}
        for pick in picks
    ]
    write_text_atomically(folder / "in_model.json", json.dumps(document, indent=2) + "\n")
    return True, picked_variant(picks, [by_label[label] for label in built])


def _time_and_decide(
    run: ModelTuningRun,
    plans: Sequence[VariantPlan],
    built: dict[str, Path],
    rows: list[VariantRow],
    folder: Path,
    before: InModelTimes | None = None,
) -> VariantPlan | None:
    """Time the built variants in two sessions, with each dispatch's fastest candidate inside
    the model (the variants profiled after the default's profile `before`, taken now when not
    given), or else of the first session, combined into one more variant for the second; fill
    in their rows; return the winning variant."""
    model, labels = run.under_tuning, list(built)
    assert run.current_vmfb is not None
    current = run.current_vmfb
    runtime_flags = run.flag_search.runtime_flags if run.flag_search else ()

    def session_for(chosen: Sequence[str], name: str, rounds: int, calls: int) -> ModelComparison:
        (folder / name).mkdir(parents=True, exist_ok=True)
        return ModelComparison(
            [("default", current), *((label, built[label]) for label in chosen)],
            model.function, model.inputs_path, folder / name, model.device, rounds, calls,
            runtime_flags=runtime_flags,
        )  # fmt: skip

    by_label = {plan.label: plan for plan in plans}

    def build_more(first: dict[str, ModelRun], calls: int) -> list[str]:
        profiled, plan = (
            _pick_in_model(run, plans, built, first, rows, folder, before)
            if _room_for_profiles(run, len(built), timing)
            else (False, None)
        )
        if not profiled:
            plan = _fastest_per_dispatch(first, calls, plans)
        if plan is None:
            return []
        by_label[plan.label] = plan
        more, more_rows = _compile_plans(run, [plan], folder, room_for_confirmation(run, timing))
        rows.extend(more_rows)
        built.update(more)
        labels.extend(more)
        return list(more)

    left = run.seconds_left()
    # A combined variant needs built candidates of two dispatches (alone, or joined where the
    # variants' profiles read each one's).
    combinable = held_count(by_label[label] for label in labels) > 1
    profiles_s = profiles_seconds(len(labels), run.default_ms, run.costs.load_s)
    available = (
        None
        if left is None
        else left
        - run.scheduler.tail_seconds(run.costs.load_s)
        - combinable * (run.costs.compile_s + profiles_s)
    )
    timing = fitting_plan(
        run.options.rounds, len(labels), run.default_ms, run.costs.load_s, available
    )
    sessions = time_variant_sessions(
        run.executor, session_for, labels, timing, build_more=build_more
    )
    document = sessions_document(sessions, folder, run.run_dir, model.device)
    write_text_atomically(folder / "sessions.json", json.dumps(document, indent=2) + "\n")
    runs = {label: sessions.first.get(label) or sessions.confirm[label] for label in labels}
    outputs_of = {
        label: outputs_match(model.default_outputs, runs[label].outputs)
        if runs[label].ok
        else (False, runs[label].reason)
        for label in labels
    }
    decision, estimates = decide_variants(document, labels, outputs_of)
    winner = labels[decision.winner - 1] if decision.winner is not None else None
    calls = sessions.calls_per_round
    for row in rows:
        label = row["variant"]
        if label not in built:
            continue
        session = sessions.first if label in sessions.first else sessions.confirm
        judgement = decision.judgements.get(labels.index(label) + 1)
        estimate = estimates.get(label) or estimate_against_default(session, label, calls)
        measured = runs[label]
        row.update(
            {
                "current_ms": statistics.median(session["default"].times_ms),
                "trial_ms": statistics.median(measured.times_ms) if measured.ok else None,
                "speedup": estimate.speedup if estimate else None,
                "speedup_low": estimate.low if estimate else None,
                "speedup_high": estimate.high if estimate else None,
                "session": "confirm" if label in sessions.contenders else "first",
                "outputs_match": outputs_of[label][0],
                "rule": MODEL_RULE.name,
                "accepted": label == winner,
                "reason": judgement.reason if judgement else measured.reason or "not pre-selected",
            }
        )
    return by_label[winner] if winner is not None else None


def _note_the_rest(
    run: ModelTuningRun, pending: list[tuple[str, list[Path]]], rows: list[VariantRow]
) -> None:
    """Say, for each tuned dispatch without a kept spec, why; and once when the budget ran out.
    A candidate counts as tried in the model alone or in a joint variant (`in_any`)."""
    tried = {row["specs"][0] for row in rows if len(row["specs"]) == 1}
    in_any = tried | {spec for row in rows if len(row["specs"]) > 1 for spec in row["specs"]}
    broken = {
        row["specs"][0]: row["reason"]
        for row in rows
        if row["status"] not in ("compiled", "not-applied") and len(row["specs"]) == 1
    }
    out_of_time = False
    for name, specs in pending:
        if name in run.accepted:
            continue
        count = sum(1 for spec in specs if str(spec) in tried)
        joined = sum(1 for spec in specs if str(spec) in in_any)
        if joined < len(specs):
            out_of_time = True
            run.dispatch_notes[name] = (
                f"tuned; {joined} of its {len(specs)} candidates tried in the model"
                + (f" ({count} alone)" if count < joined else "")
                + " before the time budget was spent"
            )
        elif count < len(specs):
            run.dispatch_notes[name] = (
                f"every candidate tried in the model, {count} of {len(specs)} alone and the rest "
                "with the other dispatches' candidates of the same rank; none made the model "
                "faster; default kept"
            )
        elif all(str(spec) in broken for spec in specs):
            run.dispatch_notes[name] = broken[str(specs[0])]
        else:
            run.dispatch_notes.setdefault(name, "no candidate made the model faster; default kept")
    if out_of_time:
        run.notes.append("time budget spent during model-level selection")
