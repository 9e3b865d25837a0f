"""The llvm-cpu target: one hand-written search space per op family (no compiler emitter exists
for the CPU pipelines)."""

from __future__ import annotations

import dataclasses
import json
import os
import platform
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from ireetune.core.candidate import Knobs
from ireetune.core.errors import IreetuneError
from ireetune.core.features import FeatureSpace
from ireetune.core.flag_space import FlagSpace
from ireetune.core.target import FactValue, FamilySpace, SpaceFactory, SpaceRequest, Target
from ireetune.database.space_cache import SpaceCache, compute_cache_key, stored_first
from ireetune.database.store import problem_key
from ireetune.problem.contraction import ContractionProblem
from ireetune.problem.convolution import ConvolutionProblem
from ireetune.problem.family import Problem, narrow
from ireetune.targets.llvm_cpu.common import CpuSpace
from ireetune.targets.llvm_cpu.conv_space import CpuConvolutionSpace, compute_conv_sizes
from ireetune.targets.llvm_cpu.elementwise_space import CpuElementwiseSpace
from ireetune.targets.llvm_cpu.facts import CpuFacts
from ireetune.targets.llvm_cpu.features import (
    FEATURE_FAMILY,
    FEATURE_NAMES,
    contraction_features,
    convolution_features,
)
from ireetune.targets.llvm_cpu.flags import CPU_FLAG_SPACE, with_channels_last_windows
from ireetune.targets.llvm_cpu.reduction_space import CpuReductionSpace
from ireetune.targets.llvm_cpu.space import CpuContractionSpace, compute_problem_sizes
from ireetune.targets.llvm_cpu.window_layout import write_window_specs
from ireetune.targets.llvm_cpu.window_space import CpuWindowSpace, is_window_problem

# Names the hand-written spaces (space.py, conv_space.py) in the key of stored solutions: change
# it whenever their constraints change, so that no stored configuration of the old space is used.
SPACE_VERSION = "llvm-cpu-space/v1"
# IREE's llvm-cpu pipeline runs this after the tuning spec: it gives a convolution whose unit
# batch global optimisation folded away (every batch-1 convolution of a model) its batch loop
# back, and drops the attributes of the op it replaces, the spec's compilation_info among them.
INSERT_BATCH_DIM_PASS = "iree-codegen-insert-batch-dim-for-batchless-conv"
# The x86-64 CPUs that IREE 3.13's LLVM knows (its list when `--iree-llvmcpu-target-cpu` names
# another): the names `--target cpu:NAME` takes on an x86-64 host.
_X86_64_CPU_NAMES = (
    "nocona core2 penryn bonnell atom silvermont slm goldmont goldmont-plus tremont nehalem corei7 "
    "westmere sandybridge corei7-avx ivybridge core-avx-i haswell core-avx2 broadwell skylake "
    "skylake-avx512 skx cascadelake cooperlake cannonlake icelake-client rocketlake "
    "icelake-server tigerlake sapphirerapids alderlake raptorlake meteorlake arrowlake "
    "arrowlake-s lunarlake gracemont pantherlake wildcatlake novalake sierraforest grandridge "
    "graniterapids graniterapids-d emeraldrapids clearwaterforest diamondrapids knl knm k8 "
    "athlon64 athlon-fx opteron k8-sse3 athlon64-sse3 opteron-sse3 amdfam10 barcelona btver1 "
    "btver2 bdver1 bdver2 bdver3 bdver4 znver1 znver2 znver3 znver4 znver5 znver6 c86-4g-m4 "
    "c86-4g-m6 c86-4g-m7 c86-4g-m8 x86-64 x86-64-v2 x86-64-v3 x86-64-v4"
)
X86_64_CPUS = frozenset(_X86_64_CPU_NAMES.split())
# The families whose candidates the learned cost model has features for.
_FEATURE_FAMILIES = ("contraction", "batch_contraction", "convolution")


class LlvmCpuTarget(Target):
    """IREE's llvm-cpu backend, run on the `local-task` device."""

    def __init__(self, cpu: str = "host", threads: int | None = None) -> None:
        if cpu != "host" and platform.machine() in ("x86_64", "AMD64") and cpu not in X86_64_CPUS:
            # LLVM would only warn and compile for a generic CPU.
            raise IreetuneError(
                f"unknown CPU '{cpu}' in --target cpu:{cpu}; LLVM's x86-64 CPUs include "
                "haswell, skylake-avx512, znver4 and x86-64-v3"
            )
        self.cpu = cpu
        self.threads = threads or len(os.sched_getaffinity(0))
        # Recorded facts (`use_machine_facts`) or those the last generation read.
        self._facts: CpuFacts | None = None
        self._cache_root: Path | None = None

    @property
    def name(self) -> str:
        return "cpu" if self.cpu == "host" else f"cpu:{self.cpu}"

    backend = "llvm-cpu"
    runtime_device = "local-task"
    # Measured here: a 1024^3 f32 matmul's dispatch benchmark took 40 ms on uninitialised
    # buffers and 23 ms on real inputs, and a 1.68x dispatch-level win was 1.085x on real data.
    decides_at_model_level = True
    renders_without_dispatch = True
    # MobileNet-v2's 3136x24x144 matmul dispatch: 2.0 ms on the uninitialised buffer, 0.2 ms
    # on a zeroed one (2026-11-28); the garbage put it first in the model's profile.
    zeroes_benchmark_buffers = True

    def target_flags(self) -> list[str]:
        return [
            "--iree-hal-target-device=local",
            "--iree-hal-local-target-device-backends=llvm-cpu",
            f"--iree-llvmcpu-target-cpu={self.cpu}",
        ]

    def flag_space(self) -> FlagSpace:
        return CPU_FLAG_SPACE

    def model_flag_space(self, model_path: Path, folder: Path, timeout_s: float) -> FlagSpace:
        # A model with NCHW depthwise convolutions or pools gets transform specs made for it.
        specs = write_window_specs(model_path, tuple(self.target_flags()), folder, timeout_s)
        return with_channels_last_windows(CPU_FLAG_SPACE, specs) if specs else CPU_FLAG_SPACE

    def spec_prologue(self, problem: Problem) -> tuple[str, ...]:
        # The dispatch benchmark shows the convolution with its batch loop (the pass ran before
        # the dump); a model, and the reference program, reach the spec without it.
        return (INSERT_BATCH_DIM_PASS,) if problem.family == "convolution" else ()

    def needs_more_than_compilation_info(self, problem: Problem) -> bool:
        # A reduction sets the configs of its dispatch's other ops too.
        return problem.family == "reduction"

    def family_spaces(self) -> Mapping[str, SpaceFactory]:
        return {
            "contraction": lambda: CpuContractionSpace(self.threads),
            "batch_contraction": lambda: CpuContractionSpace(self.threads),
            "convolution": lambda: CpuConvolutionSpace(self.threads),
            "reduction": lambda: CpuReductionSpace(self.threads),
            "elementwise": lambda: CpuElementwiseSpace(self.threads),
        }

    def unsupported_families(self) -> Mapping[str, str]:
        return {
            "attention": (
                "IREE 3.13 lowers CPU attention with its own tile-and-vectorize pipeline, which "
                "has no hand-written space here yet"
            ),
        }

    def space_for(self, problem: Problem) -> FamilySpace:
        # Pooling and depthwise windows are convolutions to IREE's interface, with a space of
        # their own here: the space set up for one kind never serves the other.
        window = problem.family == "convolution" and is_window_problem(
            narrow(problem, ConvolutionProblem)
        )
        if window and not isinstance(self._space, CpuWindowSpace):
            self._space, self._space_family = CpuWindowSpace(self.threads), problem.family
        elif not window and isinstance(self._space, CpuWindowSpace):
            self._space = None
        space = super().space_for(problem)
        if self._facts is not None and isinstance(space, CpuSpace) and space._facts is None:
            space.use_facts(self._facts)
        return space

    def use_cache_folder(self, folder: Path) -> None:
        self._cache_root = folder

    def generate_for(self, request: SpaceRequest) -> Iterator[Knobs]:
        problem = request.problem
        space = self.space_for(problem)
        assert isinstance(space, CpuSpace), "every CPU family space is a CpuSpace"
        facts = space.facts(request.variant_target)
        self._facts = facts
        names = space.stored_knob_names(problem)
        if names is None or self._cache_root is None:
            return space.generate(request)
        key = compute_cache_key(
            [problem_key(problem), self.name, json.dumps(dataclasses.asdict(facts)), SPACE_VERSION]
        )  # fmt: skip
        cache = SpaceCache(self._cache_root / key)
        stored = [
            knobs
            for knobs in cache.read_solutions()
            if {name for name, _ in knobs} == names and knobs != request.default_knobs
        ]
        live = space.generate(request, known=stored)
        return _stored_then_live(stored, live, cache, request.seed)

    def feature_space(self, problem: Problem) -> FeatureSpace | None:
        if (
            problem.family not in _FEATURE_FAMILIES
            or (problem.family == "contraction" and narrow(problem, ContractionProblem).is_mmt4d)
            or (
                problem.family == "convolution"
                and is_window_problem(narrow(problem, ConvolutionProblem))
            )
        ):
            # No features for data-tiled matmuls or reductions yet: their heuristic orders them.
            return None
        return FeatureSpace(FEATURE_FAMILY, FEATURE_NAMES)

    def candidate_features(self, problem: Problem, pool: Sequence[Knobs]) -> list[list[float]]:
        assert self._facts is not None, "facts are read when candidates are generated"
        facts = self._facts
        if problem.family == "convolution":
            conv_sizes = compute_conv_sizes(narrow(problem, ConvolutionProblem))
            return [convolution_features(conv_sizes, facts, knobs) for knobs in pool]
        sizes = compute_problem_sizes(narrow(problem, ContractionProblem))
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
        if isinstance(self._space, CpuSpace):
            self._space.use_facts(self._facts)


def _stored_then_live(
    stored: list[Knobs], live: Iterator[Knobs], cache: SpaceCache | None, seed: int
) -> Iterator[Knobs]:
    """Yield stored solutions (seeded order), then fresh ones, storing those as they come."""
    yield from stored_first(stored, seed)
    for knobs in live:
        if cache is not None:
            cache.add_solution(knobs)
        yield knobs
