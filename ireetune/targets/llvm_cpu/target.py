"""The llvm-cpu target: one hand-written search space per op family (no compiler emitter exists
for the CPU pipelines)."""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping, Sequence
from pathlib import Path

from ireetune.core.errors import IreetuneError
from ireetune.core.features import FeatureExtractor
from ireetune.core.flag_space import FlagSpace
from ireetune.core.target import SpaceFactory, SpaceRequest, Target, TargetTraits
from ireetune.problem.contraction import ContractionProblem
from ireetune.problem.convolution import ConvolutionProblem
from ireetune.problem.family import Problem, narrow
from ireetune.targets.llvm_cpu.common import CpuSpace, SolutionStore, request_cpu_facts
from ireetune.targets.llvm_cpu.conv_space import (
    CpuConvolutionSpace,
    CpuWindowSpace,
    is_window_problem,
)
from ireetune.targets.llvm_cpu.elementwise_space import (
    CpuBufferCopySpace,
    CpuElementwiseSpace,
    CpuPackSpace,
    CpuUnpackSpace,
    CpuWindowSumSpace,
    is_window_sum_problem,
)
from ireetune.targets.llvm_cpu.features import CpuFeatureExtractor, has_features
from ireetune.targets.llvm_cpu.flags import (
    CPU_FLAG_SPACE,
    with_channels_last_windows,
    with_materialize_first,
)
from ireetune.targets.llvm_cpu.mmt4d_space import (
    CpuInnerTiledSpace,
    CpuMmt4dSpace,
    is_data_tiled,
)
from ireetune.targets.llvm_cpu.reduction_space import CpuReductionSpace
from ireetune.targets.llvm_cpu.space import CpuContractionSpace
from ireetune.targets.llvm_cpu.window_layout import write_window_specs

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

    @property
    def name(self) -> str:
        return "cpu" if self.cpu == "host" else f"cpu:{self.cpu}"

    backend = "llvm-cpu"
    runtime_device = "local-task"
    traits = TargetTraits(
        # Measured here: a 1024^3 f32 matmul's dispatch benchmark took 40 ms on uninitialised
        # buffers and 23 ms on real inputs, and a 1.68x dispatch-level win was 1.085x on real
        # data.
        decides_at_model_level=True,
        # MobileNet-v2's 3136x24x144 matmul dispatch: 2.0 ms on the uninitialised buffer, 0.2 ms
        # on a zeroed one (2026-11-28); the garbage put it first in the model's profile.
        zeroes_benchmark_buffers=True,
        renders_without_dispatch=True,
        # A reduction sets the configs of its dispatch's other ops too.
        full_configuration_families=frozenset({"reduction"}),
    )

    def target_flags(self) -> list[str]:
        return [
            "--iree-hal-target-device=local",
            "--iree-hal-local-target-device-backends=llvm-cpu",
            f"--iree-llvmcpu-target-cpu={self.cpu}",
        ]

    def with_global_flags(self, flags: Sequence[str]) -> Target:
        # Under late data tiling, the encodings are materialised before configuration, so that a
        # spec reaches the data-tiled matmuls of every compile and of the tuned flags file.
        return super().with_global_flags(with_materialize_first(flags))

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

    def family_spaces(self) -> Mapping[str, SpaceFactory]:
        return {
            "contraction": self._contraction_space,
            "batch_contraction": self._contraction_space,
            "convolution": self._convolution_space,
            "reduction": lambda _: self._stored(CpuReductionSpace(self.threads)),
            "elementwise": lambda _: self._stored(CpuElementwiseSpace(self.threads)),
            "pack": lambda _: self._stored(CpuPackSpace(self.threads)),
            "unpack": lambda _: self._stored(CpuUnpackSpace(self.threads)),
            "buffer_copy": lambda _: self._stored(CpuBufferCopySpace(self.threads)),
            "inner_tiled": lambda _: self._stored(CpuInnerTiledSpace(self.threads)),
        }

    def _contraction_space(self, problem: Problem) -> CpuSpace:
        # Data-tiled matmuls (`linalg.mmt4d`, `linalg.batch_mmt4d`) have a space of their own.
        if is_data_tiled(narrow(problem, ContractionProblem)):
            return self._stored(CpuMmt4dSpace(self.threads))
        return self._stored(CpuContractionSpace(self.threads))

    def _convolution_space(self, problem: Problem) -> CpuSpace:
        # Pooling and depthwise windows, and a local response normalisation's window sum, are
        # convolutions to IREE's interface, with spaces of their own here.
        convolution = narrow(problem, ConvolutionProblem)
        if is_window_problem(convolution):
            return self._stored(CpuWindowSpace(self.threads))
        if is_window_sum_problem(convolution):
            return self._stored(CpuWindowSumSpace(self.threads))
        return self._stored(CpuConvolutionSpace(self.threads))

    def _stored(self, space: CpuSpace) -> CpuSpace:
        """Let a space keep its solutions in the cache folder, when there is one."""
        if self.cache_folder is not None:
            space.store = SolutionStore(self.cache_folder, self.name)
        return space

    def unsupported_families(self) -> Mapping[str, str]:
        return {
            "attention": (
                "IREE 3.13 lowers CPU attention with its own tile-and-vectorize pipeline, which "
                "has no hand-written space here yet"
            ),
        }

    def features(self, request: SpaceRequest) -> FeatureExtractor | None:
        if not has_features(request.problem):
            return None
        return CpuFeatureExtractor(request.problem, request_cpu_facts(request, self.threads))
