"""The contraction family: matmul, mmt, generic contractions (and, through
`batch_contraction.py`, the same ops with batch loops).

Its matcher is `transform.iree.match.contraction` with the element types, the indexing maps and a
`dims_equal` per dimension group (batch, M, N, K).
"""

from __future__ import annotations

from dataclasses import dataclass

from iree.compiler import ir
from iree.compiler.dialects import linalg

from ireetune.core.errors import IreetuneError
from ireetune.problem.family import (
    MatchOpSpec,
    MatchPattern,
    bind_loop_sizes,
    map_dim_positions,
    static_shape,
)
from ireetune.problem.matmul import MatmulFamily, MatmulProblem, build_matmul_problem

CONTRACTION_MATCH = MatchOpSpec(
    "transform.iree.match.contraction",
    ("lhs_type", "rhs_type", "output_type"),
    ("batch", "m", "n", "k"),
)


@dataclass(frozen=True)
class ContractionProblem(MatmulProblem):
    """A contraction's shape and types, independent of any IR context.

    The `*_dims` tuples list loop dimensions by role, outermost first.
    """

    m_dims: tuple[int, ...]
    n_dims: tuple[int, ...]
    k_dims: tuple[int, ...]

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        return tuple(self.loop_sizes[d] for d in self.batch_dims)

    @property
    def family(self) -> str:
        return "batch_contraction" if self.batch_dims else "contraction"

    @property
    def is_mmt4d(self) -> bool:
        """Say whether this is a data-tiled matmul: M1 N1 K1 outer tiles of M0 x N0 x K0 tiles.

        `linalg.mmt4d ins(%lhs, %rhs : tensor<M1xK1xM0xK0>, tensor<N1xK1xN0xK0>)
        outs(%acc : tensor<M1xN1xM0xN0>)`, which data tiling makes of a matmul.
        """
        return not self.batch_dims and self._is_data_tiled()

    @property
    def is_batch_mmt4d(self) -> bool:
        """Say whether this is a data-tiled batch matmul: batch loops, then M1 N1 K1 outer and
        M0 N0 K0 inner tiles, laid out as `linalg.batch_mmt4d` lays them out."""
        return bool(self.batch_dims) and self._is_data_tiled()

    def _is_data_tiled(self) -> bool:
        """Say whether the maps are the batch loops (if any), then the outer and inner tiles."""
        if not all(len(d) == 2 for d in (self.m_dims, self.n_dims, self.k_dims)):
            return False
        batch = list(self.batch_dims)
        (m1, m0), (n1, n0), (k1, k0) = self.m_dims, self.n_dims, self.k_dims
        maps = [map_dim_positions(text) for text in self.indexing_maps]
        return maps == [
            [*batch, m1, k1, m0, k0],
            [*batch, n1, k1, n0, k0],
            [*batch, m1, n1, m0, n0],
        ]

    @property
    def kind(self) -> str:
        """Name the layout: matmul, mmt, mtm, mtmt, batch_matmul, mmt4d, batch_mmt4d or
        contraction."""
        if self.is_mmt4d:
            return "mmt4d"
        if self.is_batch_mmt4d:
            return "batch_mmt4d"
        if len(self.m_dims) != 1 or len(self.n_dims) != 1 or len(self.k_dims) != 1:
            return "contraction"
        m, n, k = self.m_dims[0], self.n_dims[0], self.k_dims[0]
        lhs_map, rhs_map, _ = (map_dim_positions(text) for text in self.indexing_maps)
        batch = list(self.batch_dims)
        lhs_layout = "t" if lhs_map == [*batch, k, m] else "n" if lhs_map == [*batch, m, k] else "?"
        rhs_layout = "t" if rhs_map == [*batch, n, k] else "n" if rhs_map == [*batch, k, n] else "?"
        names = {"nn": "matmul", "nt": "mmt", "tn": "mtm", "tt": "mtmt"}
        base = names.get(lhs_layout + rhs_layout, "contraction")
        if base == "contraction" or len(batch) > 1:
            return "contraction"
        return f"batch_{base}" if batch else base

    @property
    def signature(self) -> str:
        """Give a stable, readable name: kind, batch x M x N x K sizes and element types."""
        sizes = "x".join(
            str(s) for s in (*self.batch_sizes, *self.m_sizes, *self.n_sizes, *self.k_sizes)
        )
        return f"{self.kind}_{sizes}_{self.lhs_type}_{self.rhs_type}_{self.output_type}"


def parse_contraction(root_op: ir.Operation) -> ContractionProblem:
    """Parse a linalg contraction op into a ContractionProblem.

    The op must implement the contraction interface with exactly two inputs and one output, all
    statically shaped: for example
    `linalg.matmul ins(%a, %b : tensor<256x512xf32>, tensor<512x384xf32>) outs(%c : ...)`.
    """
    dimensions = linalg.infer_contraction_dimensions(root_op)
    if dimensions is None or not (len(dimensions.m) and len(dimensions.n) and len(dimensions.k)):
        raise IreetuneError(f"root op '{root_op.name}' is not a contraction with M, N and K")
    operands = list(root_op.operands)
    if len(operands) != 3:
        raise IreetuneError(
            f"root op '{root_op.name}' has {len(operands)} operands; a contraction with two "
            "inputs and one output is supported"
        )
    # Through the interface: named ops such as linalg.mmt4d carry no `indexing_maps` attribute.
    affine_maps = [ir.AffineMapAttr(attr).value for attr in linalg.get_indexing_maps(root_op)]
    shapes = [
        static_shape(operand.type, name)
        for operand, name in zip(operands, ("lhs", "rhs", "output"), strict=True)
    ]
    loop_sizes = bind_loop_sizes(affine_maps, shapes, f"contraction '{root_op.name}'")
    roles = {
        "batch_dims": tuple(dimensions.batch),
        "m_dims": tuple(dimensions.m),
        "n_dims": tuple(dimensions.n),
        "k_dims": tuple(dimensions.k),
    }
    return build_matmul_problem(ContractionProblem, root_op, affine_maps, shapes, loop_sizes, roles)


def contraction_pattern(problem: ContractionProblem) -> MatchPattern:
    """Return the pattern of a contraction matcher: types, maps and every group's sizes."""
    return MatchPattern(
        CONTRACTION_MATCH.name,
        (problem.lhs_type, problem.rhs_type, problem.output_type),
        problem.indexing_maps,
        (problem.batch_sizes, problem.m_sizes, problem.n_sizes, problem.k_sizes),
    )


# Contractions without batch loops (`linalg.matmul`, mmt, generic contractions).
CONTRACTION_FAMILY = MatmulFamily(
    "contraction",
    CONTRACTION_MATCH,
    ContractionProblem,
    lambda root_op: bool(linalg.isa_contraction_op(root_op)),
    parse_contraction,
    contraction_pattern,
)
