"""The batch contraction family: contractions with batch loops (`linalg.batch_matmul`, batched
generic contractions).

Its record, parser, matcher and reference inputs are the contraction family's (a batch matmul is
a `ContractionProblem` whose `batch_dims` are not empty, stored under the same key); it is a family
of its own because targets search it differently (GPU targets tile the batch loop too).
"""

from __future__ import annotations

from iree.compiler import ir
from iree.compiler.dialects import linalg

from ireetune.problem.contraction import (
    CONTRACTION_MATCH,
    ContractionProblem,
    contraction_pattern,
    parse_contraction,
)
from ireetune.problem.matmul import MatmulFamily


def is_batch_contraction(root_op: ir.Operation) -> bool:
    """Say whether the root op is a contraction with at least one batch loop."""
    if not linalg.isa_contraction_op(root_op):
        return False
    dimensions = linalg.infer_contraction_dimensions(root_op)
    return dimensions is not None and len(dimensions.batch) > 0


BATCH_CONTRACTION_FAMILY = MatmulFamily(
    "batch_contraction",
    CONTRACTION_MATCH,
    ContractionProblem,
    is_batch_contraction,
    parse_contraction,
    contraction_pattern,
)
