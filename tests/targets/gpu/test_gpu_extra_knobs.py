"""Compile-only proof of which knobs outside the compiler's template land (no GPU needed).

For sm_80 and gfx942 and both pipelines, one configuration drawn from the space is compiled as it
is and with each knob set. A knob lands when the binary differs from the same configuration
without it and the option appears in the configuration dump
(`--iree-hal-dump-executable-configurations-to`). The knobs that land are searched
(targets/gpu/extra_knobs.py); the ones that reach the dump but leave the binary unchanged are
not, and this test says so, so that a compiler that changes its mind is noticed. Every variant is
compiled from the same spec path and without dump flags (a binary's hash depends on the paths it
was compiled from, the dump folder's included), and the unchanged configuration compiled twice
gives the same binary: the hashes differ because of the knob alone.
"""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path

import pytest
from iree.compiler import ir
from iree.compiler.dialects import iree_codegen, iree_gpu

from ireetune.core.candidate import make_knobs
from ireetune.core.target import SpaceRequest, spec_flags
from ireetune.core.tools import find_tool, run_tool
from ireetune.frontend.dispatches import strip_configurations
from ireetune.frontend.load import LoadedDispatch, load_dispatch
from ireetune.spec.builder import MatcherEntry, build_spec, render_spec
from ireetune.targets import parse_target
from ireetune.targets.gpu.extra_knobs import REORDER_WORKGROUPS
from ireetune.targets.gpu.space import GpuSpace
from ireetune.targets.gpu.target import GpuTarget
from ireetune.targets.gpu.template import build_compilation_info
from ireetune.verify.landing import dump_configurations
from tests.targets.gpu.test_gpu_compile import MMT_F16, dump_gpu_benchmark

# What each knob must put in the configuration dump when set.
DUMP_TEXT = {
    "no_bank_conflict_reduction": "no_reduce_shared_memory_bank_conflicts = true",
    "reorder_workgroups": "reorder_workgroups_strategy = <Transpose>",
    "waves_per_eu": '"amdgpu-waves-per-eu" = "2"',
}
# Knobs that reach the dump but leave the binary unchanged in IREE 3.13, so are not searched.
# waves_per_eu reaches the LLVM IR as a function attribute, and the AMDGPU backend gives the same
# code (for 4 and 8 it warns "failed to meet occupancy target").
NOT_LANDING = {
    ("cuda:sm_80", "TileAndFuse"): ("reorder_workgroups",),
    ("cuda:sm_80", "VectorDistribute"): ("reorder_workgroups",),
    ("rocm:gfx942", "TileAndFuse"): ("reorder_workgroups", "waves_per_eu"),
    ("rocm:gfx942", "VectorDistribute"): ("waves_per_eu",),
}
SUBGROUP_SIZES = {"cuda:sm_80": [32], "rocm:gfx942": [64]}


def _compile(
    target: GpuTarget, dispatch: LoadedDispatch, stripped: Path, info: str, work: Path,
    context: ir.Context,
) -> tuple[str, str]:  # fmt: skip
    """Compile the dispatch with one compilation_info; return the binary's hash and the dump."""
    spec_path = work.parent / "spec.mlir"
    spec_path.write_text(render_spec(build_spec([MatcherEntry(dispatch.problem, info)], context)))
    work.mkdir(parents=True)
    result = run_tool(
        [find_tool("iree-compile"), str(stripped), *target.compile_flags(),
         "--compile-from=executable-sources", *spec_flags(target, spec_path),
         "-o", str(work / "dispatch.vmfb")],
        timeout_s=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    # Dumped by a separate compile: the dump folder's path would change the binary's hash.
    dump = dump_configurations(target, stripped, spec_path, work / "configurations")
    return hashlib.sha256((work / "dispatch.vmfb").read_bytes()).hexdigest(), dump


def _with_waves_per_eu(info_text: str, waves: int, context: ir.Context) -> str:
    """Add `llvm_func_attrs = {"amdgpu-waves-per-eu" = ...}` to the translation_info."""
    with context:
        info = iree_codegen.CompilationInfoAttr(ir.Attribute.parse(info_text))
        translation = info.translation_info
        configuration = {named.name: named.attr for named in ir.DictAttr(translation.configuration)}
        configuration["llvm_func_attrs"] = ir.Attribute.parse(
            f'{{"amdgpu-waves-per-eu" = "{waves}"}}'
        )
        changed = iree_codegen.TranslationInfoAttr.get(
            translation.pass_pipeline, translation.codegen_spec, list(translation.workgroup_size),
            translation.subgroup_size, ir.DictAttr.get(configuration),
        )  # fmt: skip
        return str(iree_codegen.CompilationInfoAttr.get(info.lowering_config, changed))


@pytest.mark.parametrize(("target_name", "pipeline"), sorted(NOT_LANDING))
def test_searched_knobs_land_and_the_others_do_not(
    target_name: str, pipeline: str, tmp_path: Path
) -> None:
    benchmark = dump_gpu_benchmark(MMT_F16, target_name, tmp_path / "benchmark")
    target = parse_target(target_name, (pipeline,))
    assert isinstance(target, GpuTarget)
    context = ir.Context()
    dispatch = load_dispatch(benchmark, None, target, tmp_path / "scratch", context)
    stripped = tmp_path / "stripped.mlir"
    strip_configurations(benchmark, stripped, timeout_s=120)
    generated = dispatch.space.generate(
        SpaceRequest(dispatch.problem, dispatch.variant_target, dispatch.default_knobs, 0)
    )
    pool = list(itertools.islice(generated, 40))
    searched = [knob for knob in target.extra_knobs if pipeline in knob.pipelines]
    # The search draws every value of the knobs searched here, and only the default of the rest.
    assert {k.name: sorted({dict(c)[k.name] for c in pool}) for k in target.extra_knobs} == {
        k.name: sorted(k.values) if k in searched else [k.values[0]] for k in target.extra_knobs
    }
    # One subgroup size per target: the template's `sg_size` has nothing to choose here.
    with context:
        choices = iree_gpu.TargetInfo.get_gpu_target_info(dispatch.variant_target)
    assert list(choices.subgroup_size_choices) == SUBGROUP_SIZES[target_name]
    assert sorted({dict(c)["sg_size"] for c in pool}) == SUBGROUP_SIZES[target_name]

    base = make_knobs({**dict(pool[0]), **{k.name: k.values[0] for k in target.extra_knobs}})
    base_info = dispatch.space.configuration(dispatch.problem, base, context).compilation_info
    base_hash, base_dump = _compile(target, dispatch, stripped, base_info, tmp_path / "base", context)  # fmt: skip
    again_hash, _ = _compile(target, dispatch, stripped, base_info, tmp_path / "again", context)  # fmt: skip
    assert again_hash == base_hash
    variants = {
        knob.name: dispatch.space.configuration(
            dispatch.problem, make_knobs({**dict(base), knob.name: knob.values[1]}), context
        ).compilation_info
        for knob in searched
    }
    if "reorder_workgroups" in NOT_LANDING[(target_name, pipeline)]:
        assert isinstance(dispatch.space, GpuSpace)
        _, config = dispatch.space.resolved_config(base)
        REORDER_WORKGROUPS.apply(config, 1)
        variants["reorder_workgroups"] = str(build_compilation_info(config, pipeline, context)[0])
    if "waves_per_eu" in NOT_LANDING[(target_name, pipeline)]:
        variants["waves_per_eu"] = _with_waves_per_eu(base_info, 2, context)
    outcome = {}
    for name, info in variants.items():
        variant_hash, dump = _compile(target, dispatch, stripped, info, tmp_path / name, context)
        assert DUMP_TEXT[name] in dump and DUMP_TEXT[name] not in base_dump, name
        outcome[name] = variant_hash != base_hash
    assert outcome == {
        **{knob.name: True for knob in searched},
        **{name: False for name in NOT_LANDING[(target_name, pipeline)]},
    }


def test_prefetch_shared_memory_is_gone_in_iree_3_13() -> None:
    """The option of older IREE is refused; its successor, `prefetch_num_stages`, is a knob of the
    compiler's own template and is searched with it."""
    with ir.Context(), pytest.raises(ir.MLIRError) as excinfo:
        ir.Attribute.parse("#iree_gpu.pipeline_options<prefetch_shared_memory = true>")
    assert "unknown struct parameter name: prefetch_shared_memory" in str(excinfo.value)
