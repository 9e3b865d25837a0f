"""A data-tiled batch matmul (`linalg.batch_mmt4d`, an encoder's attention under data tiling): its
space starts at the compiler's default, and its tuned config lands in a whole model."""

from __future__ import annotations

import itertools
import re
import subprocess
from pathlib import Path

from iree.compiler import ir
from iree.compiler.dialects import iree_codegen

from ireetune.core.records import TIMED_STATUSES
from ireetune.core.target import SpaceRequest, space_for, target_refusal
from ireetune.flows.dispatch.tuner import TuneOptions, tune_dispatch
from ireetune.model.profile import ENCODED_MMT4D_NOTE, has_encoded_mmt4d
from ireetune.problem.contraction import ContractionProblem
from ireetune.problem.root_op import find_root_op, parse_problem
from ireetune.targets import parse_target
from ireetune.targets.llvm_cpu.common import CpuFacts, order_pool
from ireetune.targets.llvm_cpu.features import has_features
from ireetune.targets.llvm_cpu.mmt4d_space import (
    compute_mmt4d_sizes,
    enumerate_mmt4d_space,
    score_mmt4d_candidate,
)
from tests.conftest import FAST_RUN_OPTIONS, IREE_COMPILE
from tests.profile_support import describe_problem

# An encoder-like batch matmul: 4 heads of 128x64 by 64x128, f32.
ENCODER_MODEL = """
func.func @main(%q: tensor<4x128x64xf32>, %k: tensor<4x64x128xf32>) -> tensor<4x128x128xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<4x128x128xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<4x128x128xf32>) -> tensor<4x128x128xf32>
  %r = linalg.batch_matmul ins(%q, %k : tensor<4x128x64xf32>, tensor<4x64x128xf32>)
                           outs(%init : tensor<4x128x128xf32>) -> tensor<4x128x128xf32>
  return %r : tensor<4x128x128xf32>
}
"""
# A generic x86-64 CPU (no AVX-512 needed): its register tile is 8x4x1 for f32.
TARGET = "cpu:x86-64"
LATE = ("--iree-opt-data-tiling", "--iree-llvmcpu-enable-ukernels=mmt4d")
GENERIC = CpuFacts("x86-64", 16, 16, 32768, 1 << 20, threads=2, max_vector_bytes=32768)


def _batch_mmt4d_configs(folder: Path) -> list[str]:
    """Return the lowering configs of the batch_mmt4d ops in dumped executable configurations,
    each followed by ` codegen` where its function's own target turns the microkernel off."""
    return [
        " ".join(match.group(0).split()) + (CODEGEN if FUNCTION_CODEGEN.search(text) else "")
        for path in sorted(folder.glob("*.mlir"))
        for text in [path.read_text()]
        for line in text.splitlines()
        if "linalg.batch_mmt4d" in line
        for match in re.finditer(r"lowering_config<[^>]*>", line)
    ]


CODEGEN = " codegen"
# A function whose own executable target (a codegen candidate's) has no microkernel.
FUNCTION_CODEGEN = re.compile(
    r'func\.func @\w+\(.*attributes \{hal\.executable\.target = [^\n]*ukernels = "none"'
)


def test_a_batch_mmt4d_is_tuned_and_its_winner_lands_in_the_whole_model(tmp_path: Path) -> None:
    model = tmp_path / "encoder.mlir"
    model.write_text(ENCODER_MODEL)
    # The target adds MATERIALIZE_FIRST to the late path's flags by itself.
    target = parse_target(TARGET).with_global_flags(LATE)
    subprocess.run(
        [IREE_COMPILE, str(model), *target.compile_flags(),
         f"--iree-hal-dump-executable-benchmarks-to={tmp_path / 'dumps'}",
         "--iree-codegen-add-tuner-attributes", "-o", str(tmp_path / "default.vmfb")],
        check=True, capture_output=True,
    )  # fmt: skip
    (dump,) = [
        p
        for p in sorted((tmp_path / "dumps").glob("*_benchmark.mlir"))
        if "linalg.batch_mmt4d" in p.read_text()
    ]
    context = ir.Context()
    with context:
        module = ir.Module.parse(dump.read_text())
        root = find_root_op(module)
        problem = parse_problem(root)
        assert isinstance(problem, ContractionProblem) and problem.is_batch_mmt4d
        assert target_refusal(target, problem) is None
        default = space_for(target, problem).parse_default_knobs(problem, root)
    assert default is not None
    # The profile calls it tunable under the target's flags, and not where no spec reaches it.
    assert not has_encoded_mmt4d(ENCODER_MODEL, target.global_flags)
    assert has_encoded_mmt4d(ENCODER_MODEL, LATE)
    assert describe_problem(dump, target, encoded_mmt4d=False) == (problem.signature, True)
    described, tunable = describe_problem(dump, target, encoded_mmt4d=True)
    assert not tunable and described.endswith(ENCODED_MMT4D_NOTE)
    assert not has_features(problem)
    assert problem.signature == "batch_mmt4d_4x16x8x32x4x64x1_f32_f32_f32"
    sizes = compute_mmt4d_sizes(problem)
    assert (sizes.batch, sizes.m1, sizes.n1) == ((4,), 16, 32)
    # The candidates start at the default's neighbours: one step of one tile, first.
    pool = list(itertools.islice(enumerate_mmt4d_space(sizes, GENERIC, 0, default), 40))
    ordered = [
        knobs for knobs, _ in order_pool(score_mmt4d_candidate, sizes, GENERIC, pool, 0, default)
    ]
    values = dict(default)
    near = [dict(k) for k in ordered[:4]]
    assert all(
        sum(k[name] != values[name] for name in values) == 1
        and {k[name] / values[name] for name in values} <= {0.5, 1.0, 2.0}
        for k in near
    ), (default, near)

    result = tune_dispatch(
        TuneOptions(
            input_path=model, dispatch=dump.name.split("_embedded")[0].removeprefix("module_"),
            num_candidates=3, output_dir=tmp_path / "run", target=TARGET, extra_flags=LATE,
            use_database=False, model_level_rounds=2, **FAST_RUN_OPTIONS,
        )
    )  # fmt: skip
    candidates = [r for r in result.records if not r.is_baseline]
    assert len({r.knobs for r in candidates}) == len(candidates) == 3
    # Each candidate's tile landed: binaries differ from the default's and from each other.
    assert all(r.status in TIMED_STATUSES for r in candidates), [
        (r.status, r.reason) for r in candidates
    ]
    assert len({r.binary_hash for r in result.records}) == 4
    winner = result.best or min(candidates, key=lambda r: r.median_ms or float("inf"))
    assert winner.knobs is not None and winner.knobs != default
    with context:
        # A codegen winner repeats its dispatch's target: rendered for the dispatch.
        (variant,) = iree_codegen.get_executable_variant_ops(module)
        request = SpaceRequest(problem, variant.attributes["target"], default, 0)
        wanted = space_for(target, problem).configuration_for(request, winner.knobs, context)
    expected = re.search(r"lowering_config<[^>]*>", wanted.compilation_info)
    assert expected is not None
    codegen = CODEGEN if wanted.function_attributes else ""
    spec = result.run_dir / winner.spec_path

    def configs(extra: list[str], name: str) -> list[str]:
        subprocess.run(
            [IREE_COMPILE, str(model), *target.compile_flags(), *extra,
             "--compile-to=executable-configurations",
             f"--iree-hal-dump-executable-configurations-to={tmp_path / name}",
             "-o", str(tmp_path / f"{name}.mlir")],
            check=True, capture_output=True,
        )  # fmt: skip
        return _batch_mmt4d_configs(tmp_path / name)

    tuned = configs(
        [f"--iree-codegen-tuning-spec-path={spec}", "--mlir-disable-threading"], "tuned"
    )
    assert tuned == [" ".join(expected.group(0).split()) + codegen]
    assert tuned != configs([], "untuned")
