"""The mmt4d's microkernel or codegen, chosen per dispatch by a tuning spec (IREE 3.13)."""

from __future__ import annotations

import dataclasses
import itertools
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from iree.compiler import ir
from iree.compiler.dialects import iree_codegen

from ireetune.core.candidate import Knobs, make_knobs
from ireetune.core.errors import IreetuneError
from ireetune.core.records import CandidateRecord, CandidateStatus
from ireetune.core.run_dir import create_run_dir
from ireetune.core.target import FamilySpace, SpaceRequest, space_for
from ireetune.database.store import (
    ResultKey,
    StoredResult,
    TuningDatabase,
    compiler_version,
    config_key,
    problem_key,
)
from ireetune.executor.base import LocalExecutor
from ireetune.flows.dispatch.options import TuneOptions
from ireetune.flows.dispatch.start import open_run, start_run_folder
from ireetune.flows.handoff.finish import _function_attributes_of
from ireetune.frontend.dispatches import dump_dispatches
from ireetune.model.kin import KeptCandidate, extend_with_kin
from ireetune.model.profile import describe_dispatches
from ireetune.model.timing import ModelComparison, run_models_side_by_side_here
from ireetune.problem.contraction import ContractionProblem
from ireetune.problem.root_op import parse_problem
from ireetune.spec.apply import CompileTarget, compile_with_spec, resolve_compile_target
from ireetune.spec.builder import MatcherEntry, build_configuration_spec, build_spec, render_spec
from ireetune.spec.export import render_linked_spec
from ireetune.spec.inspect import list_matchers, render_matchers
from ireetune.targets import parse_target
from ireetune.targets.llvm_cpu.common import CpuFacts, read_cpu_facts
from ireetune.targets.llvm_cpu.mmt4d_space import (
    CODEGEN_TARGET,
    TARGET_ATTRIBUTE,
    UKERNEL,
    Mmt4dSizes,
    codegen_target_of,
    enumerate_mmt4d_space,
)
from ireetune.verify.landing import prove_config_landed
from tests.conftest import IREE_COMPILE
from tests.targets.llvm_cpu.test_batch_mmt4d import ENCODER_MODEL, LATE
from tests.targets.llvm_cpu.test_batch_mmt4d import TARGET as BATCH_TARGET
from tests.targets.llvm_cpu.test_mmt4d import CNN_MODEL, DATA_TILING_PATHS, _parse

SIZES = Mmt4dSizes(m1=64, n1=64, k1=1024, m0=16, n0=16, k0=1, input_bytes=4, accumulator_bytes=4)
FACTS = CpuFacts("znver4", 64, 32, 32768, 1 << 20, threads=2, max_vector_bytes=32768)
BATCHED = dataclasses.replace(SIZES, m1=8, n1=8, k1=4, batch=(12,))
DEFAULT = (("dist_m1", 1), ("dist_n1", 2), (UKERNEL, 1))
# A call of the mmt4d microkernel in the executables' LLVM IR before its bitcode is linked.
UKERNEL_CALL = re.compile(r"call \w+ @iree_uk_mmt4d\(")


def _ukernel_values(facts: CpuFacts, default: tuple[tuple[str, int], ...] | None) -> list[int]:
    drawn = itertools.islice(enumerate_mmt4d_space(SIZES, facts, 0, default), 200)
    return [int(dict(knobs)[UKERNEL]) for knobs in drawn]


def test_codegen_is_offered_only_where_the_target_calls_the_microkernel() -> None:
    text = '#hal.executable.target<"llvm-cpu", "embedded-elf-x86_64", {ukernels = "none"}>'
    with ir.Context():
        assert read_cpu_facts(ir.Attribute.parse(text), 2).ukernels == "none"
    assert read_cpu_facts(None, 2).ukernels == ""
    # The compiler's default on x86-64 and an explicit list naming it call the microkernel.
    for ukernels in ("", "default", "mmt4d", "pack,mmt4d", "all"):
        assert set(_ukernel_values(dataclasses.replace(FACTS, ukernels=ukernels), None)) == {0, 1}
    for ukernels in ("none", "pack"):
        assert set(_ukernel_values(dataclasses.replace(FACTS, ukernels=ukernels), None)) == {1}
    # A batch_mmt4d's op does not keep its own target (the last test here).
    batched = itertools.islice(enumerate_mmt4d_space(BATCHED, FACTS, 0, None), 200)
    assert {int(dict(knobs)[UKERNEL]) for knobs in batched} == {1}


def test_an_mmt4d_s_first_candidate_is_the_default_s_tiles_compiled_with_codegen() -> None:
    first = next(enumerate_mmt4d_space(SIZES, FACTS, 0, DEFAULT))
    assert first == (("dist_m1", 1), ("dist_n1", 2), (UKERNEL, 0))
    # Without the microkernel there is no such twin, and the walk starts at once.
    without = dataclasses.replace(FACTS, ukernels="none")
    assert dict(next(enumerate_mmt4d_space(SIZES, without, 0, DEFAULT)))[UKERNEL] == 1


@pytest.fixture(scope="module")
def late_path_dumps(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[Path]]:
    """Compile CNN_MODEL for a generic x86-64 CPU with data tiling and the mmt4d microkernel, as
    the flag phase keeps them (the late path, materialised first by the CPU target); return the
    model, the default's LLVM IR and the dispatch benchmarks holding an mmt4d."""
    folder = tmp_path_factory.mktemp("codegen")
    model = folder / "cnn.mlir"
    model.write_text(CNN_MODEL)
    target = _target()
    subprocess.run(
        [IREE_COMPILE, str(model), *target.compile_flags,
         f"--iree-hal-dump-executable-benchmarks-to={folder}",
         f"--iree-hal-dump-executable-intermediates-to={folder / 'default'}",
         "--iree-codegen-add-tuner-attributes", "-o", str(folder / "default.vmfb")],
        check=True, capture_output=True,
    )  # fmt: skip
    dumps = [p for p in sorted(folder.glob("*_benchmark.mlir")) if "linalg.mmt4d" in p.read_text()]
    return model, _llvm_ir(folder / "default"), dumps


def _target() -> CompileTarget:
    flags = ("--iree-llvmcpu-enable-ukernels=mmt4d", *DATA_TILING_PATHS["late"])
    return resolve_compile_target("cpu:x86-64", flags)


def _llvm_ir(folder: Path) -> Path:
    (codegen,) = folder.glob("*.codegen.ll")
    return codegen


def _compile_with(model: Path, spec_text: str, folder: Path) -> subprocess.CompletedProcess[str]:
    folder.mkdir()
    spec = folder / "spec.mlir"
    spec.write_text(spec_text)
    return subprocess.run(
        [IREE_COMPILE, str(model), *_target().compile_flags,
         f"--iree-codegen-tuning-spec-path={spec}", "--mlir-disable-threading",
         f"--iree-hal-dump-executable-intermediates-to={folder}", "-o", str(folder / "m.vmfb")],
        capture_output=True, text=True,
    )  # fmt: skip


def test_a_codegen_candidate_drops_the_microkernel_from_its_dispatch_alone_in_the_whole_model(
    late_path_dumps: tuple[Path, Path, list[Path]], tmp_path: Path
) -> None:
    model, default_ir, dumps = late_path_dumps
    assert len(dumps) == 2 and len(UKERNEL_CALL.findall(default_ir.read_text())) == 2
    context = ir.Context()
    with context:
        _, root = _parse(dumps[-1], context)
        problem = parse_problem(root)
        assert isinstance(problem, ContractionProblem) and problem.is_mmt4d
        space = space_for(_target().target, problem)
        default = space.parse_default_knobs(problem, root)
        assert default is not None and dict(default)[UKERNEL] == 1
        specs = {
            value: build_configuration_spec(
                problem,
                space.configuration(problem, (*default[:-1], (UKERNEL, value)), context),
                (),
                context,
            )
            for value in (0, 1)
        }
    assert CODEGEN_TARGET.split("{")[1] in specs[0] and TARGET_ATTRIBUTE not in specs[1]
    calls = {}
    for value, text in specs.items():
        compiled = _compile_with(model, text, tmp_path / str(value))
        assert compiled.returncode == 0, compiled.stderr[-2000:]
        calls[value] = len(UKERNEL_CALL.findall(_llvm_ir(tmp_path / str(value)).read_text()))
    # The default's own tiles with the microkernel change nothing; with codegen, the tuned
    # dispatch stops calling it and the other mmt4d dispatch keeps its call.
    assert calls == {1: 2, 0: 1}


def test_an_op_can_not_call_the_microkernel_its_executable_does_not_link(
    late_path_dumps: tuple[Path, Path, list[Path]], tmp_path: Path
) -> None:
    """Pinned for IREE 3.13: the variant's target decides whether the microkernel's bitcode is
    linked, so an op whose own target names the microkernel in an executable compiled without
    it lowers to a call that does not link. The day this compiles, the mmt4d space can offer
    the microkernel where the flags leave it off."""
    model, _, dumps = late_path_dumps
    context = ir.Context()
    with context:
        _, root = _parse(dumps[-1], context)
        problem = parse_problem(root)
        space = space_for(_target().target, problem)
        default = space.parse_default_knobs(problem, root)
        assert default is not None
        info = space.configuration(problem, default, context).compilation_info
        calls_it = CODEGEN_TARGET.replace('"none"', '"mmt4d"')
        spec = render_spec(
            build_spec([MatcherEntry(problem, info, ((TARGET_ATTRIBUTE, calls_it),))], context)
        )
    folder = tmp_path / "off"
    folder.mkdir()
    (folder / "spec.mlir").write_text(spec)
    flags = [f.replace("=mmt4d", "=none") for f in _target().compile_flags]
    assert "--iree-llvmcpu-enable-ukernels=none" in flags
    compiled = subprocess.run(
        [IREE_COMPILE, str(model), *flags, f"--iree-codegen-tuning-spec-path={folder / 'spec.mlir'}", "--mlir-disable-threading",
         "-o", str(folder / "m.vmfb")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert compiled.returncode != 0
    assert "undefined symbol: iree_uk_mmt4d" in compiled.stderr


def _winner_row(key: ResultKey, knobs: Knobs, info: str) -> StoredResult:
    """A verified winner's database row for `knobs` (the figures do not matter to export)."""
    return StoredResult(
        key, config_key(knobs), info, "verified", "", (1.0,), 1.0, 1.0, 1.0, 0.0, 1.2, 1.2,
        "s", "2026-12-05T00:00:00+00:00", verdict="winner", rule="r",
    )  # fmt: skip


def test_an_exported_codegen_result_keeps_the_op_s_target(
    late_path_dumps: tuple[Path, Path, list[Path]], tmp_path: Path
) -> None:
    context = ir.Context()
    with context:
        _, root = _parse(late_path_dumps[2][-1], context)
        problem = parse_problem(root)
        target = _target().target
        info = space_for(target, problem).configuration(problem, DEFAULT, context).compilation_info
    key = ResultKey(
        compiler_version(), target.name, "local-task", problem_key(problem), problem.signature
    )
    specs = []
    for value in (1, 0):
        with TuningDatabase(tmp_path / f"{value}.sqlite") as database:
            database.write(_winner_row(key, (*DEFAULT[:-1], (UKERNEL, value)), info))
            specs.append(render_linked_spec(database.best_results()))
    assert TARGET_ATTRIBUTE not in specs[0]
    assert f'"{TARGET_ATTRIBUTE}"' in specs[1] and 'ukernels = "none"' in specs[1]


def _compiled_encoder(path: str, tmp_path: Path) -> tuple[Path, CompileTarget, Path, Path]:
    """Compile ENCODER_MODEL on a data-tiling path ("early", or the late one, which the CPU
    target materialises first by itself); return the model, its target, the batch_mmt4d's
    dispatch benchmark and the folder of the default's LLVM IR."""
    model = tmp_path / "encoder.mlir"
    model.write_text(ENCODER_MODEL)
    flags = LATE if path != "early" else (*DATA_TILING_PATHS["early"], *LATE[1:])
    target = resolve_compile_target(BATCH_TARGET, flags)
    dumps, default_ir = tmp_path / "dumps", tmp_path / "default"
    subprocess.run(
        [IREE_COMPILE, str(model), *target.compile_flags, f"--iree-hal-dump-executable-benchmarks-to={dumps}",
         f"--iree-hal-dump-executable-intermediates-to={default_ir}",
         "--iree-codegen-add-tuner-attributes", "-o", str(tmp_path / "default.vmfb")],
        check=True, capture_output=True,
    )  # fmt: skip
    (dump,) = [p for p in dumps.glob("*_benchmark.mlir") if "linalg.batch_mmt4d" in p.read_text()]
    return model, target, dump, default_ir


def _batch_request(
    dump: Path, target: CompileTarget, context: ir.Context
) -> tuple[FamilySpace, SpaceRequest]:
    """Return the batch_mmt4d dispatch's space and its request: the problem, the variant's
    target and the default's knobs, as a run renders its candidates."""
    module, root = _parse(dump, context)
    (variant,) = iree_codegen.get_executable_variant_ops(module)
    problem = parse_problem(root)
    space = space_for(target.target, problem)
    default = space.parse_default_knobs(problem, root)
    return space, SpaceRequest(problem, variant.attributes["target"], default, 0)


@pytest.mark.parametrize("path", ["late materialised first", "early"])
def test_a_batch_mmt4d_s_own_target_does_not_reach_the_microkernel_lowering(
    path: str, tmp_path: Path
) -> None:
    """Pinned for IREE 3.13, on both data-tiling paths: codegen splits a batch_mmt4d into mmt4d
    ops before the microkernel lowering, and they do not keep the op's own target, so the spec
    that turns an mmt4d to codegen changes nothing here (the batch_mmt4d's knob sets its
    function's target instead: the next test). The day it does, the knob can set the op's."""
    model, target, dump, default_ir = _compiled_encoder(path, tmp_path)
    context = ir.Context()
    with context:
        _, root = _parse(dump, context)
        problem = parse_problem(root)
        assert isinstance(problem, ContractionProblem) and problem.is_batch_mmt4d
        default = space_for(target.target, problem).parse_default_knobs(problem, root)
        assert default is not None
        # Another tile than the default's shows that the spec reached the op.
        values = dict(default)
        knobs = tuple({**values, "dist_m1": 2 * values["dist_m1"]}.items())
        info = space_for(target.target, problem).configuration(problem, knobs, context)
        entry = MatcherEntry(problem, info.compilation_info, ((TARGET_ATTRIBUTE, CODEGEN_TARGET),))
        spec = tmp_path / "spec.mlir"
        spec.write_text(render_spec(build_spec([entry], context)))
    tuned_ir = tmp_path / "tuned"
    subprocess.run(
        [IREE_COMPILE, str(model), *target.compile_flags, f"--iree-codegen-tuning-spec-path={spec}", "--mlir-disable-threading",
         f"--iree-hal-dump-executable-intermediates-to={tuned_ir}", "-o", str(tmp_path / "t.vmfb")],
        check=True, capture_output=True,
    )  # fmt: skip
    calls = [len(UKERNEL_CALL.findall(_llvm_ir(d).read_text())) for d in (default_ir, tuned_ir)]
    assert calls == [1, 1]
    assert (tmp_path / "t.vmfb").read_bytes() != (tmp_path / "default.vmfb").read_bytes()


@pytest.mark.parametrize("path", ["late materialised first", "early"])
def test_a_batch_mmt4d_s_codegen_candidate_sets_its_function_s_target_in_the_whole_model(
    path: str, tmp_path: Path
) -> None:
    """The ops a batch_mmt4d is split into find the target of their function: the space's
    codegen candidate sets there the executable's own target with `ukernels = "none"`, and the
    whole model's batch matmul stops calling the microkernel, with the same outputs."""
    model, target, dump, default_ir = _compiled_encoder(path, tmp_path)
    context = ir.Context()
    with context:
        space, request = _batch_request(dump, target, context)
        problem, default = request.problem, request.default_knobs
        assert default is not None and dict(default)[UKERNEL] == 1
        assert (*default[:-1], (UKERNEL, 0)) in space.near(request, default)
        codegen = (*default[:-1], (UKERNEL, 0))
        # Without its dispatch the configuration can not be rendered (export, kin).
        with pytest.raises(IreetuneError, match="rendered with the dispatch"):
            space.configuration(problem, codegen, context)
        configuration = space.configuration_for(request, codegen, context)
        assert not configuration.op_attributes
        ((name, function_target),) = configuration.function_attributes
        assert name == TARGET_ATTRIBUTE and function_target == codegen_target_of(
            str(request.variant_target)
        )
        spec = tmp_path / "spec.mlir"
        spec.write_text(build_configuration_spec(problem, configuration, (), context))
    assert 'cpu = "x86-64"' in function_target and 'ukernels = "none"' in function_target
    tuned_ir = tmp_path / "tuned"
    subprocess.run(
        [IREE_COMPILE, str(model), *target.compile_flags, f"--iree-codegen-tuning-spec-path={spec}", "--mlir-disable-threading",
         f"--iree-hal-dump-executable-intermediates-to={tuned_ir}", "-o", str(tmp_path / "t.vmfb")],
        check=True, capture_output=True,
    )  # fmt: skip
    calls = [len(UKERNEL_CALL.findall(_llvm_ir(d).read_text())) for d in (default_ir, tuned_ir)]
    assert calls == [1, 0]
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((4, 128, 64)), rng.standard_normal((4, 64, 128))
    np.savez(tmp_path / "inputs.npz", arg0=q.astype(np.float32), arg1=k.astype(np.float32))
    binaries = [("default", tmp_path / "default.vmfb"), ("codegen", tmp_path / "t.vmfb")]
    runs = run_models_side_by_side_here(
        ModelComparison(binaries, "main", tmp_path / "inputs.npz", tmp_path, "local-task", 1)
    )
    assert all(run.ok for run in runs.values()), {k: r.reason for k, r in runs.items()}
    for run in runs.values():
        np.testing.assert_allclose(run.outputs[0], q @ k, rtol=1e-4, atol=1e-4)


def test_a_batch_mmt4d_s_codegen_target_keeps_the_executable_s_other_fields() -> None:
    text = '#hal.executable.target<"llvm-cpu", "embedded-elf-x86_64", {cpu = "znver4", ukernels = "mmt4d"}>'
    assert codegen_target_of(text) == text.replace('"mmt4d"', '"none"')
    # Without the field (the compiler's default) it is added; without a target, no codegen.
    assert codegen_target_of(text.replace(', ukernels = "mmt4d"', "")) == codegen_target_of(text)
    assert codegen_target_of("") is None
    with ir.Context():
        facts = read_cpu_facts(ir.Attribute.parse(text), 2)
    assert facts.executable_target == text
    batched = itertools.islice(enumerate_mmt4d_space(BATCHED, facts, 0, None), 200)
    assert {int(dict(knobs)[UKERNEL]) for knobs in batched} == {0, 1}


# Two batch matmuls that differ only in what they sum (kin: model/kin.py).
KIN_ENCODER = """
func.func @main(%q: tensor<4x128x64xf32>, %k: tensor<4x64x128xf32>, %v: tensor<4x128x96xf32>,
                %w: tensor<4x96x128xf32>) -> (tensor<4x128x128xf32>, tensor<4x128x128xf32>) {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<4x128x128xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<4x128x128xf32>) -> tensor<4x128x128xf32>
  %r = linalg.batch_matmul ins(%q, %k : tensor<4x128x64xf32>, tensor<4x64x128xf32>)
                           outs(%init : tensor<4x128x128xf32>) -> tensor<4x128x128xf32>
  %s = linalg.batch_matmul ins(%v, %w : tensor<4x128x96xf32>, tensor<4x96x128xf32>)
                           outs(%init : tensor<4x128x128xf32>) -> tensor<4x128x128xf32>
  return %r, %s : tensor<4x128x128xf32>, tensor<4x128x128xf32>
}
"""


def test_a_batch_mmt4d_s_codegen_candidate_is_carried_to_its_kin_with_its_target(
    tmp_path: Path,
) -> None:
    """The kin spec repeats the tuned dispatch's target on each kin's function: both batch
    matmuls of the whole model stop calling the microkernel."""
    model = tmp_path / "encoder.mlir"
    model.write_text(KIN_ENCODER)
    target = parse_target(BATCH_TARGET).with_global_flags(LATE)
    dumped = dump_dispatches(model, target, tmp_path / "dispatches", 300)
    profiles = describe_dispatches(dumped, {}, {d.index: 1.0 for d in dumped}, target)
    batched = [p for p in profiles if p.problem.startswith("batch_mmt4d_")]
    assert len(batched) == 2 and batched[0].kin is not None and batched[0].kin == batched[1].kin
    knobs = make_knobs({"dist_m1": 1, "dist_n1": 1, UKERNEL: 0})
    kept = [KeptCandidate(tmp_path / "own_spec.mlir", knobs, faster_alone=True)]
    extended = extend_with_kin(target, batched[0], profiles, kept, tmp_path / "kin")
    assert extended.kin_names == (batched[1].name,), extended.note
    calls = {}
    for name, spec in (("default", None), ("with_kin", extended.specs[1])):
        folder = tmp_path / name
        folder.mkdir()
        subprocess.run(
            [IREE_COMPILE, str(model), *target.compile_flags(),
             *([f"--iree-codegen-tuning-spec-path={spec}", "--mlir-disable-threading"] if spec else []),
             f"--iree-hal-dump-executable-intermediates-to={folder}", "-o", str(folder / "m.vmfb")],
            check=True, capture_output=True,
        )  # fmt: skip
        calls[name] = len(UKERNEL_CALL.findall(_llvm_ir(folder).read_text()))
    assert calls == {"default": 2, "with_kin": 0}


def test_an_exported_batch_codegen_result_is_refused_in_one_line(tmp_path: Path) -> None:
    """A database holds no dispatch: a batch_mmt4d's codegen result, which repeats its
    dispatch's target, can not be rendered from it, and export says so (a microkernel one is
    exported)."""
    _, target, dump, _ = _compiled_encoder("early", tmp_path)
    context = ir.Context()
    with context:
        _, root = _parse(dump, context)
        problem = parse_problem(root)
        space = space_for(target.target, problem)
        default = space.parse_default_knobs(problem, root)
        assert default is not None
        info = space.configuration(problem, default, context).compilation_info
    key = ResultKey(
        compiler_version(), target.target.name, "local-task", problem_key(problem),
        problem.signature,
    )  # fmt: skip
    for value in (1, 0):
        with TuningDatabase(tmp_path / f"{value}.sqlite") as database:
            database.write(_winner_row(key, (*default[:-1], (UKERNEL, value)), info))
            if value:
                assert "compilation_info" in render_linked_spec(database.best_results())
                continue
            with pytest.raises(IreetuneError, match=re.escape(problem.signature)) as refused:
                render_linked_spec(database.best_results())
    assert "\n" not in str(refused.value) and "best_spec.mlir" in str(refused.value)


def test_a_batch_codegen_winner_s_function_target_is_proved_to_land(tmp_path: Path) -> None:
    """The winner's landing proof looks for the attributes a spec sets on the op's function,
    not only its lowering_config: a spec of the same tiles with the microkernel (no function
    target) is refused for a codegen winner. The split flow reads them back from the spec, and
    `ireetune compile` compares them in the whole model."""
    model, target, dump, _ = _compiled_encoder("late", tmp_path)
    context = ir.Context()
    with context:
        space, request = _batch_request(dump, target, context)
        problem, default = request.problem, request.default_knobs
        assert default is not None
        specs = {}
        for value in (0, 1):
            knobs = (*default[:-1], (UKERNEL, value))
            specs[value] = tmp_path / f"{value}.mlir"
            configuration = space.configuration_for(request, knobs, context)
            specs[value].write_text(build_configuration_spec(problem, configuration, (), context))
    codegen = space.configuration_for(request, (*default[:-1], (UKERNEL, 0)), context)
    assert _function_attributes_of(specs[0], context) == codegen.function_attributes
    assert _function_attributes_of(specs[1], context) == ()
    with context:
        matchers = list_matchers(ir.Module.parse(specs[0].read_text()).operation)
    shown = render_matchers(matchers)
    assert "   sets on its function: hal.executable.target = #hal" in shown
    assert "param: #hal.executable.target" not in shown
    prove_config_landed(
        target.target, dump, specs[0], codegen.compilation_info, tmp_path / "0", context,
        _function_attributes_of(specs[0], context),
    )  # fmt: skip
    with pytest.raises(IreetuneError, match="function attribute hal.executable.target did not"):
        prove_config_landed(
            target.target, dump, specs[1], codegen.compilation_info, tmp_path / "1", context,
            codegen.function_attributes,
        )  # fmt: skip
    report = compile_with_spec(model, target, specs[0], tmp_path / "m.vmfb", 120)
    (check,) = report.checks
    assert (
        report.landed and check.expected.count("its function's hal.executable.target = #hal") == 1
    )


def test_a_dispatch_run_proves_its_codegen_winner_s_function_target(tmp_path: Path) -> None:
    """A dispatch run proves its winner with what the winner's configuration sets on its
    function, not only its lowering_config: a codegen winner whose spec file holds the same
    tiles with the microkernel (no function target) is refused; its own spec lands."""
    _, target, dump, _ = _compiled_encoder("late", tmp_path)
    options = TuneOptions(
        input_path=dump, target=BATCH_TARGET, output_dir=tmp_path / "runs", use_database=False,
        show_progress=False, extra_flags=target.target.global_flags,
    )  # fmt: skip
    with open_run(options, target.target, LocalExecutor()) as run:
        start_run_folder(run, create_run_dir(options.output_dir, run.problem.signature))
        default = run.dispatch.default_knobs
        assert default is not None and default[-1][0] == UKERNEL
        codegen = (*default[:-1], (UKERNEL, 0))
        for value in (0, 1):
            knobs = (*default[:-1], (UKERNEL, value))
            (run.run_dir / f"{value}.mlir").write_text(
                build_configuration_spec(run.problem, run.configuration(knobs), (), run.context)
            )
        winner = CandidateRecord(1, codegen, CandidateStatus.COMPILED, spec_path="0.mlir")
        run.prove_winner(winner)
        with pytest.raises(IreetuneError, match="function attribute hal.executable.target did not"):
            run.prove_winner(dataclasses.replace(winner, spec_path="1.mlir"))
