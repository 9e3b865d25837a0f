"""Build a standalone program around a dispatch's root op, to run it on real inputs.

A dispatch benchmark runs on uninitialised buffers and returns nothing, so it can time a
configuration but not check it. This module clones the root op into a function that takes the
op's inputs as arguments and returns its result:

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
from iree.compiler.dialects import arith, func, linalg, tensor

_CONFIG_ATTRIBUTES = ("lowering_config", "compilation_info", "root_op")
REFERENCE_FUNCTION = "main"


def build_reference_module(root_op: ir.Operation, context: ir.Context) -> ir.Module:
    """Return a module whose `@main` computes the root op from its inputs and a zero init."""
    with context, ir.Location.unknown():
        operand_types = [operand.type for operand in root_op.operands]
        *input_types, output_type = operand_types
        shaped_output = ir.RankedTensorType(output_type)
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            function = func.FuncOp(REFERENCE_FUNCTION, (input_types, [output_type]))
            with ir.InsertionPoint(function.add_entry_block()):
                element_type = shaped_output.element_type
                if isinstance(element_type, ir.IntegerType):
                    zero = arith.ConstantOp(element_type, ir.IntegerAttr.get(element_type, 0))
                else:
                    zero = arith.ConstantOp(element_type, ir.FloatAttr.get(element_type, 0.0))
                empty = tensor.EmptyOp(list(shaped_output.shape), element_type)
                init = linalg.fill(zero.result, outs=[empty.result])
                clone = root_op.clone()
                for index, argument in enumerate(function.arguments):
                    clone.operands[index] = argument
                clone.operands[len(input_types)] = init
                for name in _CONFIG_ATTRIBUTES:
                    if name in clone.attributes:
                        del clone.attributes[name]
                func.ReturnOp([clone.results[0]])
        assert module.operation.verify(), "reference module does not verify"
        return module
