"""The llvm-cpu target."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from iree.compiler import ir
from iree.compiler.dialects import iree_codegen

from ireetune.database.store import problem_key
from ireetune.errors import IreetuneError
from ireetune.flags.space import FlagSpace
from ireetune.problem.contraction import ContractionProblem
from ireetune.problem.convolution import ConvolutionProblem
from ireetune.problem.root_op import Problem
from ireetune.search.candidate import Knobs, make_knobs
from ireetune.search.features import FeatureSpace
from ireetune.search.space_cache import SpaceCache, compute_cache_key, stored_first
from ireetune.targets.base import FactValue, Target
from ireetune.targets.llvm_cpu.conv_space import (
    CONV_KNOB_NAMES,
    CONV_PIPELINE,
    compute_conv_sizes,
    conv_tile_lists,
    enumerate_conv_space,
    order_conv_candidates,
    parse_default_conv_knobs,
)
from ireetune.targets.llvm_cpu.facts import CpuFacts, read_cpu_facts
from ireetune.targets.llvm_cpu.features import (
    FEATURE_FAMILY,
    FEATURE_NAMES,
    contraction_features,
    convolution_features,
)
from ireetune.targets.llvm_cpu.flags import CPU_FLAG_SPACE
from ireetune.targets.llvm_cpu.mmt4d_space import (
    MMT4D_PIPELINE,
    compute_mmt4d_sizes,
    enumerate_mmt4d_space,
    mmt4d_tile_lists,
    order_mmt4d_candidates,
    parse_default_mmt4d_knobs,
)
from ireetune.targets.llvm_cpu.ordering import order_by_score
from ireetune.targets.llvm_cpu.space import (
    KNOB_NAMES,
    compute_problem_sizes,
    enumerate_space,
    tile_lists,
)

PIPELINE = "DoubleTilingExpert"
# Names the hand-written spaces (space.py, conv_space.py) in the key of stored solutions: change
# it whenever their constraints change, so that no stored configuration of the old space is used.
SPACE_VERSION = "llvm-cpu-space/v1"


class LlvmCpuTarget(Target):
    """IREE's llvm-cpu backend, run on the `local-task` device."""

    def __init__(self, cpu: str = "host", threads: int | None = None) -> None:
        self.cpu = cpu
        self.threads = threads or len(os.sched_getaffinity(0))
        self._facts: CpuFacts | None = None
        self._cache_root: Path | None = None

    @property
    def name(self) -> str:
        return "cpu" if self.cpu == "host" else f"cpu:{self.cpu}"

    @property
    def backend(self) -> str:
        return "llvm-cpu"

    @property
    def runtime_device(self) -> str:
        return "local-task"

    @property
    def decides_at_model_level(self) -> bool:
        # Measured here: a 1024^3 f32 matmul's dispatch benchmark took 40 ms on uninitialised
        # buffers and 23 ms on real inputs, and a 1.68x dispatch-level win was 1.085x on real data.
        return True

    def target_flags(self) -> list[str]:
        return [
            "--iree-hal-target-device=local",
            "--iree-hal-local-target-device-backends=llvm-cpu",
            f"--iree-llvmcpu-target-cpu={self.cpu}",
        ]

    def spec_flags(self, spec_path: Path) -> list[str]:
        return [f"--iree-codegen-tuning-spec-path={spec_path}"]

    def flag_space(self) -> FlagSpace:
        return CPU_FLAG_SPACE

    def prepare(
        self, problem: Problem, benchmark_path: Path, scratch_dir: Path, context: ir.Context
    ) -> None:
        if isinstance(problem, ConvolutionProblem):
            compute_conv_sizes(problem)  # Raises for the convolutions the CPU space does not cover.
        else:
            _as_contraction(problem)

    def facts(self, variant_target: ir.Attribute | None) -> CpuFacts:
        """Return (and remember) the CPU facts for the dispatch's executable target."""
        if self._facts is None:
            self._facts = read_cpu_facts(variant_target, self.threads)
        return self._facts

    def use_cache_folder(self, folder: Path) -> None:
        self._cache_root = folder

    def generate_candidates(
        self,
        problem: Problem,
        variant_target: ir.Attribute,
        default_knobs: Knobs | None,
        seed: int,
    ) -> Iterator[Knobs]:
        facts = self.facts(variant_target)
        cache = None
        if self._cache_root is not None:
            key = compute_cache_key(
                [problem_key(problem), self.name, json.dumps(dataclasses.asdict(facts)), SPACE_VERSION]
            )  # fmt: skip
            cache = SpaceCache(self._cache_root / key)
        names = set(CONV_KNOB_NAMES if isinstance(problem, ConvolutionProblem) else KNOB_NAMES)
        stored = [
            knobs
            for knobs in (cache.read_solutions() if cache is not None else [])
            if {name for name, _ in knobs} == names and knobs != default_knobs
        ]
        if isinstance(problem, ConvolutionProblem):
            live = enumerate_conv_space(
                compute_conv_sizes(problem), facts, seed, default_knobs, stored
            )
        elif _as_contraction(problem).is_mmt4d:
            # Data-tiled matmuls have their own knobs; their space is small and not cached.
            return enumerate_mmt4d_space(compute_mmt4d_sizes(problem), facts, seed, default_knobs)
        else:
            sizes = compute_problem_sizes(_as_contraction(problem))
            live = enumerate_space(sizes, facts, seed, excluded=default_knobs, known=stored)
        return _stored_then_live(stored, live, cache, seed)

    def order_candidates(
        self, problem: Problem, pool: list[Knobs], seed: int
    ) -> list[tuple[Knobs, float]]:
        assert self._facts is not None, "facts are read when candidates are generated"
        if isinstance(problem, ConvolutionProblem):
            return order_conv_candidates(compute_conv_sizes(problem), self._facts, pool, seed)
        if _as_contraction(problem).is_mmt4d:
            return order_mmt4d_candidates(compute_mmt4d_sizes(problem), self._facts, pool, seed)
        sizes = compute_problem_sizes(_as_contraction(problem))
        return order_by_score(sizes, self._facts, pool, seed)

    def feature_space(self, problem: Problem) -> FeatureSpace | None:
        if not isinstance(problem, ConvolutionProblem) and _as_contraction(problem).is_mmt4d:
            # No features for data-tiled matmuls yet: their heuristic orders them.
            return None
        return FeatureSpace(FEATURE_FAMILY, FEATURE_NAMES)

    def candidate_features(self, problem: Problem, pool: Sequence[Knobs]) -> list[list[float]]:
        assert self._facts is not None, "facts are read when candidates are generated"
        facts = self._facts
        if isinstance(problem, ConvolutionProblem):
            conv_sizes = compute_conv_sizes(problem)
            return [convolution_features(conv_sizes, facts, knobs) for knobs in pool]
        sizes = compute_problem_sizes(_as_contraction(problem))
        return [contraction_features(sizes, facts, knobs) for knobs in pool]

    def machine_facts(self) -> dict[str, FactValue]:
        assert self._facts is not None, "facts are read when candidates are generated"
        return dataclasses.asdict(self._facts)

    def use_machine_facts(self, facts: Mapping[str, FactValue]) -> None:
        names = {field.name: field.type for field in dataclasses.fields(CpuFacts)}
        if set(facts) - set(names) or not {"cpu", "native_vector_bytes"} <= set(facts):
            raise IreetuneError(f"not the facts of a CPU: {sorted(facts)}")
        values: dict[str, int | str] = {}
        for name, value in facts.items():
            wanted = str if name == "cpu" else int
            if not isinstance(value, wanted) or isinstance(value, bool):
                raise IreetuneError(f"CPU fact {name} must be {wanted.__name__}, got {value!r:.40}")
            values[name] = value
        self._facts = CpuFacts(**values)  # type: ignore[arg-type]

    def compilation_info(self, problem: Problem, knobs: Knobs, context: ir.Context) -> str:
        if isinstance(problem, ConvolutionProblem):
            tiles, pipeline_name = conv_tile_lists(problem, knobs), CONV_PIPELINE
        elif problem.is_mmt4d:
            tiles, pipeline_name = mmt4d_tile_lists(problem, knobs), MMT4D_PIPELINE
        else:
            tiles, pipeline_name = tile_lists(_as_contraction(problem), knobs), PIPELINE
        fields = ", ".join(f"{level} = {values}" for level, values in tiles.items())
        with context:
            # iree_cpu has no Python binding in IREE 3.13, so its attribute is parsed from text;
            # the compilation_info around it is built through the bindings.
            lowering_config = ir.Attribute.parse(f"#iree_cpu.lowering_config<{fields}>")
            pipeline = ir.Attribute.parse(f"#iree_cpu.pipeline<{pipeline_name}>")
            translation_info = iree_codegen.TranslationInfoAttr.get(pipeline)
            return str(iree_codegen.CompilationInfoAttr.get(lowering_config, translation_info))

    def parse_default_knobs(self, problem: Problem, root_op: ir.Operation) -> Knobs | None:
        if "lowering_config" not in root_op.attributes:
            return None
        text = str(root_op.attributes["lowering_config"])
        levels = {}
        for level in ("distribution", "vector_common_parallel", "vector_reduction"):
            match = re.search(rf"{level} = \[([0-9, ]*)\]", text)
            if match is None:
                return None
            levels[level] = [int(v) for v in match.group(1).split(",") if v.strip()]
        if any(len(values) != len(problem.loop_sizes) for values in levels.values()):
            return None
        if isinstance(problem, ConvolutionProblem):
            return parse_default_conv_knobs(problem, levels)
        if problem.is_mmt4d:
            return parse_default_mmt4d_knobs(problem, levels)
        m, n, k = problem.m_dims[-1], problem.n_dims[-1], problem.k_dims[-1]
        return make_knobs(
            {
                "dist_m": levels["distribution"][m],
                "dist_n": levels["distribution"][n],
                "vec_m": levels["vector_common_parallel"][m],
                "vec_n": levels["vector_common_parallel"][n],
                "vec_k": levels["vector_reduction"][k],
            }
        )


def _stored_then_live(
    stored: list[Knobs], live: Iterator[Knobs], cache: SpaceCache | None, seed: int
) -> Iterator[Knobs]:
    """Yield stored solutions (seeded order), then fresh ones, storing those as they come."""
    yield from stored_first(stored, seed)
    for knobs in live:
        if cache is not None:
            cache.add_solution(knobs)
        yield knobs


def _as_contraction(problem: Problem) -> ContractionProblem:
    if not isinstance(problem, ContractionProblem):
        raise IreetuneError(f"{problem.kind} dispatches are not supported on the cpu target yet")
    return problem
