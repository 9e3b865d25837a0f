"""Each tuned dispatch's candidates judged by their own time inside the model's variants (the
HAL profiler's per-dispatch times, corrected by the untouched dispatches as a clock)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ireetune.model.hot import DispatchProfile, HotSet
from ireetune.model.in_model_times import InModelTimes
from ireetune.model.variant_profiles import (
    IN_MODEL_LABEL,
    PICK_MARGIN,
    InModelPick,
    group_exports,
    group_ratios,
    pick_in_model,
    picked_variant,
    profiles_seconds,
    variant_calls,
)
from ireetune.model.variants import plan_variants


def _times(**per_call_ms: float) -> InModelTimes:
    return InModelTimes(dict(per_call_ms), {name: 1 for name in per_call_ms}, 10)


# Two tuned groups: "a" (one export) and "b" (a problem that repeats: two exports); "rest" is
# no group's, so it is the clock.
GROUPS = [frozenset({"a"}), frozenset({"b1", "b2"})]
DEFAULT = _times(a=2.0, b1=1.0, b2=1.0, rest=6.0)


def test_a_group_s_ratio_is_its_time_over_the_default_s_with_the_untouched_rest_as_clock() -> None:
    # The variant's profile ran on a machine 1.2x slower (the rest took 7.2 ms, not 6): group a
    # took 1.8 ms, which is 0.9 of the default on that clock's slower run, 0.75 once corrected.
    ratios = group_ratios([DEFAULT], _times(a=1.8, b1=1.2, b2=1.2, rest=7.2), GROUPS)
    assert ratios[0] == pytest.approx(0.75)
    # b's two exports add up: 2.4 ms against 2.0, on the 1.2x clock: unchanged.
    assert ratios[1] == pytest.approx(1.0)
    # Two profiles of the default are averaged.
    slower_default = _times(a=2.2, b1=1.1, b2=1.1, rest=6.6)
    both = group_ratios(
        [DEFAULT, slower_default], _times(a=2.1, b1=1.05, b2=1.05, rest=6.3), GROUPS
    )
    assert both == pytest.approx({0: 1.0, 1: 1.0})
    # Where the untouched dispatches are too small a share of the model, no clock corrects.
    tiny_rest = _times(a=4.0, b1=2.0, b2=2.0, rest=0.1)
    uncorrected = group_ratios([tiny_rest], _times(a=2.0, b1=2.0, b2=2.0, rest=0.2), GROUPS)
    assert uncorrected[0] == pytest.approx(0.5)
    # A group the variant's profile does not name has no ratio.
    assert 1 not in group_ratios([DEFAULT], _times(a=2.0, rest=6.0), GROUPS)


PLANS = plan_variants([("a", [Path("a0"), Path("a1")]), ("b", [Path("b0"), Path("b1")])])


def test_each_dispatch_s_fastest_candidate_inside_the_model_is_picked_past_the_margin() -> None:
    profiles = {
        # The joint variant of the first candidates: a0 is slower in the model, b0 faster.
        "best": _times(a=2.4, b1=0.8, b2=0.8, rest=6.0),
        # a0 alone agrees; b0 alone was not built.
        "d0c0": _times(a=2.2, b1=1.0, b2=1.0, rest=6.0),
        # a1 is 0.9x in the model; b1 only just below the default (0.985x): not past the margin.
        "rank1": _times(a=1.8, b1=0.985, b2=0.985, rest=6.0),
        "d0c1": _times(a=1.8, b1=1.0, b2=1.0, rest=6.0),
    }
    picks = pick_in_model(PLANS, [DEFAULT], profiles, GROUPS, lambda label: True)
    assert picks == [
        InModelPick(0, Path("a1"), pytest.approx(0.9)),
        InModelPick(1, Path("b0"), pytest.approx(0.8)),
    ]
    assert PICK_MARGIN < 0.985
    variant = picked_variant(picks, PLANS)
    assert variant is not None and variant.label == IN_MODEL_LABEL
    assert variant.specs == (Path("a1"), Path("b0")) and variant.joined == (0, 1)
    # A variant whose outputs differ from the default's vouches for none of its candidates.
    distrusted = pick_in_model(PLANS, [DEFAULT], profiles, GROUPS, lambda label: label != "best")
    assert distrusted == [InModelPick(0, Path("a1"), pytest.approx(0.9))]
    # A failed profile counts for nothing.
    failed = {**profiles, "best": InModelTimes({}, {}, 0, "crashed")}
    assert [
        p.dispatch for p in pick_in_model(PLANS, [DEFAULT], failed, GROUPS, lambda _: True)
    ] == [0]
    # A candidate in two variants keeps the mean of its ratios (a0: 0.7 and 1.1 -> 0.9).
    mixed = {"best": _times(a=1.4, b1=1.0, b2=1.0, rest=6.0), "d0c0": profiles["d0c0"]}
    assert pick_in_model(PLANS, [DEFAULT], mixed, GROUPS, lambda _: True) == [
        InModelPick(0, Path("a0"), pytest.approx(0.9))
    ]


def test_no_variant_of_no_pick_or_of_a_planned_variant_s_specs() -> None:
    assert picked_variant([], PLANS) is None
    # a1 alone is the planned variant d0c1: it was timed as it is.
    assert picked_variant([InModelPick(0, Path("a1"), 0.9)], PLANS) is None
    # b1 alone is planned too; a0 with b0 is the joint variant `best`.
    pair = [InModelPick(0, Path("a0"), 0.9), InModelPick(1, Path("b0"), 0.9)]
    assert picked_variant(pair, PLANS) is None


def test_a_group_holds_the_exports_of_its_problem_s_every_dispatch(tmp_path: Path) -> None:
    def profile(name: str, export: str, problem: str) -> DispatchProfile:
        path = tmp_path / f"{name}.mlir"
        path.write_text(f"  hal.executable.export public @{export} ordinal(0)\n")
        return DispatchProfile(name, path, problem, True, 1.0, 1)

    ranked = (
        profile("d0", "main$async_dispatch_0_conv", "conv A"),
        profile("d1", "main$async_dispatch_1_conv", "conv B"),
        profile("d2", "main$async_dispatch_2_conv", "conv A"),
    )
    hot = HotSet(ranked, ranked[:2], 3.0, 3.0, 3.0)
    assert group_exports(hot, ["d0", "d1"]) == [
        frozenset({"main$async_dispatch_0_conv", "main$async_dispatch_2_conv"}),
        frozenset({"main$async_dispatch_1_conv"}),
    ]


def test_the_profiles_cost_counts_the_default_twice_and_a_short_stretch() -> None:
    # A 10 ms model: 60 calls make the 600 ms stretch, 0.6 s of calls per profile.
    assert variant_calls(10.0) == 60
    assert profiles_seconds(4, 10.0, 1.0) == pytest.approx(6 * (1.0 + 0.6 + 0.6))


SPEC = """
module attributes {iree_codegen.tuning_spec_with_default_entrypoint, transform.with_named_sequence} {
  transform.named_sequence @apply(%op: !transform.any_op {transform.readonly}, %config: !transform.any_param {transform.readonly}) {
    transform.annotate %op "compilation_info" = %config : !transform.any_op, !transform.any_param
    transform.yield
  }
  transform.named_sequence @match(%op: !transform.any_op {transform.readonly}) -> (!transform.any_op, !transform.any_param) {
    transform.match.operation_name %op ["linalg.matmul"] : !transform.any_op
    %config = transform.param.constant #iree_codegen.compilation_info<lowering_config = #iree_cpu.lowering_config<distribution = [32, 64, 0], vector_common_parallel = [8, 16, 0], vector_reduction = [0, 0, 16]>, translation_info = #iree_codegen.translation_info<pipeline = #iree_cpu.pipeline<DoubleTilingExpert>>> -> !transform.any_param
    transform.yield %op, %config : !transform.any_op, !transform.any_param
  }
  transform.named_sequence @__kernel_config(%root: !transform.any_op {transform.consumed}) -> !transform.any_op attributes {iree_codegen.tuning_spec_entrypoint} {
    %updated = transform.foreach_match in %root @match -> @apply : (!transform.any_op) -> !transform.any_op
    transform.yield %updated : !transform.any_op
  }
}
"""


def test_a_spec_variant_keeps_the_default_s_export_names_in_its_profile(tmp_path: Path) -> None:
    """The picks read a candidate's time under the default's export names: a variant compiled
    with a spec that configures both matmuls of the example MLP is another binary whose profile
    names the same exports (IREE names a dispatch before any spec applies)."""
    from ireetune.compile.driver import build_request, run_compile
    from ireetune.model.in_model_times import profile_model_here
    from ireetune.model.prepare import write_model_inputs
    from ireetune.model.timing import ModelComparison
    from ireetune.targets import parse_target
    from tests.conftest import REPOSITORY

    target, source = parse_target("cpu"), REPOSITORY / "examples" / "mlp.mlir"
    spec = tmp_path / "spec.mlir"
    spec.write_text(SPEC)
    binaries = {}
    for label, spec_path in (("default", None), ("variant", spec)):
        output = tmp_path / f"{label}.vmfb"
        result = run_compile(build_request(target, source, output, spec_path=spec_path))
        assert result.ok, result.error_line
        binaries[label] = output
    assert binaries["default"].read_bytes() != binaries["variant"].read_bytes()
    inputs = tmp_path / "inputs.npz"
    write_model_inputs(source, [], 0, inputs, work_dir=tmp_path / "source")
    names = []
    for label, vmfb in binaries.items():
        comparison = ModelComparison([(label, vmfb)], "mlp", inputs, tmp_path, "local-task", 1)
        times = profile_model_here(comparison, calls=3)
        assert times.ok, times.reason
        names.append(sorted(times.per_call_ms))
    assert names[0] == names[1] and len(names[0]) == 2


def test_a_candidate_alone_is_read_against_every_group_it_leaves_at_the_default() -> None:
    """The tuned groups take nearly all the time (the rest is no clock). A variant of group a's
    candidate alone leaves b at the default: b serves as its clock. A variant touching both
    has none, and its ratio counts only where no clocked one exists."""
    default = _times(a=4.0, b1=2.0, b2=2.0, rest=0.1)
    # Profiled in a phase 1.25x faster: b took 3.2 ms for its 4; a 2.4 ms, 0.6 of the default
    # but 0.75 once the 0.8 clock is divided out.
    alone = _times(a=2.4, b1=1.6, b2=1.6, rest=0.08)
    assert group_ratios([default], alone, GROUPS, members=[0])[0] == pytest.approx(0.75)
    # Touching both groups (or all, unsaid), nothing is left to correct by.
    assert group_ratios([default], alone, GROUPS, members=[0, 1])[0] == pytest.approx(0.6)
    assert group_ratios([default], alone, GROUPS)[0] == pytest.approx(0.6)
    # The joint variant `best` (a0 and b0) ran in the fast phase too: a0 reads 0.5 there,
    # unclocked; alone, clocked, 0.75. The clocked reading decides.
    profiles = {
        "best": _times(a=2.0, b1=1.6, b2=1.6, rest=0.08),
        "d0c0": alone,
    }
    picks = pick_in_model(PLANS, [default], profiles, GROUPS, lambda label: True)
    assert picks[0] == InModelPick(0, Path("a0"), pytest.approx(0.75))
    # b0 has only the joint variant's unclocked reading (0.8): it still counts.
    assert picks[1] == InModelPick(1, Path("b0"), pytest.approx(0.8))
