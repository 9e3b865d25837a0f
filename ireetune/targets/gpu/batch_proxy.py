"""Batch contractions through a proxy: IREE 3.13 crashes emitting their constraints.

`iree-compile --iree-codegen-emit-pipeline-constraints` aborts (in `smt::IntModOp::create`) on
every batch matmul tried with 3.13, on CUDA and ROCm alike. The compiler's own configurations for
them tile each batch dimension by 1 at workgroup level and leave it out of the subgroup and
reduction levels (`workgroup = [1, 64, 64, 0]`, `subgroup = [0, 2, 4, 0]`, `reduction =
[0, 0, 0, 8]`). So the space of the same contraction without its batch dimensions (a plain
matmul the emitter handles) is asked for instead, and each of its templates is lifted back by
inserting those batch entries. The innermost batch loop gets a real workgroup tile, the knob
`wg_b` (a divisor of its size, up to `MAX_BATCH_TILE`), added to the SMT problem: a workgroup
then computes `wg_b` matrices of its tile, which pays when each matrix alone is too small to fill
the GPU. Its shared memory grows with `wg_b`, which the compiler's proxy constraints do not see;
the resource check (`resources.py`) does. The lifted candidates are checked like any other: by
compiling them, hashing the binaries and finding the config in the configuration dump.
"""

from __future__ import annotations

import logging
from pathlib import Path

from iree.compiler import ir

from ireetune.compile.driver import (
    DUMP_BENCHMARKS_FLAG,
    TUNER_ATTRIBUTES_FLAG,
    build_request,
    run_compile,
)
from ireetune.core.errors import IreetuneError
from ireetune.core.target import Target
from ireetune.problem.contraction import ContractionProblem
from ireetune.problem.family import Problem, narrow
from ireetune.targets.gpu.constraints import (
    EMIT_TIMEOUT_S,
    CompilerSpace,
    ConstraintSpace,
    emit_constraints,
    read_constraint_spaces,
)
from ireetune.targets.gpu.space import GpuSpace
from ireetune.targets.gpu.template import IntKnob, TemplateDict, TemplateValue
from ireetune.targets.z3_enumerate import divisors

logger = logging.getLogger(__name__)

# What a batch loop gets at each tiling level of the lifted template.
BATCH_TILE: dict[str, TemplateValue] = {"workgroup": 1, "reduction": 0, "subgroup": 0}
BATCH_TILE_KNOB = "wg_b"
# Larger batch tiles multiply shared memory past every GPU's limit for useful matrix tiles.
MAX_BATCH_TILE = 8


def supports_proxy(problem: ContractionProblem) -> bool:
    """Say whether the problem is a batch contraction whose rest is one plain matmul."""
    return bool(problem.batch_dims) and (
        len(problem.m_dims),
        len(problem.n_dims),
        len(problem.k_dims),
    ) == (1, 1, 1)


def _without_batch(map_text: str, kept: list[int]) -> tuple[str, list[int]]:
    """Rewrite an indexing map over the kept loops only; return it and its result loops."""
    with ir.Context():
        affine_map = ir.AffineMapAttr(ir.Attribute.parse(f"affine_map<{map_text}>")).value
        positions = [
            expr.position for expr in affine_map.results if isinstance(expr, ir.AffineDimExpr)
        ]
    results = [kept.index(p) for p in positions if p in kept]
    dims = ", ".join(f"d{i}" for i in range(len(kept)))
    return f"({dims}) -> ({', '.join(f'd{r}' for r in results)})", results


def build_proxy_model(problem: ContractionProblem) -> str:
    """Write the contraction without its batch loops as a one-op model (a `linalg.matmul`)."""
    kept = [d for d in range(len(problem.loop_sizes)) if d not in problem.batch_dims]
    maps_and_dims = [_without_batch(text, kept) for text in problem.indexing_maps]
    shapes = [[problem.loop_sizes[kept[r]] for r in dims] for _, dims in maps_and_dims]
    types = (problem.lhs_type, problem.rhs_type, problem.output_type)
    tensor = [
        f"tensor<{'x'.join(map(str, shape))}x{kind}>"
        for shape, kind in zip(shapes, types, strict=True)
    ]
    zero = "0.0" if types[2].startswith(("f", "bf")) else "0"
    maps = ", ".join(f"affine_map<{text}>" for text, _ in maps_and_dims)
    return f"""
func.func @main(%lhs: {tensor[0]}, %rhs: {tensor[1]}) -> {tensor[2]} {{
  %zero = arith.constant {zero} : {types[2]}
  %empty = tensor.empty() : {tensor[2]}
  %init = linalg.fill ins(%zero : {types[2]}) outs(%empty : {tensor[2]}) -> {tensor[2]}
  %r = linalg.matmul indexing_maps = [{maps}]
      ins(%lhs, %rhs : {tensor[0]}, {tensor[1]}) outs(%init : {tensor[2]}) -> {tensor[2]}
  return %r : {tensor[2]}
}}
"""


def dump_proxy_benchmark(
    problem: ContractionProblem, target: Target, folder: Path, timeout_s: float
) -> Path:
    """Compile the proxy model, dumping its dispatch benchmark; return that file."""
    folder.mkdir(parents=True, exist_ok=True)
    model = folder / "proxy.mlir"
    model.write_text(build_proxy_model(problem))
    result = run_compile(
        build_request(
            target, model, folder / "proxy.vmfb", phase_flags=(TUNER_ATTRIBUTES_FLAG,),
            dumps=((DUMP_BENCHMARKS_FLAG, folder / "dumps"),), timeout_s=timeout_s,
        )
    )  # fmt: skip
    dumps = sorted((folder / "dumps").glob("*_benchmark.mlir")) if result.ok else []
    if len(dumps) != 1:
        raise IreetuneError(
            f"the batch-free proxy of {problem.signature} did not compile: {result.error_line or 'no dispatch benchmark'}"
        )
    return dumps[0]


def _insert_batch(
    values: list[TemplateValue], batch_dims: tuple[int, ...], fill: TemplateValue
) -> list[TemplateValue]:
    lifted = list(values)
    for dim in sorted(batch_dims):
        lifted.insert(dim, fill)
    return lifted


def lift_template(
    template: TemplateDict,
    batch_dims: tuple[int, ...],
    proxy_loops: int,
    tiled_batch_dim: int | None = None,
) -> TemplateDict:
    """Insert the batch loops' entries into every per-loop list of a proxy's template; the
    workgroup tile of `tiled_batch_dim` (when given) is the knob `wg_b`."""
    lifted: TemplateDict = {}
    for key, value in template.items():
        if key in BATCH_TILE and isinstance(value, list) and len(value) == proxy_loops:
            lifted[key] = _insert_batch(value, batch_dims, BATCH_TILE[key])
            if key == "workgroup" and tiled_batch_dim is not None:
                entries = lifted[key]
                assert isinstance(entries, list)
                entries[tiled_batch_dim] = IntKnob(BATCH_TILE_KNOB)
        elif key == "subgroup_basis" and isinstance(value, list) and len(value) == 2:
            counts, mapping = value
            assert isinstance(counts, list) and isinstance(mapping, list)
            lifted_counts = _insert_batch(counts, batch_dims, 1)
            lifted[key] = [lifted_counts, list(range(len(lifted_counts)))]
        else:
            lifted[key] = value
    return lifted


def batch_tile_smtlib(batch_size: int) -> str:
    """State the batch tile knob's domain in SMT-LIB, to append to a proxy's problem: the
    divisors of the batch size up to MAX_BATCH_TILE."""
    tiles = divisors(batch_size, MAX_BATCH_TILE)
    choices = " ".join(f"(= {BATCH_TILE_KNOB} {tile})" for tile in tiles)
    return f"(declare-const {BATCH_TILE_KNOB} Int)\n(assert (or {choices}))\n"


def lift_spaces(
    spaces: tuple[ConstraintSpace, ...], problem: ContractionProblem
) -> tuple[ConstraintSpace, ...]:
    """Lift every proxy space to the batch problem's loops: the proxy's SMT problem and knobs,
    plus the innermost batch loop's workgroup tile `wg_b`."""
    proxy_loops = len(problem.loop_sizes) - len(problem.batch_dims)
    tiled = problem.batch_dims[-1]
    batch_size = problem.loop_sizes[tiled]
    return tuple(
        ConstraintSpace(
            space.index, space.pipeline,
            lift_template(space.template, problem.batch_dims, proxy_loops, tiled),
            space.smtlib + batch_tile_smtlib(batch_size), (*space.knob_names, BATCH_TILE_KNOB),
            space.mma_shapes,
        )
        for space in spaces
    )  # fmt: skip


class BatchContractionSpace(GpuSpace):
    """The batch contraction family's GPU space: the compiler's own when it can emit it, else
    its batch-free proxy's, lifted with a real batch tile."""

    def read_compiler_space(
        self, problem: Problem, benchmark_path: Path, scratch_dir: Path, context: ir.Context
    ) -> CompilerSpace:
        contraction = narrow(problem, ContractionProblem)
        stored = self.stored_space()
        if stored is not None and stored[1] is not None:
            return self._lift(contraction, stored[0], stored[1], context)
        try:
            return super().read_compiler_space(problem, benchmark_path, scratch_dir, context)
        except IreetuneError as error:
            if not supports_proxy(contraction):
                raise
            logger.warning("%s; using the space of its batch-free proxy", error)
            folder = scratch_dir / "proxy"
            proxy_benchmark = dump_proxy_benchmark(contraction, self.target, folder, EMIT_TIMEOUT_S)
            text = emit_constraints(proxy_benchmark, self.target, folder, "stripped.mlir")
            # The dispatch's own text is stored beside the proxy's space: it holds the default.
            original_text = benchmark_path.read_text()
            self.store_space(problem, original_text, text)
            return self._lift(contraction, original_text, text, context)

    def _lift(
        self,
        contraction: ContractionProblem,
        original_text: str,
        proxy_text: str,
        context: ir.Context,
    ) -> CompilerSpace:
        """Lift the proxy's spaces to the batch contraction, with the dispatch's own default."""
        proxy = read_constraint_spaces(proxy_text, context)
        original = read_constraint_spaces(original_text, context)
        return CompilerSpace(
            lift_spaces(proxy.spaces, contraction),
            original.default_pipeline,
            original.default_config,
        )
