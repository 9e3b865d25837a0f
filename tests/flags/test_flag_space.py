"""The flag space as data, the proposals, and the flag decision: pure functions, no compiler."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pytest

from ireetune.core.errors import IreetuneError
from ireetune.core.flag_space import (
    FlagOption,
    FlagSet,
    FlagSpace,
    make_flag_set,
    propose_flag_sets,
)
from ireetune.decision.rules import DecisionRule
from ireetune.decision.stats import Basis, Statistic, estimate_speedup, split_rounds
from ireetune.flags.check import check_flag_form, parse_flag_text
from ireetune.flags.model_search import with_timing
from ireetune.flags.trials import (
    FlagTrial,
    TrialStatus,
    choose_flag_contenders,
    classify_by_hash,
    judge_flag_sets,
    model_flag_rule,
)
from ireetune.model.timing import ModelRun
from ireetune.targets import parse_target


def union_of_winners(winners: Sequence[FlagSet], tried: Iterable[FlagSet]) -> FlagSet | None:
    """Return the union of sets that each won alone, when it is new and consistent.

    Consistent: no two of the sets give the same option different values (data tiling with
    ukernels `all` and with ukernels `mmt4d` do not combine). None when fewer than two sets won,
    they conflict, or the union was already tried (in any order).
    """
    if len(winners) < 2:
        return None
    chosen: dict[str, frozenset[str]] = {}
    for flag_set in winners:
        for name, values in _values_by_option(flag_set).items():
            if chosen.setdefault(name, values) != values:
                return None
    union = make_flag_set(flag for flag_set in winners for flag in flag_set.flags)
    if frozenset(union.flags) in {frozenset(t.flags) for t in tried}:
        return None
    return union


def _values_by_option(flag_set: FlagSet) -> dict[str, frozenset[str]]:
    """Map each option of a set to its values (a list option repeats its flag, one per value)."""
    values: dict[str, set[str]] = {}
    for flag in flag_set.flags:
        name, _, value = flag.partition("=")
        values.setdefault(name, set()).add(value)
    return {name: frozenset(v) for name, v in values.items()}


DT = "--iree-opt-data-tiling"
OPS = "--iree-dispatch-creation-experimental-set-data-tiling-ops"
SPACE = FlagSpace(
    options=(
        FlagOption("data-tiling", ((DT,),), "pack operands"),
        FlagOption(
            "ukernels",
            (("--iree-llvmcpu-enable-ukernels=mmt4d",), ("--iree-llvmcpu-enable-ukernels=all",)),
            "microkernels",
        ),
        FlagOption("ops", ((f"{OPS}=matmul", f"{OPS}=convolution"),), "convs too", requires=(DT,)),
    ),
    combinations=((DT, "--iree-llvmcpu-enable-ukernels=mmt4d"), (DT,)),
)


def test_proposals_are_singles_with_their_requirements_then_new_combinations() -> None:
    assert [p.flags for p in propose_flag_sets(SPACE, 10)] == [
        (DT,),
        ("--iree-llvmcpu-enable-ukernels=mmt4d",),
        ("--iree-llvmcpu-enable-ukernels=all",),
        (DT, f"{OPS}=matmul", f"{OPS}=convolution"),
        (DT, "--iree-llvmcpu-enable-ukernels=mmt4d"),
    ]
    assert [p.flags for p in propose_flag_sets(SPACE, 2)] == [
        (DT,),
        ("--iree-llvmcpu-enable-ukernels=mmt4d",),
    ]
    assert propose_flag_sets(FlagSpace(()), 10) == []


def test_every_target_declares_flags_it_can_propose() -> None:
    for name in ("cpu", "cuda:sm_80", "rocm:gfx942"):
        proposals = propose_flag_sets(parse_target(name).flag_space(), 100)
        assert len(proposals) >= 5, name
        assert all(check_flag_form(p.flags, name) == p.flags for p in proposals)
    assert propose_flag_sets(parse_target("cpu").flag_space(), 100)[0] == FlagSet((DT,))


def test_the_union_of_winners_is_new_and_consistent() -> None:
    mmt4d = FlagSet((DT, "--iree-llvmcpu-enable-ukernels=mmt4d"))
    all_ukernels = FlagSet(("--iree-llvmcpu-enable-ukernels=all",))
    o3 = FlagSet(("--iree-opt-level=O3",))
    assert union_of_winners([mmt4d, o3], [mmt4d, o3]) == FlagSet(
        (DT, "--iree-llvmcpu-enable-ukernels=mmt4d", "--iree-opt-level=O3")
    )
    # Two values of one option do not combine.
    assert union_of_winners([mmt4d, all_ukernels], [mmt4d, all_ukernels]) is None
    # Already tried, in another order.
    tried = FlagSet(("--iree-opt-level=O3", DT, "--iree-llvmcpu-enable-ukernels=mmt4d"))
    assert union_of_winners([mmt4d, o3], [mmt4d, o3, tried]) is None
    assert union_of_winners([mmt4d], [mmt4d]) is None
    # A list option (one flag per value) is consistent with the same values in another order.
    ops = FlagSet((DT, f"{OPS}=matmul", f"{OPS}=convolution"))
    ops_again = FlagSet((f"{OPS}=convolution", f"{OPS}=matmul", "--iree-opt-level=O3"))
    assert union_of_winners([ops, ops_again], [ops, ops_again]) == FlagSet(
        (DT, f"{OPS}=matmul", f"{OPS}=convolution", "--iree-opt-level=O3")
    )


def test_flag_text_is_split_and_checked_by_form() -> None:
    assert parse_flag_text("--iree-opt-data-tiling  '--iree-opt-level=O3'") == (
        DT,
        "--iree-opt-level=O3",
    )
    assert parse_flag_text("") == ()
    bad = {
        "iree-opt-data-tiling": "is not an iree-compile option",
        "--iree-hal-target-device=cuda": "is set by ireetune itself",
        "--iree-codegen-tuning-spec-path=x.mlir": "is set by ireetune itself",
        "-o x.vmfb": "is not an iree-compile option",
        "'--iree-opt-level=O3 extra'": "contains whitespace",
        "'--unclosed": "cannot split",
    }
    for text, message in bad.items():
        with pytest.raises(IreetuneError) as excinfo:
            parse_flag_text(text)
        assert message in str(excinfo.value), text


def _trial(trial_id: int, flags: tuple[str, ...], status: TrialStatus, binary: str) -> FlagTrial:
    return FlagTrial(trial_id, FlagSet(flags), status, binary_hash=binary)


def test_binaries_equal_to_the_default_or_an_earlier_set_are_not_timed() -> None:
    trials = classify_by_hash(
        [
            _trial(0, (), TrialStatus.DEFAULT, "d"),
            _trial(1, ("--a",), TrialStatus.TIMED, "x"),
            _trial(2, ("--b",), TrialStatus.TIMED, "d"),
            _trial(3, ("--c",), TrialStatus.TIMED, "x"),
            _trial(4, ("--d",), TrialStatus.COMPILE_FAILED, ""),
            _trial(5, ("--e",), TrialStatus.TIMED, "y"),
        ]
    )
    assert [t.status for t in trials] == [
        TrialStatus.DEFAULT,
        TrialStatus.TIMED,
        TrialStatus.NO_EFFECT,
        TrialStatus.DUPLICATE,
        TrialStatus.COMPILE_FAILED,
        TrialStatus.TIMED,
    ]
    assert trials[3].reason == "binary identical to trial 1's"


def _timed(trial_id: int, default_ms: list[float], set_ms: list[float], outputs: bool) -> FlagTrial:
    rounds_default = tuple((t,) for t in default_ms)
    rounds_set = tuple((t,) for t in set_ms)
    estimate = estimate_speedup(rounds_default, rounds_set, Basis.MODEL)
    return FlagTrial(
        trial_id, FlagSet((f"--set-{trial_id}",)), TrialStatus.TIMED, binary_hash=str(trial_id),
        times_ms=tuple(set_ms), first=estimate, confirmed=estimate, outputs_match=outputs,
        reason="" if outputs else "outputs differ from the default's (output 0: 3 of 9 differ)",
    )  # fmt: skip


def test_harmful_neutral_and_wrong_sets_are_rejected_and_the_fastest_passing_set_wins() -> None:
    rule = DecisionRule(threshold=1.01, real_input_decides=True)
    default = [10.0, 10.2, 9.9, 10.1, 10.0, 9.8]
    trials = [
        FlagTrial(0, FlagSet(), TrialStatus.DEFAULT, binary_hash="d"),
        _timed(1, default, [13.0, 13.1, 12.9, 13.2, 13.0, 12.8], outputs=True),  # harmful
        _timed(2, default, [10.1, 10.0, 10.0, 10.2, 9.9, 9.9], outputs=True),  # neutral
        _timed(3, default, [6.0, 6.1, 5.9, 6.0, 6.1, 5.8], outputs=False),  # fast, wrong
        _timed(4, default, [8.0, 8.1, 7.9, 8.0, 8.1, 7.8], outputs=True),  # faster
        _timed(5, default, [9.0, 9.1, 8.9, 9.0, 9.1, 8.8], outputs=True),  # fast
    ]
    contenders = choose_flag_contenders(trials, rule, limit=3)
    assert contenders == [4, 5]
    judged, winner = judge_flag_sets(trials, contenders, rule)
    assert winner == 4
    assert [t.verdict for t in judged] == [
        "",
        "rejected",
        "rejected",
        "rejected",
        "winner",
        "beaten",
    ]
    assert "not faster than 1.01x" in judged[1].reason
    assert "not faster than 1.01x" in judged[2].reason
    assert judged[3].reason.startswith("outputs differ")


def test_no_winner_when_every_set_is_slower() -> None:
    rule = DecisionRule(threshold=1.01, real_input_decides=True)
    default = [10.0, 10.1, 9.9, 10.0]
    trials = [
        FlagTrial(0, FlagSet(), TrialStatus.DEFAULT, binary_hash="d"),
        _timed(1, default, [12.0, 12.1, 11.9, 12.0], outputs=True),
    ]
    contenders = choose_flag_contenders(trials, rule, limit=3)
    judged, winner = judge_flag_sets(trials, contenders, rule)
    assert (contenders, winner, judged[1].verdict) == ([], None, "rejected")


def test_flags_files_hold_one_flag_per_line(tmp_path: Path) -> None:
    from ireetune.flags.file import read_flags_file, write_flags_file

    path = tmp_path / "tuned_flags.txt"
    write_flags_file(path, (DT, "--iree-llvmcpu-enable-ukernels=mmt4d"))
    assert path.read_text() == f"{DT}\n--iree-llvmcpu-enable-ukernels=mmt4d\n"
    assert read_flags_file(path) == (DT, "--iree-llvmcpu-enable-ukernels=mmt4d")
    path.write_text("# a comment\n")
    with pytest.raises(IreetuneError) as excinfo:
        read_flags_file(path)
    assert "'#' is not an iree-compile option" in str(excinfo.value)


def test_the_split_flow_manifest_keeps_the_global_flags(tmp_path: Path) -> None:
    from ireetune.flows.handoff.manifest import (
        FolderCandidate,
        Manifest,
        VerifySettings,
        read_manifest,
        write_manifest,
    )

    baseline = FolderCandidate(0, "binaries/0.vmfb", "verify/reference_0.vmfb", "abc")
    manifest = Manifest(
        problem="mmt4d_4x16x8x16x96x1_f32_f32_f32", target="cpu", devices=("local-task",),
        repetitions=2, min_repetition_s=0.01, hopeless_factor=5.0, confirm_top=2,
        confirm_rounds=2, baseline=baseline, candidates=(),
        verify=VerifySettings(0, ((4, 96, 16, 1), (8, 96, 16, 1)), ("f32", "f32"), "f32", 96, 1),
        global_flags=(DT, "--iree-llvmcpu-enable-ukernels=mmt4d"),
    )  # fmt: skip
    write_manifest(tmp_path, manifest)
    assert read_manifest(tmp_path) == manifest


LM_SESSION = json.loads((Path(__file__).parent / "data" / "tiny_lm_flag_session.json").read_text())


def test_a_set_timed_through_slow_calls_is_judged_by_its_faster_half() -> None:
    """A held-out language model's data tiling, timed beside its default in one session where
    both ran some calls at the machine's slow speed: the medians' interval reaches far below 1,
    and the flag rule's faster halves keep the set (with the default's median as a guard)."""
    default, tiled = LM_SESSION["default_ms"], LM_SESSION["data_tiling_ms"]
    calls = LM_SESSION["calls_per_round"]
    assert max(tiled) > 2 * min(tiled)  # two speeds
    base = FlagTrial(1, FlagSet((DT,)), TrialStatus.TIMED, binary_hash="t")
    default_run = ModelRun("0", (), tuple(default), "")
    trial = with_timing(base, ModelRun("1", (), tuple(tiled), ""), default_run, True, calls)
    rule = model_flag_rule(1.01)
    assert rule.statistic is Statistic.FASTER_HALF
    assert trial.confirmed is not None and trial.confirmed.statistic is Statistic.FASTER_HALF
    assert trial.confirmed.low > 1.05 and trial.confirmed.typical_low is not None
    by_median = estimate_speedup(
        split_rounds(default, calls), split_rounds(tiled, calls), Basis.MODEL
    )
    assert by_median is not None and by_median.low < 0.9 < 1.2 < by_median.speedup
    judged, winner = judge_flag_sets(
        [FlagTrial(0, FlagSet(), TrialStatus.DEFAULT), trial], [1], rule
    )
    assert (winner, judged[1].verdict) == (1, "winner")
    assert "faster-half-mean/median-guard" in rule.name


def test_a_set_fast_only_in_its_fast_calls_ranks_by_its_medians_lower_bound() -> None:
    """Two sets clear the flag rule by their faster halves. The one whose calls run at two
    speeds (MobileNet-v2's one-worker set) has the higher faster-half bound, but its medians'
    lower bound is below the steady set's: the steady set wins, as under the medians."""
    rng = np.random.default_rng(3)
    default = list(10.0 * (1 + rng.normal(0, 0.01, 40)))
    steady = list(7.0 * (1 + rng.normal(0, 0.01, 40)))
    bimodal = list(
        np.where(rng.permutation(np.arange(40) < 18), 5.0, 8.0) * (1 + rng.normal(0, 0.01, 40))
    )
    rule = model_flag_rule(1.01)
    base = FlagTrial(0, FlagSet(), TrialStatus.DEFAULT)
    default_run = ModelRun("0", (), tuple(default), "")
    trials = [base] + [
        with_timing(
            FlagTrial(i, FlagSet((f"--set-{i}",)), TrialStatus.TIMED, binary_hash=str(i)),
            ModelRun(str(i), (), tuple(times), ""), default_run, True, 4,
        )
        for i, times in ((1, bimodal), (2, steady))
    ]  # fmt: skip
    bimodal_estimate, steady_estimate = trials[1].confirmed, trials[2].confirmed
    assert bimodal_estimate is not None and steady_estimate is not None
    assert bimodal_estimate.low > steady_estimate.low  # its fast calls are faster
    assert bimodal_estimate.typical_low is not None and steady_estimate.typical_low is not None
    assert bimodal_estimate.typical_low < steady_estimate.low
    judged, winner = judge_flag_sets(trials, [1, 2], rule)
    assert winner == 2 and judged[1].verdict == "beaten"


def test_a_threshold_under_one_lowers_the_median_guard_with_it() -> None:
    """`--flag-threshold 0` keeps whatever set ran (what the flow tests use to force a winner):
    a set whose typical call is 10% slower passes it, and not the default threshold."""
    default = [10.0, 10.1, 9.9, 10.0, 10.2, 9.8, 10.0, 10.1]
    slower = [11.0, 11.1, 10.9, 11.0, 11.2, 10.8, 11.0, 11.1]
    trial = with_timing(
        FlagTrial(1, FlagSet(("--set-1",)), TrialStatus.TIMED, binary_hash="1"),
        ModelRun("1", (), tuple(slower), ""), ModelRun("0", (), tuple(default), ""), True, 2,
    )  # fmt: skip
    assert trial.confirmed is not None and trial.confirmed.typical_high is not None
    assert trial.confirmed.typical_high < 1.0
    base = FlagTrial(0, FlagSet(), TrialStatus.DEFAULT)
    assert judge_flag_sets([base, trial], [1], model_flag_rule(0.0))[1] == 1
    assert judge_flag_sets([base, trial], [1], model_flag_rule(1.01))[1] is None
