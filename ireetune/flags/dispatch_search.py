"""Flag search for one dispatch benchmark, timed at dispatch level (`tune-dispatch --search-flags`).

The stripped dispatch benchmark is compiled from executable sources under the default and each
proposed flag set; binaries equal to the default's are "no effect" (options that act before
dispatches are formed, such as data tiling, can change nothing here) and are not timed. The
distinct ones go through the benchmark campaign (first pass, then every one re-timed interleaved
with the default), and the contenders' outputs are checked on the root op's reference program
compiled under the same flags: a set whose reference program equals the default's is not
verified, so it is rejected. The decision stage's rule decides on the dispatch-level interval.
On the CPU that interval comes from uninitialised buffers (REFERENCE.md): prefer the model-level
search (`tune-dispatch MODEL.mlir --search-flags`, or `ireetune tune`) where a model exists.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from iree.compiler import ir

from ireetune.benchmark.campaign import CampaignSettings, run_campaign
from ireetune.benchmark.runner import BenchmarkJob, BenchmarkStatus
from ireetune.core.errors import IreetuneError
from ireetune.core.flag_space import DEFAULT_FLAGS, FlagSpace
from ireetune.core.input_archive import write_input_archive
from ireetune.core.target import Target
from ireetune.decision.facts import facts_from_campaign
from ireetune.decision.rules import DecisionRule
from ireetune.decision.stats import Basis
from ireetune.flags.model_search import propose_seeds, search_model_flags
from ireetune.flags.trials import (
    TRIALS_FILE_NAME,
    FlagSearchResult,
    ModelFlagSearch,
    TrialStatus,
    choose_flag_contenders,
    classify_by_hash,
    compile_flag_sets,
    judge_flag_sets,
    write_trials,
)
from ireetune.frontend.dispatches import (
    is_dispatch_benchmark,
    parse_module,
    read_mlir_file,
    strip_configurations,
)
from ireetune.frontend.model_inputs import (
    make_model_inputs,
    read_entry_signature,
    read_public_functions,
)
from ireetune.problem.root_op import find_root_op, parse_problem
from ireetune.verify.stage import check_outputs, write_reference

if TYPE_CHECKING:
    from ireetune.executor.base import Executor


@dataclass(frozen=True)
class DispatchFlagSearch:
    """How `tune-dispatch --search-flags` searches: the target and its flag space, the rule's
    threshold, the benchmark campaign's settings (dispatch level), the rounds of a model-level
    search, and the compile pool's size and timeout. `space` None means the target's own."""

    target: Target
    threshold: float
    settings: CampaignSettings
    jobs: int
    compile_timeout_s: float
    seed: int
    model_rounds: int = 5
    max_sets: int = 24
    space: FlagSpace | None = None

    @property
    def flag_space(self) -> FlagSpace:
        return self.space if self.space is not None else self.target.flag_space()


def search_flags_for_input(
    executor: Executor, input_path: Path, search: DispatchFlagSearch, work_dir: Path
) -> FlagSearchResult:
    """Search flags for `tune-dispatch`: on the whole model when the input is a model (timed on
    random inputs of its entry function's signature), else on the dispatch benchmark itself;
    every compile and measurement runs on `executor`."""
    text = read_mlir_file(input_path)
    if is_dispatch_benchmark(text):
        return search_dispatch_flags(executor, input_path, search, work_dir)
    parse_module(text, ir.Context(), input_path)
    # `tune-dispatch` takes no --function: the model's first public function is timed.
    first = next(iter(read_public_functions(text)), "")
    function, signature = read_entry_signature(text, first)
    inputs_path = work_dir / "inputs.npz"
    arrays = make_model_inputs(signature, search.seed)
    write_input_archive(inputs_path, arrays)
    target = search.target
    return search_model_flags(
        executor,
        ModelFlagSearch(
            source_path=input_path, function=function, inputs_path=inputs_path,
            base_flags=tuple(target.compile_flags()), user_flags=target.global_flags,
            device=target.runtime_device, space=search.flag_space, rounds=search.model_rounds,
            jobs=search.jobs, compile_timeout_s=search.compile_timeout_s,
            rule=DecisionRule(threshold=search.threshold, real_input_decides=True),
        ),
        work_dir,
    )  # fmt: skip


def search_dispatch_flags(
    executor: Executor, benchmark_path: Path, search: DispatchFlagSearch, work_dir: Path
) -> FlagSearchResult:
    """Search the target's flag space on one dispatch benchmark (compiling and measuring on
    `executor`); return the winning set."""
    target, rule = search.target, DecisionRule(threshold=search.threshold)
    jobs, compile_timeout_s, seed = search.jobs, search.compile_timeout_s, search.seed
    work_dir.mkdir(parents=True, exist_ok=True)
    context = ir.Context()
    module = parse_module(read_mlir_file(benchmark_path), context, benchmark_path)
    with context:
        root_op = find_root_op(module)
        problem = parse_problem(root_op)
    stripped = work_dir / "stripped_benchmark.mlir"
    strip_configurations(benchmark_path, stripped, compile_timeout_s)
    flag_sets = [
        DEFAULT_FLAGS,
        *propose_seeds(search.flag_space, target.global_flags, search.max_sets),
    ]
    base = (*target.compile_flags(), "--compile-from=executable-sources")
    trials = classify_by_hash(
        compile_flag_sets(
            executor,
            stripped,
            base,
            dict(enumerate(flag_sets)),
            work_dir / "binaries",
            jobs,
            compile_timeout_s,
        )
    )
    if trials[0].status is not TrialStatus.DEFAULT:
        raise IreetuneError(f"the dispatch does not compile with default flags: {trials[0].reason}")
    timed = [t.trial_id for t in trials if t.status is TrialStatus.TIMED]
    binaries = work_dir / "binaries"
    campaign = run_campaign(
        executor,
        BenchmarkJob(0, binaries / "0.vmfb"),
        [BenchmarkJob(i, binaries / f"{i}.vmfb") for i in timed],
        [target.runtime_device],
        replace(search.settings, confirm_top=len(timed)),
    )
    facts = facts_from_campaign(campaign, Basis.DISPATCH)
    for index, trial in enumerate(trials):
        measurement = campaign.candidates.get(trial.trial_id)
        if measurement is None:
            continue
        if measurement.status is not BenchmarkStatus.MEASURED:
            trials[index] = replace(trial, status=TrialStatus.RUN_FAILED, reason=measurement.reason)
            continue
        fact = facts.get(trial.trial_id)
        estimate = fact.dispatch if fact is not None else None
        trials[index] = replace(
            trial, times_ms=measurement.times_ms, first=estimate,
            confirmed=estimate if fact is not None and fact.confirmed else None,
        )  # fmt: skip
    contenders = choose_flag_contenders(trials, rule, len(trials))
    if contenders:
        reference = write_reference(root_op, context, problem, work_dir / "verify", seed)
        programs = compile_flag_sets(
            executor, reference.source_path, tuple(target.compile_flags()),
            {0: trials[0].flag_set, **{i: trials[i].flag_set for i in contenders}},
            work_dir / "verify", jobs, compile_timeout_s,
        )  # fmt: skip
        checks = check_outputs(
            executor,
            problem,
            {
                p.trial_id: (
                    (work_dir / "verify" / f"{p.trial_id}.vmfb", p.binary_hash)
                    if p.status is not TrialStatus.COMPILE_FAILED
                    else (None, f"reference program failed to compile: {p.reason}")
                )
                for p in programs
            },
            reference,
            target.runtime_device,
        )
        for trial_id, (matches, why) in checks.results.items():
            trials[trial_id] = replace(
                trials[trial_id], outputs_match=matches, reason=why or trials[trial_id].reason
            )
    trials, winner_id = judge_flag_sets(trials, contenders, rule)
    winner = trials[winner_id] if winner_id is not None else None
    result = FlagSearchResult(
        winner=winner.flag_set if winner is not None else DEFAULT_FLAGS,
        estimate=winner.confirmed if winner is not None else None,
        trials=tuple(trials),
        rule=rule,
        trials_path=work_dir / TRIALS_FILE_NAME,
        notes=campaign.notes,
        winner_binary=binaries / f"{winner_id}.vmfb" if winner_id is not None else None,
    )
    write_trials(
        result.trials_path, trials, rule,
        {"level": "dispatch", "source": str(benchmark_path), "base_flags": list(base),
         "winner": list(result.winner.flags)},
    )  # fmt: skip
    return result
