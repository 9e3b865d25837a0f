"""Kin dispatches: grouped by what they reduce aside, selected once, configured together."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from ireetune.core.candidate import Knobs, make_knobs
from ireetune.executor import LocalExecutor
from ireetune.flows.model.local import dispatch_outcomes
from ireetune.flows.model.options import ModelTuneOptions
from ireetune.flows.model.run import Mode, ModelTuningRun
from ireetune.frontend.dispatches import dump_dispatches
from ireetune.model.gate import problem_share
from ireetune.model.hot import DispatchProfile, select_hot_dispatches
from ireetune.model.kin import KIN_FOLDER, Extended, KeptCandidate, extend_with_kin
from ireetune.model.profile import describe_dispatches
from ireetune.spec.apply import count_landed_matchers
from ireetune.targets import parse_target
from tests.conftest import IREE_COMPILE

# Two 64x64 matmuls that sum 96 and 160 terms (kin), and a 64x128 one (not their kin).
KIN_MODEL = """
func.func @main(%a: tensor<64x96xf32>, %b: tensor<96x64xf32>, %c: tensor<64x160xf32>,
                %d: tensor<160x64xf32>, %e: tensor<128x128xf32>, %f: tensor<64x128xf32>)
    -> (tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x128xf32>) {
  %zero = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<64x64xf32>
  %i0 = linalg.fill ins(%zero : f32) outs(%e0 : tensor<64x64xf32>) -> tensor<64x64xf32>
  %r0 = linalg.matmul ins(%a, %b : tensor<64x96xf32>, tensor<96x64xf32>)
      outs(%i0 : tensor<64x64xf32>) -> tensor<64x64xf32>
  %r1 = linalg.matmul ins(%c, %d : tensor<64x160xf32>, tensor<160x64xf32>)
      outs(%i0 : tensor<64x64xf32>) -> tensor<64x64xf32>
  %e2 = tensor.empty() : tensor<64x128xf32>
  %i2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<64x128xf32>) -> tensor<64x128xf32>
  %r2 = linalg.matmul ins(%f, %e : tensor<64x128xf32>, tensor<128x128xf32>)
      outs(%i2 : tensor<64x128xf32>) -> tensor<64x128xf32>
  return %r0, %r1, %r2 : tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x128xf32>
}
"""

TARGET = "cpu:haswell"
KNOBS = make_knobs({"dist_m": 32, "dist_n": 32, "vec_m": 4, "vec_n": 16, "vec_k": 1})


@pytest.fixture(scope="module")
def kin_profiles(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[DispatchProfile]]:
    folder = tmp_path_factory.mktemp("kin")
    (folder / "model.mlir").write_text(KIN_MODEL)
    target = parse_target(TARGET)
    dumped = dump_dispatches(folder / "model.mlir", target, folder / "dispatches", 300)
    timings = {d.index: 1.0 for d in dumped}
    return folder, describe_dispatches(dumped, {}, timings, target)


def _by_k(profiles: list[DispatchProfile]) -> dict[str, DispatchProfile]:
    """Name the matmul dispatches by their problem's sizes (`64x64x96`, ...)."""
    found = {}
    for profile in profiles:
        sizes = re.search(r"_(\d+x\d+x\d+)_", profile.problem)
        if sizes:
            found[sizes.group(1)] = profile
    return found


def _extend_first(
    kin_profiles: tuple[Path, list[DispatchProfile]], knobs: Knobs, target: str, folder: str
) -> tuple[Path, Extended]:
    """Carry one faster-alone candidate of the K=96 matmul (its own spec `own_spec.mlir`) to
    its kin on `target`; return the own spec and what was extended."""
    root, profiles = kin_profiles
    own = root / "own_spec.mlir"
    kept = [KeptCandidate(own, knobs, faster_alone=True)]
    return own, extend_with_kin(
        parse_target(target), _by_k(profiles)["64x64x96"], profiles, kept, root / folder
    )


def _model_run(tmp_path: Path, mode: Mode) -> ModelTuningRun:
    options = ModelTuneOptions(model_path=tmp_path / "model.mlir", output_dir=tmp_path)
    return ModelTuningRun(mode, options, parse_target("cpu"), tmp_path, LocalExecutor())


def test_matmuls_that_differ_only_in_what_they_sum_are_kin(
    kin_profiles: tuple[Path, list[DispatchProfile]],
) -> None:
    _, profiles = kin_profiles
    matmuls = _by_k(profiles)
    assert set(matmuls) == {"64x64x96", "64x64x160", "64x128x128"}, [p.problem for p in profiles]
    assert matmuls["64x64x96"].kin is not None
    assert matmuls["64x64x96"].kin == matmuls["64x64x160"].kin
    assert matmuls["64x128x128"].kin != matmuls["64x64x96"].kin


def test_a_kin_group_is_selected_once_and_counted_whole() -> None:
    def profile(name: str, problem: str, ms: float, kin: str | None) -> DispatchProfile:
        return DispatchProfile(name, Path(f"{name}.mlir"), problem, True, ms, 1, kin)

    profiles = [
        profile("big", "matmul_512", 30.0, None),
        profile("k1", "conv_k1", 20.0, "conv|?"),
        profile("k2", "conv_k2", 20.0, "conv|?"),
        profile("k3", "conv_k3", 20.0, "conv|?"),
        profile("small", "matmul_64", 10.0, None),
    ]
    hot = select_hot_dispatches(profiles, model_ms=100.0, coverage=1.0, max_dispatches=2)
    # The three kin (60 ms together) come before the largest single dispatch (30 ms).
    assert [p.name for p in hot.selected] == ["k1", "big"]
    assert problem_share(hot, hot.selected[0]) == pytest.approx(0.6)
    assert hot.covered_ms == pytest.approx(90.0)


def test_a_candidate_carried_to_its_kin_lands_on_both_in_the_whole_model(
    kin_profiles: tuple[Path, list[DispatchProfile]],
) -> None:
    folder, profiles = kin_profiles
    matmuls = _by_k(profiles)
    hot, kin = matmuls["64x64x96"], matmuls["64x64x160"]
    own = folder / "own_spec.mlir"
    target = parse_target(TARGET)
    slower = [KeptCandidate(own, KNOBS, faster_alone=False)]
    # A loss is not carried: the kept spec alone, as without kin.
    assert extend_with_kin(target, hot, profiles, slower, folder / "x").specs == [own]
    faster = [KeptCandidate(own, KNOBS, faster_alone=True)]
    extended = extend_with_kin(target, hot, profiles, faster, folder / "x")
    assert extended.kin_names == (kin.name,)
    # The own first candidate stays first (the joint variant joins the dispatches' own).
    assert extended.specs[0] == own and extended.sources == [0, 0]
    spec = extended.specs[1]
    dump = folder / "configurations"
    subprocess.run(
        [IREE_COMPILE, str(folder / "model.mlir"), *parse_target(TARGET).compile_flags(),
         f"--iree-codegen-tuning-spec-path={spec}", "--mlir-disable-threading",
         f"--iree-hal-dump-executable-configurations-to={dump}",
         "--compile-to=executable-configurations", "-o", str(folder / "configured.mlir")],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    assert count_landed_matchers(spec, dump) == (2, 2)
    configured = "".join(path.read_text() for path in dump.glob("*.mlir"))
    assert configured.count("distribution = [32, 32, 0]") == 2, configured
    # The report's row of the kin says whose candidates it gets (in process and split alike);
    # a note said already stays.
    notes = {hot.name: "tuned"}
    extended.note_kin(hot.name, notes)
    assert notes == {hot.name: "tuned", kin.name: f"not tuned alone: {hot.name}'s candidates "
                     "are tried on it (its kin)"}  # fmt: skip
    notes = {kin.name: "tuned through its kin"}
    extended.note_kin(hot.name, notes)
    assert notes == {kin.name: "tuned through its kin"}


def test_a_candidate_is_not_carried_to_a_kin_whose_reduction_its_tiles_do_not_divide(
    kin_profiles: tuple[Path, list[DispatchProfile]],
) -> None:
    # A reduction tile of 96 divides the tuned matmul's K (96), not its kin's (160): the space
    # would never offer it there.
    knobs = make_knobs({"dist_m": 32, "dist_n": 32, "vec_m": 4, "vec_n": 16, "vec_k": 96})
    own, extended = _extend_first(kin_profiles, knobs, TARGET, "y")
    assert extended.specs == [own] and not extended.kin_names
    assert extended.note is not None and "do not divide" in extended.note


def test_no_kin_where_a_configuration_needs_its_dispatch(
    kin_profiles: tuple[Path, list[DispatchProfile]],
) -> None:
    # On a GPU target the profile groups no kin: one member would be tuned for the group and the
    # others never.
    folder, _ = kin_profiles
    target = parse_target("rocm:gfx942")
    dumped = dump_dispatches(folder / "model.mlir", parse_target(TARGET), folder / "again", 300)
    profiles = describe_dispatches(dumped, {}, {d.index: 1.0 for d in dumped}, target)
    assert any(p.tunable for p in profiles), [p.problem for p in profiles]
    assert [p.kin for p in profiles] == [None] * len(profiles)


def test_no_kin_spec_where_a_configuration_needs_its_dispatch(
    kin_profiles: tuple[Path, list[DispatchProfile]],
) -> None:
    own, extended = _extend_first(kin_profiles, KNOBS, "rocm:gfx942", "z")
    assert extended.specs == [own] and extended.note is None and not extended.kin_names


def test_the_report_says_which_kept_spec_configures_a_kin(tmp_path: Path) -> None:
    run = _model_run(tmp_path, Mode.IN_PROCESS)
    profiles = [
        DispatchProfile(name, tmp_path / f"{name}.mlir", problem, True, ms, 1, kin)
        for name, problem, ms, kin in [
            ("d0", "conv_k1", 3.0, "conv|?"),
            ("d1", "conv_k2", 2.0, "conv|?"),
            ("d2", "conv_k3", 1.0, "conv|?"),
            ("d3", "matmul", 1.0, None),
        ]
    ]
    run.hot = select_hot_dispatches(profiles, model_ms=7.0, coverage=1.0, max_dispatches=8)
    carrying = tmp_path / KIN_FOLDER / "d0_c0_kin.mlir"
    run.accepted = {"d0": carrying, "d3": tmp_path / "d3_spec.mlir"}
    outcomes = {o.name: o for o in dispatch_outcomes(run)}
    assert outcomes["d0"].kept_spec == str(carrying)
    for kin in ("d1", "d2"):
        assert outcomes[kin].kept_spec == str(carrying)
        assert outcomes[kin].note == "configured by d0's kept spec (its kin)"
    # A spec kept alone (not a kin spec) configures its own dispatch only.
    run.accepted = {"d0": tmp_path / "d0_spec.mlir"}
    outcomes = {o.name: o for o in dispatch_outcomes(run)}
    assert outcomes["d1"].kept_spec is None


def test_split_mode_tunes_a_group_through_the_kin_the_device_measured(tmp_path: Path) -> None:
    # Before the device profiles the model, split mode compiles the folders of the dispatches its
    # estimated costs rank first; the measured profile may pick another dispatch of the same kin
    # group. The group is then tuned through the kin whose folder was measured.
    from ireetune.flows.model.split import _measured_of_group
    from ireetune.flows.model.state_restore import new_split_section

    run = _model_run(tmp_path, Mode.SPLIT)
    profiles = [
        DispatchProfile(name, tmp_path / f"{name}.mlir", problem, True, ms, 1, "conv|?")
        for name, problem, ms in [("d0", "conv_k1", 3.0), ("d1", "conv_k2", 2.0)]
    ]
    run.hot = select_hot_dispatches(profiles, model_ms=5.0, coverage=1.0, max_dispatches=8)
    run.state = new_split_section(run.options, ["local-task"])
    run.state.folders["conv_k2"] = "tuning/k2"
    run.state.folder_outcomes["tuning/k2"] = "measured"
    (selected,) = run.hot.selected
    assert selected.name == "d0"
    assert _measured_of_group(run, selected).name == "d1"
    run.state.folders["conv_k1"] = "tuning/k1"
    run.state.folder_outcomes["tuning/k1"] = "measured"
    assert _measured_of_group(run, selected).name == "d0"
