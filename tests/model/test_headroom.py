"""Each dispatch's headroom: its efficiency against the ceilings its model's dispatches set, the
cut its tuning is expected to make, and the hot set weighed by it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ireetune.core.budget import DISTRIBUTION_ONLY_PRIOR, PRIOR_GAIN
from ireetune.flows.model.options import ModelTuneOptions
from ireetune.flows.model.phases import hot_weight
from ireetune.flows.model.run import Mode
from ireetune.flows.model.state import read_hot_set
from ireetune.frontend.dispatches import dump_dispatches
from ireetune.model.headroom import (
    HEADROOM_CUT,
    LEAST_CUT,
    efficiencies,
    expected_cut,
    prior_cut,
)
from ireetune.model.hot import DispatchProfile, select_hot_dispatches
from ireetune.model.profile import describe_dispatches, write_profile
from ireetune.targets import parse_target


def _profile(
    name: str, ms: float, flops: int, moved: int, problem: str = "", runs: int = 1
) -> DispatchProfile:
    return DispatchProfile(
        name, Path(f"{name}.mlir"), problem or f"conv_{name}", True, ms, runs, None, flops, moved
    )


# A convolution that sets the FLOP ceiling (1e9 a ms), a copy that sets the byte ceiling (1e8 a
# ms), and a window sum at a tenth of both.
CONV = _profile("conv", 4.0, 4_000_000_000, 1_000_000)
COPY = _profile("copy", 1.0, 0, 100_000_000)
WINDOW = _profile("window", 1.0, 100_000_000, 10_000_000)


def test_a_dispatch_is_as_efficient_as_the_better_of_its_flops_and_its_bytes() -> None:
    found = efficiencies([CONV, COPY, WINDOW])
    assert found == pytest.approx({"conv": 1.0, "copy": 1.0, "window": 0.1})
    # Its bytes at half the ceiling, its FLOPs at a fifth: half.
    half = _profile("half", 1.0, 200_000_000, 50_000_000)
    assert efficiencies([CONV, COPY, half])["half"] == pytest.approx(0.5)


def test_a_dispatch_too_small_to_time_well_sets_no_ceiling() -> None:
    # 10 us of a 6 ms profile (0.17%) at ten times the convolution's FLOPs a ms.
    tiny = _profile("tiny", 0.01, 100_000_000, 0)
    found = efficiencies([CONV, COPY, WINDOW, tiny])
    assert found["conv"] == pytest.approx(1.0)
    assert found["window"] == pytest.approx(0.1)
    assert found["tiny"] == 1.0


def test_no_efficiency_without_two_dispatches_of_known_work() -> None:
    unknown = replace(WINDOW, flops=0, bytes=0)
    untimed = replace(COPY, dispatch_ms=None)
    not_tunable = replace(COPY, tunable=False)
    assert efficiencies([CONV, unknown, untimed, not_tunable]) == {}
    assert set(efficiencies([CONV, WINDOW, unknown, untimed, not_tunable])) == {"conv", "window"}


def test_the_expected_cut_falls_with_the_efficiency() -> None:
    cuts = [expected_cut(e, 0.5) for e in (0.0, 0.1, 0.5, 0.9, 1.0)]
    assert cuts == sorted(cuts, reverse=True)
    assert cuts[0] == pytest.approx(LEAST_CUT + HEADROOM_CUT)
    assert cuts[-1] == pytest.approx(LEAST_CUT)
    assert expected_cut(None, 0.5) == 0.5


def test_the_prior_is_the_old_one_where_the_efficiency_is_unknown() -> None:
    mmt4d = _profile("mm", 1.0, 0, 0, "mmt4d_4x16x32x16x64x1_f32_f32_f32")
    conv = _profile("c", 1.0, 0, 0)
    assert prior_cut(mmt4d, {}) == DISTRIBUTION_ONLY_PRIOR
    assert prior_cut(conv, {}) == PRIOR_GAIN
    assert prior_cut(mmt4d, {"mm": 0.2}) == pytest.approx(expected_cut(0.2, 0.0))


def test_weighed_by_headroom_the_hot_set_takes_the_slow_small_dispatches_first() -> None:
    """The convolution takes two thirds of the time at the ceiling; the window sum and the copy
    below it. With room for two, by time the convolution and the window sum; by headroom the
    window sum and the slower copy."""
    slow_copy = _profile("slow_copy", 1.0, 0, 30_000_000)
    profiles = [CONV, COPY, WINDOW, slow_copy]
    by_time = select_hot_dispatches(profiles, 7.0, 1.0, 2)
    assert [p.name for p in by_time.selected] == ["conv", "copy"]
    found = efficiencies(profiles)
    by_headroom = select_hot_dispatches(profiles, 7.0, 1.0, 2, lambda p: prior_cut(p, found))
    assert [p.name for p in by_headroom.selected] == ["window", "slow_copy"]


def test_only_an_in_process_run_with_a_time_budget_weighs_its_hot_set(tmp_path: Path) -> None:
    options = ModelTuneOptions(model_path=tmp_path / "m.mlir", output_dir=tmp_path)
    assert hot_weight(options, [CONV, WINDOW], Mode.IN_PROCESS) is None
    budget = replace(options, time_budget_s=600.0)
    assert hot_weight(budget, [CONV, COPY, WINDOW], Mode.SPLIT) is None
    weight = hot_weight(budget, [CONV, COPY, WINDOW], Mode.IN_PROCESS)
    assert weight is not None
    assert weight(WINDOW) > weight(CONV)


# A matmul (compute-bound) and an element-wise add (memory-bound), dumped as a model's dispatches.
TWO_KINDS = """
func.func @main(%a: tensor<128x256xf32>, %b: tensor<256x128xf32>, %c: tensor<1024x1024xf32>,
                %d: tensor<1024x1024xf32>) -> (tensor<128x128xf32>, tensor<1024x1024xf32>) {
  %zero = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<128x128xf32>
  %i0 = linalg.fill ins(%zero : f32) outs(%e0 : tensor<128x128xf32>) -> tensor<128x128xf32>
  %r0 = linalg.matmul ins(%a, %b : tensor<128x256xf32>, tensor<256x128xf32>)
      outs(%i0 : tensor<128x128xf32>) -> tensor<128x128xf32>
  %e1 = tensor.empty() : tensor<1024x1024xf32>
  %r1 = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>,
      affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
      iterator_types = ["parallel", "parallel"]}
      ins(%c, %d : tensor<1024x1024xf32>, tensor<1024x1024xf32>)
      outs(%e1 : tensor<1024x1024xf32>) {
  ^bb0(%x: f32, %y: f32, %out: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<1024x1024xf32>
  return %r0, %r1 : tensor<128x128xf32>, tensor<1024x1024xf32>
}
"""


def test_a_profile_keeps_each_dispatchs_work_and_profile_json_keeps_it(tmp_path: Path) -> None:
    """Real dumps: the matmul's FLOPs (2 x 128 x 128 x 256) and the add's operands and result
    (3 x 1024 x 1024 elements, 2 bytes each) come from their parsed problems, and survive
    profile.json; a profile.json written before them reads as unknown work."""
    (tmp_path / "model.mlir").write_text(TWO_KINDS)
    target = parse_target("cpu:haswell")
    dumped = dump_dispatches(tmp_path / "model.mlir", target, tmp_path / "dispatches", 300)
    profiles = describe_dispatches(dumped, {}, {d.index: 1.0 for d in dumped}, target)
    work = {p.problem.split("_")[0]: (p.flops, p.bytes) for p in profiles if p.tunable}
    assert work["matmul"][0] == 2 * 128 * 128 * 256
    assert work["elementwise"][1] == 2 * 3 * 1024 * 1024
    write_profile(tmp_path, select_hot_dispatches(profiles, 2.0, 1.0, 8))
    assert read_hot_set(tmp_path).ranked == tuple(
        sorted(profiles, key=lambda p: (-p.total_ms, p.name))
    )
    document = json.loads((tmp_path / "profile.json").read_text())
    for row in document["dispatches"]:
        del row["flops"], row["bytes"]
    (tmp_path / "profile.json").write_text(json.dumps(document))
    assert {(p.flops, p.bytes) for p in read_hot_set(tmp_path).ranked} == {(0, 0)}


def test_a_problem_whose_work_is_not_known_is_profiled_all_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record that gives no work (an op family added later) leaves its dispatch's work
    unknown, (0, 0); the profile goes on."""
    from ireetune.model import profile

    def no_work(problem: object) -> tuple[int, int]:
        raise IndexError("tuple index out of range")

    (tmp_path / "model.mlir").write_text(TWO_KINDS)
    target = parse_target("cpu:haswell")
    dumped = dump_dispatches(tmp_path / "model.mlir", target, tmp_path / "dispatches", 300)
    monkeypatch.setattr(profile, "problem_work", no_work)
    profiles = describe_dispatches(dumped, {}, {d.index: 1.0 for d in dumped}, target)
    assert [p.tunable for p in profiles] == [True, True]
    assert {(p.flops, p.bytes) for p in profiles} == {(0, 0)}
