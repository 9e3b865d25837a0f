"""Every flag set the CPU flag phase may keep leaves a model whose dispatches the profile phase
describes: a set that makes a later phase fail is a defect of the flag space.

Each searched option (its seed choices, the declared combinations and every tuned value, with
what it depends on) compiles a tiny model of a convolution and a matmul, and the profile phase's
description of the dumped dispatches must name each one's problem or say why it is not tunable,
never raise. With `--iree-llvmcpu-enable-inner-tiled`, an AVX-512 CPU's encoding dispatches
have an `iree_linalg_ext.map_store` root whose region has no block; describing it raised
IndexError and ended a model run after its flag phase.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ireetune.core.errors import IreetuneError
from ireetune.core.flag_space import FlagSet, propose_flag_sets, spell_configuration
from ireetune.frontend.dispatches import dump_dispatches
from ireetune.model.profile import describe_dispatches
from ireetune.targets import parse_target
from ireetune.targets.llvm_cpu.flags import CPU_FLAG_SPACE

# Compiled only, never run: an AVX-512 CPU whatever this host is (its data-tiled dispatches
# are the ones that differ).
CPU = "skylake-avx512"

MODEL = """
func.func @main(%image: tensor<1x8x10x10xf32>, %filter: tensor<16x8x3x3xf32>,
                %lhs: tensor<32x48xf32>, %rhs: tensor<48x64xf32>)
    -> (tensor<1x16x8x8xf32>, tensor<32x64xf32>) {
  %zero = arith.constant 0.0 : f32
  %conv_empty = tensor.empty() : tensor<1x16x8x8xf32>
  %conv_init = linalg.fill ins(%zero : f32) outs(%conv_empty : tensor<1x16x8x8xf32>) -> tensor<1x16x8x8xf32>
  %conv = linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
      ins(%image, %filter : tensor<1x8x10x10xf32>, tensor<16x8x3x3xf32>)
      outs(%conv_init : tensor<1x16x8x8xf32>) -> tensor<1x16x8x8xf32>
  %empty = tensor.empty() : tensor<32x64xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<32x64xf32>) -> tensor<32x64xf32>
  %matmul = linalg.matmul ins(%lhs, %rhs : tensor<32x48xf32>, tensor<48x64xf32>)
                          outs(%init : tensor<32x64xf32>) -> tensor<32x64xf32>
  return %conv, %matmul : tensor<1x16x8x8xf32>, tensor<32x64xf32>
}
"""


def _flag_sets_by_option() -> dict[str, list[FlagSet]]:
    """Map each searched option to the flag sets that set it: the seeds (each choice with
    what it requires; the combinations under one name), and each tuned value with the values
    it depends on."""
    by_option: dict[str, list[FlagSet]] = {}
    for option in CPU_FLAG_SPACE.options:
        by_option[f"seed-{option.key}"] = propose_flag_sets(
            CPU_FLAG_SPACE.__class__(options=(option,)), limit=100
        )
    by_option["combinations"] = [FlagSet(c) for c in CPU_FLAG_SPACE.combinations]
    for tuned in CPU_FLAG_SPACE.tuned:
        by_option[tuned.name.removeprefix("--")] = [
            spell_configuration({**dict(tuned.depends_on), tuned.name: value}, CPU_FLAG_SPACE.tuned)
            for value in tuned.values
        ]
    return by_option


FLAG_SETS = _flag_sets_by_option()


@pytest.mark.parametrize("option", sorted(FLAG_SETS))
def test_the_profile_phase_describes_every_dispatch_under_each_searched_option(
    option: str, tmp_path: Path
) -> None:
    model = tmp_path / "model.mlir"
    model.write_text(MODEL)
    described = []
    for number, flag_set in enumerate(FLAG_SETS[option]):
        target = parse_target(f"cpu:{CPU}").with_global_flags(flag_set.flags)
        try:
            dumped = dump_dispatches(model, target, tmp_path / f"set{number}", timeout_s=120)
        except IreetuneError as error:  # A set that does not compile is dropped by the search.
            described.append(f"{flag_set.label}: does not compile ({type(error).__name__})")
            continue
        profiles = describe_dispatches(dumped, {}, {}, target, encoded_mmt4d=True)
        assert [p.name for p in profiles] == [d.name for d in dumped]
        assert all(p.problem for p in profiles)
        described.append(flag_set.label)
    assert len(described) == len(FLAG_SETS[option])
    # Every option has a set that compiles: the description above ran on some dispatches.
    assert any("does not compile" not in line for line in described), described
