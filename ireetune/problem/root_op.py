"""Find a dispatch's root op and hand it to the parser of its op family."""

from __future__ import annotations

from iree.compiler import ir
from iree.compiler.dialects import iree_codegen, linalg

from ireetune.errors import IreetuneError
from ireetune.problem.contraction import ContractionProblem, parse_contraction
from ireetune.problem.convolution import ConvolutionProblem, parse_convolution

Problem = ContractionProblem | ConvolutionProblem


def find_root_op(module: ir.Module) -> ir.Operation:
    """Return the single op marked with `root_op` by `--iree-codegen-add-tuner-attributes`."""
    root_ops = iree_codegen.get_tuner_root_ops(module)
    if not root_ops:
        raise IreetuneError(
            "no root op found: the dispatch must be dumped with --iree-codegen-add-tuner-attributes"
        )
    if len(root_ops) > 1:
        names = ", ".join(op.name for op in root_ops)
        raise IreetuneError(
            f"{len(root_ops)} root ops found ({names}); one per dispatch is supported"
        )
    return root_ops[0]


def parse_problem(root_op: ir.Operation) -> Problem:
    """Parse the root op into the record of its op family, or say it is not supported yet."""
    if linalg.isa_contraction_op(root_op):
        return parse_contraction(root_op)
    if linalg.isa_convolution_op(root_op):
        return parse_convolution(root_op)
    if root_op.name in ("linalg.pack", "linalg.unpack"):
        raise IreetuneError(
            f"'{root_op.name}' (a data-tiling layout change) is not tunable yet: its DataTiling "
            "pipeline has no searchable configuration here; the mmt4d between pack and unpack is"
        )
    if iree_codegen.isa_attention_op(root_op):
        raise IreetuneError(
            f"attention ('{root_op.name}') is not supported yet (contractions and convolutions are)"
        )
    raise IreetuneError(
        f"root op '{root_op.name}' is not supported yet (contractions and convolutions are)"
    )
