"""Write a hand-written GPU search space in the compiler's own form: a knob template and SMT-LIB.

Where IREE 3.13 emits no constraints for a dispatch, ireetune states them itself with z3 and
exports them as SMT-LIB text, so that the rest of the GPU machinery (the lazy sampler, template
filling, the default's read-back, the compilation_info builder) treats both kinds alike.
"""

from __future__ import annotations

from collections.abc import Sequence

import z3

from ireetune.targets.gpu.constraints import ConstraintSpace
from ireetune.targets.gpu.template import TemplateDict, knob_names, one_of_options


def make_space(
    index: int,
    pipeline: str,
    template: TemplateDict,
    constraints: Sequence[z3.BoolRef],
    context: z3.Context,
    mma_shapes: dict[str, tuple[int, int, int]] | None = None,
) -> ConstraintSpace:
    """Package a template and its z3 constraints as a ConstraintSpace.

    Every knob of the template must appear in the constraints (the sampler reads each knob's
    value from z3's model).
    """
    solver = z3.Solver(ctx=context)
    solver.add(*constraints)
    names = knob_names(template)
    smtlib = solver.sexpr()
    for name in names:
        assert f"(declare-fun {name} () Int)" in smtlib, f"knob {name} is unconstrained"
    for options in one_of_options(template).values():
        assert options, "a one-of knob needs options"
    return ConstraintSpace(index, pipeline, template, smtlib, names, dict(mma_shapes or {}))
