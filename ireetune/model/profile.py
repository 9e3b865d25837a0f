"""Profile a model's dispatches: dump and compile their benchmarks, name each one's problem, and
write what the profile explains (`profile.json`)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ireetune.compile.driver import CompileStatus, build_request
from ireetune.compile.pool import CompileBatch, CompileJob, default_jobs
from ireetune.core.errors import IreetuneError
from ireetune.core.files import write_text_atomically
from ireetune.core.records import MODEL_PROFILE_FORMAT
from ireetune.core.target import Target, target_refusal
from ireetune.frontend.dispatches import (
    CONFIGURED_PROGRAM,
    DumpedDispatch,
    dump_dispatches,
    read_mlir_file,
)
from ireetune.model.dispatch_times import time_dispatch_benchmarks
from ireetune.model.hot import DispatchProfile, HotSet, count_dispatch_invocations
from ireetune.model.in_model_times import (
    PROFILING_MODE,
    InModelTimes,
    profiled_calls,
    times_by_exports,
)
from ireetune.model.kin import kin_key, read_problem
from ireetune.model.prepare import ModelUnderTuning
from ireetune.model.static_rank import problem_work
from ireetune.model.timing import ModelComparison
from ireetune.problem.contraction import ContractionProblem
from ireetune.problem.family import Problem
from ireetune.targets.llvm_cpu.flags import specs_reach_data_tiled_matmuls
from ireetune.targets.llvm_cpu.mmt4d_space import is_data_tiled

if TYPE_CHECKING:
    from ireetune.executor.base import Executor


def compile_dispatch_benchmarks(
    executor: Executor,
    model: ModelUnderTuning,
    dumped: Sequence[DumpedDispatch],
    run_dir: Path,
    jobs: int,
) -> dict[int, Path]:
    """Compile the model's dumped dispatch benchmarks on `executor`; return the binaries."""
    binaries = run_dir / "dispatch_binaries"
    binaries.mkdir(exist_ok=True)
    compile_jobs = [
        CompileJob(
            candidate_id=d.index,
            request=build_request(
                model.target,
                d.path,
                binaries / f"{d.index}.vmfb",
                phase_flags=("--compile-from=executable-sources",),
                reproducer_path=binaries / f"{d.index}_reproducer.mlir",
            ),
            log_path=binaries / f"{d.index}.log",
        )
        for d in dumped
    ]
    return {
        o.candidate_id: binaries / f"{o.candidate_id}.vmfb"
        for o in executor.compile(CompileBatch(compile_jobs, jobs or default_jobs(), 300))
        if o.status is CompileStatus.COMPILED
    }


# Why a data-tiled matmul of a model is not tuned under `--iree-opt-data-tiling` alone. Its
# dumped dispatch holds the mmt4d, and a spec matching it changes that dispatch's binary; in the
# whole-model compile the same spec changes nothing (on that path IREE 3.13 applies a tuning spec
# to the matmul before it turns the matmul's data-tiling encoding into the mmt4d). Seen on
# SqueezeNet: all 15 variants of its five tuned mmt4d dispatches compiled to the default model's
# binary; pinned by tests/targets/llvm_cpu/test_mmt4d.py, which also shows the paths where a spec
# does reach it (docs/cpu_data_tiling_research.md).
ENCODED_MMT4D_NOTE = (
    "(a data-tiled matmul) is not tunable in this model: under --iree-opt-data-tiling IREE 3.13 "
    "applies tuning specs before it materialises the data-tiling encoding into the mmt4d, so a "
    "spec for the mmt4d of its dumped dispatch does not reach it in the whole-model compile (it "
    "does under --iree-global-opt-data-tiling, or with "
    "--iree-hal-preprocess-executables-with running iree-codegen-materialize-device-encoding; "
    "`ireetune tune-dispatch` still tunes the dispatch alone)"
)


def has_encoded_mmt4d(model_source: str, flags: Sequence[str]) -> bool:
    """Say whether the mmt4d ops of a model compiled with `flags` come from data-tiling encodings
    that tuning specs do not reach (ENCODED_MMT4D_NOTE); an mmt4d the model's source writes
    itself is reached like any op."""
    return "linalg.mmt4d" not in model_source and not specs_reach_data_tiled_matmuls(flags)


# Why a pack or an unpack of a model compiled under --iree-opt-data-tiling alone is not tuned: IREE
# 3.13 applies tuning specs while it is still an encoding op; under --iree-global-opt-data-tiling
# a spec reaches it. Pinned by tests/targets/llvm_cpu/test_cpu_spec_reach.py.
LATE_PACK_NOTE = (
    "(a data-tiling pack or unpack) is not tunable in a model under --iree-opt-data-tiling "
    "alone: IREE 3.13 applies tuning specs while it is an encoding op (under "
    "--iree-global-opt-data-tiling a spec reaches it)"
)
# Why a dispatch that only the model's initializers launch is not profiled nor tuned.
AT_LOAD_NOTE = "runs only once, when the model loads (launched by an initializer), not in a call"

LATE_DATA_TILING_FLAGS = ("--iree-opt-data-tiling", "--iree-opt-data-tiling=true")


@dataclass(frozen=True)
class ModelDispatches:
    """A model's dispatch benchmarks: as dumped, their binaries (by index), their profiles, and
    how their times were taken (a line for the report; empty when they were not)."""

    dumped: list[DumpedDispatch]
    binaries: dict[int, Path]
    profiles: list[DispatchProfile]
    timed_how: str = ""


def profile_dispatches(
    executor: Executor,
    model: ModelUnderTuning,
    run_dir: Path,
    jobs: int,
    timed: bool,
    in_model: InModelProfile | None = None,
) -> ModelDispatches:
    """Dump the model's dispatch benchmarks, count each one's launches and time the ones a run
    of the model launches (not those only its initializers do, once, when it loads).

    With `in_model` (the model's binary, built with the dump's flags) each is timed inside runs
    of the whole model (model/in_model_times.py): no benchmark is compiled. Else, or where that
    profile cannot be taken, the benchmarks are compiled and, when `timed`, each is timed alone
    on the model's device, the ones that take most of a run again (model/dispatch_times.py;
    untimed, their times are left for a device host)."""
    dumped = dump_dispatches(model.mlir_path, model.target, run_dir / "dispatches", timeout_s=1200)
    configured = run_dir / "dispatches" / CONFIGURED_PROGRAM
    counts = count_dispatch_invocations(configured)
    # It holds the model's weights (ZFNet-512's: 666 MiB), and nothing reads it again.
    configured.unlink()
    in_a_run = [d for d in dumped if launches(counts, d)]
    encoded = has_encoded_mmt4d(read_mlir_file(model.mlir_path), model.target.global_flags)
    fallback = ""
    if timed and in_model is not None:
        times = executor.profile_model(in_model.comparison, profiled_calls(in_model.model_ms))
        matched = times_in_model(in_a_run, counts, times) if times.ok else times.reason
        if not isinstance(matched, str):
            how = (
                f"profile: each dispatch timed inside {times.calls} calls of the whole model "
                f"(IREE's HAL profiler, {PROFILING_MODE} events)"
            )
            profiles = describe_dispatches(dumped, counts, matched, model.target, encoded)
            return ModelDispatches(dumped, {}, profiles, how)
        fallback = f" ({matched})"
    binaries = compile_dispatch_benchmarks(executor, model, in_a_run, run_dir, jobs)
    timings = (
        time_dispatch_benchmarks(
            executor, binaries, model.device, {d.index: launches(counts, d) for d in in_a_run}
        )
        if timed
        else {}
    )
    how = f"profile: each dispatch benchmark timed alone{fallback}" if timed else ""
    profiles = describe_dispatches(dumped, counts, timings, model.target, encoded)
    return ModelDispatches(dumped, binaries, profiles, how)


@dataclass(frozen=True)
class InModelProfile:
    """How to run the whole model for the profile (one model in the comparison), and about how
    long a call takes (ms), which sets how many calls are profiled."""

    comparison: ModelComparison
    model_ms: float


def times_in_model(
    in_a_run: Sequence[DumpedDispatch], counts: Mapping[str, int], times: InModelTimes
) -> dict[int, float] | str:
    """Give each dispatch a run launches its ms per launch from the whole model's profile,
    matched by the exports its benchmark defines; or say why the profile does not fit."""
    return times_by_exports(
        {dispatch.index: benchmark_exports(dispatch.path) for dispatch in in_a_run},
        {dispatch.index: launches(counts, dispatch) for dispatch in in_a_run},
        times,
    )


_EXPORT = re.compile(r"hal\.executable\.export public @([\w$.-]+)")


def benchmark_exports(benchmark_path: Path) -> list[str]:
    """List the export names a dumped dispatch benchmark defines (its dispatch's functions)."""
    return _EXPORT.findall(benchmark_path.read_text())


def launches(counts: Mapping[str, int], dispatch: DumpedDispatch) -> int:
    """Return how often a run of the model launches `dispatch`: 0 when only its initializers do;
    1 when the program names no count for it (one launch, as a dispatch benchmark assumes)."""
    return counts.get(dispatch.name, 1)


def describe_dispatches(
    dumped: Sequence[DumpedDispatch],
    counts: Mapping[str, int],
    timings: Mapping[int, float],
    target: Target,
    encoded_mmt4d: bool = False,
) -> list[DispatchProfile]:
    """Profile each dumped dispatch: its problem, whether it is tunable, its time and launches
    (`encoded_mmt4d`: the model's mmt4d ops come from data-tiling encodings); one that only the
    model's initializers launch (no launch in `counts`) is not tunable (AT_LOAD_NOTE)."""
    profiles = []
    for dispatch in dumped:
        invocations = launches(counts, dispatch)
        problem, tunable, kin, work = (
            (f"not tunable: {AT_LOAD_NOTE}", False, None, (0, 0))
            if invocations == 0
            else describe_dispatch(dispatch.path, target, encoded_mmt4d)
        )
        profiles.append(
            DispatchProfile(
                name=dispatch.name,
                benchmark_path=dispatch.path,
                problem=problem,
                tunable=tunable,
                dispatch_ms=timings.get(dispatch.index),
                invocations=invocations,
                kin=kin,
                flops=work[0],
                bytes=work[1],
            )
        )
    return profiles


def describe_dispatch(
    benchmark_path: Path, target: Target, encoded_mmt4d: bool
) -> tuple[str, bool, str | None, tuple[int, int]]:
    """Name a dispatch's problem, say whether the target has a space for it, and give a tunable
    problem's kin key and its FLOPs and operand bytes (`problem_work`; (0, 0) for one that is
    not tunable); with `encoded_mmt4d`, a data-tiled mmt4d is not tunable in the model
    (ENCODED_MMT4D_NOTE); under the target's --iree-opt-data-tiling, nor is a pack or an unpack
    (LATE_PACK_NOTE)."""
    try:
        problem = read_problem(benchmark_path)
    except IreetuneError as error:
        return f"not tunable: {error}", False, None, (0, 0)
    signature, tunable = _tunable(problem, target, encoded_mmt4d)
    # Kin only where a configuration renders for each kin's sizes (model/kin.py): elsewhere one
    # member would be tuned for the group and the others never.
    carries = tunable and target.traits.renders_without_dispatch
    return signature, tunable, kin_key(problem) if carries else None, _work(problem, tunable)


def _work(problem: Problem, tunable: bool) -> tuple[int, int]:
    """Return a tunable problem's FLOPs and operand bytes; (0, 0), unknown, for one that is not
    tunable or whose work its record does not give (its headroom is then not weighed: the
    profile goes on)."""
    if not tunable:
        return 0, 0
    try:
        return problem_work(problem)
    except (IndexError, KeyError, ValueError):
        return 0, 0


def _tunable(problem: Problem, target: Target, encoded_mmt4d: bool) -> tuple[str, bool]:
    """Name a parsed problem and say whether the target has a space for it in the model."""
    if encoded_mmt4d and isinstance(problem, ContractionProblem) and is_data_tiled(problem):
        return f"not tunable: {problem.signature} {ENCODED_MMT4D_NOTE}", False
    late = set(LATE_DATA_TILING_FLAGS) & set(target.global_flags)
    if (
        problem.family in ("pack", "unpack")
        and late
        and not specs_reach_data_tiled_matmuls(target.global_flags)
    ):
        return f"not tunable: {problem.signature} {LATE_PACK_NOTE}", False
    refusal = target_refusal(target, problem)
    if refusal is not None:
        return f"not tunable: {refusal}", False
    return problem.signature, True


def explain_profile(hot: HotSet) -> str:
    """Say how much of the model's time the dispatch timings explain, without negative rests."""
    if hot.unexplained_ms >= 0:
        return (
            f"profile: dispatches explain {hot.explained_ms:.3f} of {hot.model_ms:.3f} ms measured "
            f"(unexplained {hot.unexplained_ms:.3f} ms: launch overhead, copies, timing differences)"
        )
    return (
        f"profile: dispatch times add up to {hot.explained_ms:.3f} ms, more than the "
        f"{hot.model_ms:.3f} ms the model takes (timed alone, on synthetic data, a dispatch "
        "benchmark runs warmer than in the model; inside the model, dispatches may overlap): "
        "shares are of the dispatch total"
    )


def write_profile(run_dir: Path, hot: HotSet) -> None:
    """Write the hot set as profile.json: what the report shows, and what `ireetune continue`
    reads back (flows/model/state.py): each dispatch's benchmark inside the run folder,
    whether it is tunable, and the time the selected problems cover."""
    rows = [
        {
            "name": p.name,
            "benchmark": str(p.benchmark_path.relative_to(run_dir)),
            "problem": p.problem,
            "tunable": p.tunable,
            "invocations": p.invocations,
            "dispatch_ms": p.dispatch_ms,
            "total_ms": p.total_ms,
            "selected": p in hot.selected,
            "kin": p.kin,
            "flops": p.flops,
            "bytes": p.bytes,
        }
        for p in hot.ranked
    ]
    payload = {
        "format": MODEL_PROFILE_FORMAT,
        "model_ms": hot.model_ms,
        "explained_ms": hot.explained_ms,
        "unexplained_ms": hot.unexplained_ms,
        "covered_ms": hot.covered_ms,
        "dispatches": rows,
    }
    write_text_atomically(run_dir / "profile.json", json.dumps(payload, indent=2) + "\n")
