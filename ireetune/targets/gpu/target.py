"""What CUDA and ROCm share: a search space read from the compiler, sampled with z3.

Before candidates are generated, `prepare` strips the dispatch's configuration and compiles it to
the configuration stage with `--iree-codegen-emit-pipeline-constraints`: the compiler writes one
SMT problem and knob template per pipeline it could use for the root op (TileAndFuse and
VectorDistribute for matmuls and convolutions; two TileAndFuse variants for convolutions,
direct and implicit GEMM). A candidate's knobs are one solution plus the space it came from:

    (("mma_idx", 0), ("pipeline", "TileAndFuse"), ("red_2", 4), ("sg_0", 2), ..., ("space", 0))
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

from iree.compiler import ir

from ireetune.database.store import compiler_version, problem_key
from ireetune.errors import IreetuneError
from ireetune.frontend.dispatches import strip_configurations
from ireetune.problem.contraction import ContractionProblem
from ireetune.problem.root_op import Problem
from ireetune.search.candidate import Knobs, make_knobs
from ireetune.search.space_cache import SpaceCache, compute_cache_key, stored_first
from ireetune.targets.base import Target
from ireetune.targets.gpu.archs import GpuArch
from ireetune.targets.gpu.batch_proxy import dump_proxy_benchmark, lift_spaces, supports_proxy
from ireetune.targets.gpu.constraints import (
    CompilerSpace,
    ConstraintSpace,
    default_knob_values,
    emit_constraints,
    read_constraint_spaces,
)
from ireetune.targets.gpu.extra_knobs import (
    NO_BANK_CONFLICT_REDUCTION,
    ExtraKnob,
    apply_extra_values,
    choose_extra_values,
    default_extra_values,
)
from ireetune.targets.gpu.ordering import (
    compute_tile_shape,
    interleave,
    order_by_score,
    score_candidate,
)
from ireetune.targets.gpu.smt_space import SmtSpace, sample_spaces
from ireetune.targets.gpu.template import (
    PIPELINE_OPTIONS_KEY,
    TRANSLATION_KEYS,
    OpaqueAttr,
    ResolvedDict,
    build_compilation_info,
    fill_template,
)

logger = logging.getLogger(__name__)

PIPELINES = ("TileAndFuse", "VectorDistribute")
SPACE_KNOB = "space"
PIPELINE_KNOB = "pipeline"
EMIT_TIMEOUT_S = 300.0


class GpuTarget(Target):
    """A GPU target; subclasses say how to compile for it, run on it and apply a spec."""

    def __init__(self, arch: GpuArch, pipelines: Sequence[str] = ()) -> None:
        for pipeline in pipelines:
            if pipeline not in PIPELINES:
                raise IreetuneError(
                    f"unknown pipeline '{pipeline}'; choose from {', '.join(PIPELINES)}"
                )
        self.arch = arch
        self.pipelines = tuple(pipelines) or PIPELINES
        self._compiler_space: CompilerSpace | None = None
        self._cache_root: Path | None = None
        self._cache: SpaceCache | None = None

    @property
    def name(self) -> str:
        return f"{self.arch.family.value}:{self.arch.name}"

    @property
    def extra_knobs(self) -> tuple[ExtraKnob, ...]:
        """The knobs searched beside the compiler's template (targets/gpu/extra_knobs.py)."""
        return (NO_BANK_CONFLICT_REDUCTION,)

    @property
    def compiler_space(self) -> CompilerSpace:
        assert self._compiler_space is not None, "prepare() reads the space first"
        return self._compiler_space

    def use_cache_folder(self, folder: Path) -> None:
        self._cache_root = folder

    def prepare(
        self, problem: Problem, benchmark_path: Path, scratch_dir: Path, context: ir.Context
    ) -> None:
        scratch_dir.mkdir(parents=True, exist_ok=True)
        self._compiler_space = None
        self._cache = None
        if self._cache_root is not None:
            key = compute_cache_key(
                [problem_key(problem), self.name, *self.compile_flags(), compiler_version()]
            )
            self._cache = SpaceCache(self._cache_root / key)
        stored = self._cache.read_space() if self._cache is not None else None
        if stored is not None:
            text, proxy_text = stored
            self._compiler_space = self._read_space(
                problem, benchmark_path, text, proxy_text, context
            )
        else:
            text, proxy_text = self._emit_space(problem, benchmark_path, scratch_dir)
            self._compiler_space = self._read_space(
                problem, benchmark_path, text, proxy_text, context
            )
            if self._cache is not None:
                meta = {
                    "problem": problem.signature, "target": self.name,
                    "flags": self.compile_flags(), "compiler_version": compiler_version(),
                }  # fmt: skip
                self._cache.write_space(text, proxy_text, meta)
        if not self._compiler_space.spaces:
            raise IreetuneError(
                f"the compiler emits no search space for {problem.signature} on {self.name} "
                f"({problem.kind} root op); it cannot be tuned on this target yet"
            )
        if not self._usable_spaces():
            found = sorted({space.pipeline for space in self._compiler_space.spaces})
            raise IreetuneError(
                f"no search space for pipeline {', '.join(self.pipelines)}; the compiler offers {', '.join(found)}"
            )

    def _emit_space(
        self, problem: Problem, benchmark_path: Path, scratch_dir: Path
    ) -> tuple[str, str | None]:
        """Ask the compiler for the space: its output, and the proxy's when the dispatch's own
        space cannot be emitted (a batch matmul: the output is then the dispatch's own file,
        which holds the default configuration)."""
        stripped = scratch_dir / "space_stripped.mlir"
        strip_configurations(benchmark_path, stripped, timeout_s=EMIT_TIMEOUT_S)
        try:
            text = emit_constraints(
                stripped, self.compile_flags(), scratch_dir / "space.mlir", EMIT_TIMEOUT_S
            )
            return text, None
        except IreetuneError as error:
            if not (isinstance(problem, ContractionProblem) and supports_proxy(problem)):
                raise
            logger.warning("%s; using the space of its batch-free proxy", error)
        proxy_benchmark = dump_proxy_benchmark(
            problem, self.compile_flags(), scratch_dir / "proxy", EMIT_TIMEOUT_S
        )
        proxy_stripped = scratch_dir / "proxy" / "stripped.mlir"
        strip_configurations(proxy_benchmark, proxy_stripped, timeout_s=EMIT_TIMEOUT_S)
        proxy_text = emit_constraints(
            proxy_stripped,
            self.compile_flags(),
            scratch_dir / "proxy" / "space.mlir",
            EMIT_TIMEOUT_S,
        )
        return benchmark_path.read_text(), proxy_text

    def _read_space(
        self,
        problem: Problem,
        benchmark_path: Path,
        text: str,
        proxy_text: str | None,
        context: ir.Context,
    ) -> CompilerSpace:
        if proxy_text is None:
            return read_constraint_spaces(text, context)
        assert isinstance(problem, ContractionProblem), "only contractions are read by proxy"
        proxy = read_constraint_spaces(proxy_text, context)
        original = read_constraint_spaces(text, context)
        return CompilerSpace(
            lift_spaces(proxy.spaces, problem), original.default_pipeline, original.default_config
        )

    def _usable_spaces(self) -> list[ConstraintSpace]:
        return [space for space in self.compiler_space.spaces if space.pipeline in self.pipelines]

    def _space_of(self, knobs: Knobs) -> tuple[ConstraintSpace, dict[str, int]]:
        """Return a candidate's space and its template knobs' values (extra knobs left out)."""
        values = dict(knobs)
        space = self.compiler_space.spaces[int(values.pop(SPACE_KNOB))]
        pipeline = values.pop(PIPELINE_KNOB)
        assert pipeline == space.pipeline, (
            f"knobs name {pipeline} but space {space.index} is {space.pipeline}"
        )
        for knob in self.extra_knobs:
            values.pop(knob.name, None)
        return space, {name: int(value) for name, value in values.items()}

    def _extra_values_of(self, knobs: Knobs) -> dict[str, int]:
        values = dict(knobs)
        return {k.name: int(values.get(k.name, k.values[0])) for k in self.extra_knobs}

    def resolved_config(self, knobs: Knobs) -> tuple[ConstraintSpace, ResolvedDict]:
        """Fill the candidate's space template with its knob values.

        Fields the compiler's own configuration sets beyond the template are kept for candidates
        of the same pipeline and convolution lowering: unit flags (`convert_acc_gemm` for a
        matmul that accumulates into a fill) as they are, and the padding of tiles that do not
        divide the problem (`padding`, `padding_conv`) recomputed for the candidate's own tiles.
        IREE 3.13's templates leave padding out; without it, an implicit-GEMM convolution whose
        tile does not divide its output (56 by 64) ran 70-130x slower than the default on the H100.
        The extra knobs (targets/gpu/extra_knobs.py) are applied last.
        """
        space, values = self._space_of(knobs)
        resolved = fill_template(space.template, values)
        assert isinstance(resolved, dict)
        default = self.compiler_space.default_config
        same_lowering = (
            default is not None
            and self.compiler_space.default_pipeline == space.pipeline
            and _uses_igemm(resolved) == _uses_igemm(default)
        )
        if same_lowering:
            assert default is not None
            for key, value in default.items():
                if (
                    key not in resolved
                    and key not in TRANSLATION_KEYS
                    and isinstance(value, OpaqueAttr)
                ):
                    resolved[key] = value
            if "padding" in default and "padding" not in resolved:
                resolved.update(compute_padding(resolved, default, space))
        apply_extra_values(resolved, self.extra_knobs, self._extra_values_of(knobs))
        return space, resolved

    def parse_default_knobs(self, problem: Problem, root_op: ir.Operation) -> Knobs | None:
        if self._compiler_space is None:
            return None
        found = default_knob_values(self.compiler_space)
        if found is None:
            return None
        space, values = found
        return make_knobs(
            {
                **values,
                **default_extra_values(self.extra_knobs),
                SPACE_KNOB: space.index,
                PIPELINE_KNOB: space.pipeline,
            }
        )

    def generate_candidates(
        self,
        problem: Problem,
        variant_target: ir.Attribute,
        default_knobs: Knobs | None,
        seed: int,
    ) -> Iterator[Knobs]:
        spaces = self._usable_spaces()
        smt_spaces = [
            SmtSpace(str(space.index), space.smtlib, space.knob_names) for space in spaces
        ]
        excluded: dict[str, dict[str, int]] = {}
        if default_knobs is not None:
            space, values = self._space_of(default_knobs)
            excluded[str(space.index)] = values
        # Solutions drawn by earlier runs come first, in a seeded order (search/space_cache.py);
        # fresh draws follow, stored as they come.
        stored = self._stored_solutions(spaces, default_knobs)
        yield from stored_first(stored, seed)
        known: dict[str, list[dict[str, int]]] = {}
        for knobs in stored:
            space, values = self._space_of(knobs)
            known.setdefault(str(space.index), []).append(values)
        for position, values in sample_spaces(smt_spaces, seed, excluded, known):
            space = spaces[position]
            extra = choose_extra_values(self.extra_knobs, values, space.pipeline, seed)
            knobs = make_knobs(
                {**values, **extra, SPACE_KNOB: space.index, PIPELINE_KNOB: space.pipeline}
            )
            if self._cache is not None:
                self._cache.add_solution(knobs)
            yield knobs

    def _stored_solutions(
        self, spaces: Sequence[ConstraintSpace], default_knobs: Knobs | None
    ) -> list[Knobs]:
        """Return the cached solutions of the usable spaces (never the default)."""
        if self._cache is None:
            return []
        by_index = {space.index: space for space in spaces}
        extra = {knob.name: knob.values for knob in self.extra_knobs}
        usable = []
        for knobs in self._cache.read_solutions():
            values = dict(knobs)
            index = values.pop(SPACE_KNOB, None)
            space = by_index.get(index) if isinstance(index, int) else None
            if space is None or values.pop(PIPELINE_KNOB, None) != space.pipeline:
                continue
            extra_ok = all(values.pop(name, None) in allowed for name, allowed in extra.items())
            if extra_ok and set(values) == set(space.knob_names) and knobs != default_knobs:
                usable.append(knobs)
        return usable

    def order_candidates(
        self, problem: Problem, pool: list[Knobs], seed: int
    ) -> list[tuple[Knobs, float]]:
        """Rank each space's candidates by the heuristic, then take the spaces in turn.

        Scores compare well within one pipeline; across pipelines they do not (the same tile
        runs differently), so no pipeline is left unmeasured by a budget its rival fills.
        """
        by_space: dict[int, list[tuple[Knobs, float]]] = {}
        for knobs in pool:
            space, config = self.resolved_config(knobs)
            shape = compute_tile_shape(problem, space, config)
            score = score_candidate(problem, shape, self.arch.compute_units)
            by_space.setdefault(space.index, []).append((knobs, score))
        return interleave([order_by_score(scored, seed) for _, scored in sorted(by_space.items())])

    def compilation_info(self, problem: Problem, knobs: Knobs, context: ir.Context) -> str:
        space, config = self.resolved_config(knobs)
        info, separate = build_compilation_info(config, space.pipeline, context)
        if separate:
            raise IreetuneError(
                f"{problem.kind} configurations need {', '.join(separate)} on the root op, which "
                "specs do not set yet"
            )
        return str(info)


def _uses_igemm(config: ResolvedDict) -> bool:
    options = config.get(PIPELINE_OPTIONS_KEY, {})
    return isinstance(options, dict) and options.get("use_igemm_convolution") is True


def compute_padding(
    config: ResolvedDict, default: ResolvedDict, space: ConstraintSpace
) -> ResolvedDict:
    """Pad each loop to the candidate's tile, as the compiler pads its own configuration.

    `padding` has one entry per loop of the tiled op: the workgroup tile of a parallel loop, and
    the reduction tile in elements (intrinsics times the intrinsic's K) of a reduction loop.
    `padding_conv` (convolutions lowered as implicit GEMMs) repeats the parallel entries on the
    convolution's own loops, where the default has them.
    """
    workgroup = [v if isinstance(v, int) else 0 for v in _as_list(config.get("workgroup"))]
    reduction = [v if isinstance(v, int) else 0 for v in _as_list(config.get("reduction"))]
    mma = config.get("mma_kind")
    mma_k = space.mma_shapes.get(mma.text, (1, 1, 1))[2] if isinstance(mma, OpaqueAttr) else 1
    padding = [
        wg if wg > 0 else (red * mma_k if i < len(reduction) and reduction[i] > 0 else 0)
        for i, wg in enumerate(workgroup)
        for red in [reduction[i] if i < len(reduction) else 0]
    ]
    found: ResolvedDict = {"padding": list(padding)}
    default_conv = _as_list(default.get("padding_conv"))
    if default_conv:
        found["padding_conv"] = [
            workgroup[i] if i < len(workgroup) and isinstance(v, int) and v != 0 else 0
            for i, v in enumerate(default_conv)
        ]
    return found


def _as_list(value: object) -> list[object]:
    return list(value) if isinstance(value, list) else []
