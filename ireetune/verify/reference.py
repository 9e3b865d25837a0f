"""Build a standalone program around a dispatch's root op, to run it on real inputs.

A dispatch benchmark runs on uninitialised buffers and returns nothing, so it can time a
configuration but not check it. The op's family writes a function that takes the op's inputs as
arguments and returns its result (`OpFamily.build_reference`); by default the root op is cloned:

    func.func @main(%lhs: tensor<256x512xf32>, %rhs: tensor<512x384xf32>) -> tensor<256x384xf32> {
      %zero = arith.constant 0.0 : f32
      %init = linalg.fill ins(%zero : f32) outs(tensor.empty()) -> tensor<256x384xf32>
      %out = linalg.matmul ins(%lhs, %rhs) outs(%init) -> tensor<256x384xf32>
      return %out
    }

Compiled with a candidate's spec, the same matcher configures its op, so the candidate and the
default can be run on the same random inputs and compared.
"""

from __future__ import annotations

from iree.compiler import ir

from ireetune.problem.family import Problem
from ireetune.problem.registry import family_of


def build_reference_module(
    root_op: ir.Operation, context: ir.Context, problem: Problem
) -> ir.Module:
    """Return a module whose `@main` computes the root op (as its family writes it)."""
    return family_of(problem).build_reference(root_op, problem, context)
