"""A GPU family's search space: SMT problems in the compiler's own form, sampled with z3.

`GpuSpace.prepare` strips the dispatch's configuration and compiles it to the configuration
stage with `--iree-codegen-emit-pipeline-constraints`: the compiler writes one SMT problem and
knob template per pipeline it could use for the root op. Where it writes none, the family's
hand-written problems in the same form are searched. Every candidate is checked against the
target's shared memory and registers (`resources.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from iree.compiler import ir
from iree.compiler.dialects import iree_codegen

from ireetune.core.candidate import Knobs, make_knobs, order_in_turns
from ireetune.core.errors import IreetuneError
from ireetune.core.target import FamilySpace, OpConfiguration, SpaceRequest, Target
from ireetune.database.space_cache import SpaceCache, compute_cache_key, stored_first
from ireetune.database.store import compiler_version, problem_key
from ireetune.problem.contraction import ContractionProblem
from ireetune.problem.convolution import ConvolutionProblem
from ireetune.problem.family import Problem, narrow
from ireetune.targets.gpu.archs import GpuArch
from ireetune.targets.gpu.constraints import (
    CompilerSpace,
    ConstraintSpace,
    default_knob_values,
    emit_constraints,
    read_constraint_spaces,
)
from ireetune.targets.gpu.extra_knobs import (
    ExtraKnob,
    apply_extra_values,
    choose_extra_values,
    default_extra_values,
)
from ireetune.targets.gpu.facts import GpuFacts, read_gpu_facts
from ireetune.targets.gpu.ordering import compute_tile_shape, score_candidate
from ireetune.targets.gpu.resources import (
    check_promoted_reads,
    check_resources,
    check_tile_extents,
    estimate_resources,
    loop_entry,
)
from ireetune.targets.gpu.smt_space import SmtSpace, explain_unsatisfiable, sample_spaces
from ireetune.targets.gpu.template import (
    PIPELINE_OPTIONS_KEY,
    TRANSLATION_KEYS,
    OpaqueAttr,
    ResolvedDict,
    build_compilation_info,
    build_lowering_config,
    fill_template,
)

PIPELINES = ("TileAndFuse", "VectorDistribute")
SPACE_KNOB = "space"
PIPELINE_KNOB = "pipeline"


@dataclass(frozen=True)
class GpuSettings:
    """What a GPU space reads of its target: the target (to compile with), its architecture,
    the pipelines searched, the knobs searched beside the compiler's template, and the folder
    the compiler's spaces and drawn solutions are kept in (None: not kept)."""

    target: Target
    arch: GpuArch
    pipelines: tuple[str, ...]
    extra_knobs: tuple[ExtraKnob, ...]
    cache_root: Path | None


# A hand-written space: SMT problems in the compiler's own form, for a dispatch where IREE 3.13
# emits none (attention on CUDA, reductions, f32 contractions on CUDA).
HandWrittenSpaces = Callable[[Problem, GpuFacts, CompilerSpace], tuple[ConstraintSpace, ...]]
# Scores one filled template; higher is more promising.
Scorer = Callable[[Problem, ConstraintSpace, ResolvedDict, GpuFacts], float]
# Derives the lowering configs of the dispatch's other ops, by kind, from the root's.
Siblings = Callable[[ResolvedDict], tuple[tuple[str, ResolvedDict], ...]]


def score_gemm_view(
    problem: Problem, space: ConstraintSpace, config: ResolvedDict, facts: GpuFacts
) -> float:
    """Score a contraction or convolution configuration on its GEMM view (`ordering.py`)."""
    gemm = (
        narrow(problem, ConvolutionProblem)
        if problem.family == "convolution"
        else narrow(problem, ContractionProblem)
    )
    shape = compute_tile_shape(gemm, space, config)
    return score_candidate(gemm, shape, facts.compute_units)


class GpuSpace(FamilySpace):
    """One family's GPU space: SMT problems sampled with z3, each with its knob template.

    The problems are the compiler's own (`--iree-codegen-emit-pipeline-constraints`); where IREE
    3.13 emits none for the dispatch, the family's hand-written problems in the same form. A
    candidate's knobs are one solution plus the space it came from:

        (("mma_idx", 0), ("pipeline", "TileAndFuse"), ("red_2", 4), ..., ("space", 0))
    """

    def __init__(
        self,
        settings: GpuSettings,
        hand_written: HandWrittenSpaces | None = None,
        scorer: Scorer = score_gemm_view,
        siblings: Siblings | None = None,
        refusal: Callable[[Problem], str | None] | None = None,
    ) -> None:
        self.target = settings.target
        self.settings = settings
        # The target's knobs searched beside the template (targets/gpu/extra_knobs.py), for the
        # families whose landing was checked (contractions and convolutions; not the
        # hand-written attention and reduction spaces).
        self.extra_knobs = settings.extra_knobs
        self.hand_written = hand_written
        self.scorer = scorer
        self.siblings = siblings
        self._refusal = refusal
        self._compiler_space: CompilerSpace | None = None
        self._cache: SpaceCache | None = None
        self._facts: GpuFacts | None = None
        self._notes: list[str] = []

    @property
    def compiler_space(self) -> CompilerSpace:
        assert self._compiler_space is not None, "prepare() reads the space first"
        return self._compiler_space

    def refusal(self, problem: Problem) -> str | None:
        return self._refusal(problem) if self._refusal is not None else None

    def space_notes(self) -> tuple[str, ...]:
        return tuple(self._notes)

    @property
    def facts(self) -> GpuFacts:
        assert self._facts is not None, "prepare() reads the target first"
        return self._facts

    def prepare(
        self, problem: Problem, benchmark_path: Path, scratch_dir: Path, context: ir.Context
    ) -> None:
        scratch_dir.mkdir(parents=True, exist_ok=True)
        target = self.target
        self._cache = None
        if self.settings.cache_root is not None:
            key = compute_cache_key(
                [problem_key(problem), target.name, *target.compile_flags(), compiler_version()]
            )
            self._cache = SpaceCache(self.settings.cache_root / key)
        with context:
            module = ir.Module.parse(benchmark_path.read_text())
            (variant,) = iree_codegen.get_executable_variant_ops(module)
            self._facts = read_gpu_facts(variant.attributes["target"], self.settings.arch)
        compiler = self.read_compiler_space(problem, benchmark_path, scratch_dir, context)
        if not compiler.spaces and self.hand_written is not None:
            spaces = self.hand_written(problem, self.facts, compiler)
            compiler = CompilerSpace(spaces, compiler.default_pipeline, compiler.default_config)
            self._notes.append(
                f"IREE 3.13 emits no search space for {problem.signature} on {target.name}; "
                "ireetune's hand-written space is searched"
            )
        compiler = self._without_empty_spaces(problem, compiler)
        self._compiler_space = compiler
        if not compiler.spaces:
            raise IreetuneError(
                f"the compiler emits no search space for {problem.signature} on {target.name} "
                f"({problem.kind} root op); it cannot be tuned on this target yet"
            )
        if not self._usable_spaces():
            found = sorted({space.pipeline for space in compiler.spaces})
            raise IreetuneError(
                f"no search space for pipeline {', '.join(self.settings.pipelines)}; the compiler offers {', '.join(found)}"
            )

    def _without_empty_spaces(self, problem: Problem, compiler: CompilerSpace) -> CompilerSpace:
        """Drop the spaces without a solution, saying in a note which constraints conflict (a
        convolution's VectorDistribute space is often empty: its intrinsic does not divide
        the output channels). Indices stay those of the compiler's spaces."""
        kept = []
        for space in compiler.spaces:
            why = explain_unsatisfiable(space.smtlib, space.assert_messages)
            if why is None:
                kept.append(space)
            else:
                self._notes.append(
                    f"the {space.pipeline} space of {problem.signature} on {self.target.name} "
                    f"is empty, {why}"
                )
        return CompilerSpace(tuple(kept), compiler.default_pipeline, compiler.default_config)

    def read_compiler_space(
        self, problem: Problem, benchmark_path: Path, scratch_dir: Path, context: ir.Context
    ) -> CompilerSpace:
        """Ask the compiler for the dispatch's spaces (or read its stored answer); its default
        comes from the dump itself."""
        stored = self.stored_space()
        if stored is not None and stored[1] is None:
            return read_constraint_spaces(stored[0], context)
        text = emit_constraints(benchmark_path, self.target, scratch_dir, "space_stripped.mlir")
        self.store_space(problem, text, None)
        return read_constraint_spaces(text, context)

    def stored_space(self) -> tuple[str, str | None] | None:
        """Return the compiler's stored output for this problem (and a proxy's), if any."""
        return self._cache.read_space() if self._cache is not None else None

    def store_space(self, problem: Problem, text: str, proxy_text: str | None) -> None:
        """Store the compiler's output (and a proxy's) for the next run of this problem."""
        if self._cache is None:
            return
        target = self.target
        meta = {
            "problem": problem.signature, "target": target.name,
            "flags": target.compile_flags(), "compiler_version": compiler_version(),
        }  # fmt: skip
        self._cache.write_space(text, proxy_text, meta)

    def _usable_spaces(self) -> list[ConstraintSpace]:
        pipelines = self.settings.pipelines
        return [space for space in self.compiler_space.spaces if space.pipeline in pipelines]

    def _space_of(self, knobs: Knobs) -> tuple[ConstraintSpace, dict[str, int]]:
        """Return a candidate's space and its template knobs' values (extra knobs left out)."""
        values = dict(knobs)
        index = int(values.pop(SPACE_KNOB))
        space = next(space for space in self.compiler_space.spaces if space.index == index)
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

    def generate(self, request: SpaceRequest) -> Iterator[Knobs]:
        spaces = self._usable_spaces()
        smt_spaces = [
            SmtSpace(str(space.index), space.smtlib, space.knob_names) for space in spaces
        ]
        excluded: dict[str, dict[str, int]] = {}
        if request.default_knobs is not None:
            space, values = self._space_of(request.default_knobs)
            excluded[str(space.index)] = values
        # Solutions drawn by earlier runs come first, in a seeded order (database/space_cache.py);
        # fresh draws follow, stored as they come.
        stored = self._stored_solutions(spaces, request.default_knobs)
        yield from stored_first(stored, request.seed)
        known: dict[str, list[dict[str, int]]] = {}
        for knobs in stored:
            space, values = self._space_of(knobs)
            known.setdefault(str(space.index), []).append(values)
        for position, values in sample_spaces(smt_spaces, request.seed, excluded, known):
            space = spaces[position]
            extra = choose_extra_values(self.extra_knobs, values, space.pipeline, request.seed)
            knobs = make_knobs(
                {**values, **extra, SPACE_KNOB: space.index, PIPELINE_KNOB: space.pipeline}
            )
            if not self.fits(request.problem, knobs):
                continue
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

    def fits(self, problem: Problem, knobs: Knobs) -> bool:
        """Say whether a candidate fits the target's shared memory and registers, as ireetune
        counts them (`resources.py`): IREE 3.13's own constraints under-count shared memory for
        direct convolutions, batch tiles and attention, and such candidates fail to compile."""
        space, config = self.resolved_config(knobs)
        usage = estimate_resources(problem, space, config)
        return (
            check_resources(usage, self.facts) is None
            and check_promoted_reads(problem, space, config) is None
            and check_tile_extents(problem, config) is None
        )

    def order(self, request: SpaceRequest, pool: list[Knobs]) -> list[tuple[Knobs, float]]:
        """Rank each space's candidates by the heuristic, then take the spaces in turn (the same
        tile runs differently in another pipeline)."""
        problem = request.problem

        def score(knobs: Knobs) -> float:
            space, config = self.resolved_config(knobs)
            return self.scorer(problem, space, config, self.facts)

        return order_in_turns(
            pool, lambda knobs: self._space_of(knobs)[0].index, score, request.seed
        )

    def configuration(self, problem: Problem, knobs: Knobs, context: ir.Context) -> OpConfiguration:
        space, config = self.resolved_config(knobs)
        info, separate = build_compilation_info(config, space.pipeline, context)
        siblings = self.siblings(config) if self.siblings is not None else ()
        return OpConfiguration(
            str(info),
            tuple((name, str(attribute)) for name, attribute in separate.items()),
            tuple((kind, build_lowering_config(fields, context)) for kind, fields in siblings),
        )


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
    mma_k = space.mma_shape(config)[2]
    padding = [
        wg if wg > 0 else loop_entry(reduction, i, 0) * mma_k for i, wg in enumerate(workgroup)
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
