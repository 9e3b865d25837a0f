"""Specialize a model's module to the one function tuned, at the sizes tuned.

Both rewrites go through the MLIR bindings on the module as the user gave it (builtin tensors,
or the torch dialect's `!torch.vtensor` of an imported ONNX or PyTorch model):

- the other public functions become private, so that the compiler drops them (a module of two
  functions otherwise compiles, profiles and dumps the dispatches of both);
- a dynamic argument takes the static type `--input` gives, and is cast back to its dynamic type
  for its uses (`tensor.cast`, `torch.tensor_static_info_cast`), which the compiler folds:

      func.func @main(%x: tensor<?x64xf32>)     ->   func.func @main(%x: tensor<4x64xf32>)
        ... uses of %x ...                             %0 = tensor.cast %x : tensor<4x64xf32>
                                                            to tensor<?x64xf32>
                                                       ... uses of %0 ...
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from iree.compiler import ir

from ireetune.core.errors import IreetuneError

_TORCH_ELEMENT = re.compile(r"^!torch\.vtensor<\[[\d,?-]*\],(.+)>$")


def specialize_module(
    text: str, function: str, static_shapes: Mapping[int, tuple[int, ...]]
) -> str:
    """Return the module with `function` its only public function and the arguments of
    `static_shapes` (by position) of those static shapes."""
    with ir.Context(), ir.Location.unknown():
        try:
            module = ir.Module.parse(text)
        except ir.MLIRError as error:
            raise IreetuneError(
                f"cannot read the model to specialize @{function}: {error}"
            ) from None
        for operation in module.body.operations:
            op = operation.operation
            if op.name != "func.func":
                continue
            if ir.StringAttr(op.attributes["sym_name"]).value != function:
                if "sym_visibility" not in op.attributes:
                    op.attributes["sym_visibility"] = ir.StringAttr.get("private")
                continue
            if static_shapes:
                _fix_argument_shapes(op, static_shapes)
        if not module.operation.verify():
            raise IreetuneError(f"the model with @{function}'s sizes fixed does not verify")
        return str(module)


def _fix_argument_shapes(
    function: ir.Operation, static_shapes: Mapping[int, tuple[int, ...]]
) -> None:
    block = function.regions[0].blocks[0]
    function_type = ir.FunctionType(ir.TypeAttr(function.attributes["function_type"]).value)
    inputs = list(function_type.inputs)
    for index, shape in static_shapes.items():
        argument = block.arguments[index]
        dynamic_type = argument.type
        static_type, cast_name = _static_type(dynamic_type, shape)
        argument.set_type(static_type)
        cast = ir.Operation.create(
            cast_name,
            results=[dynamic_type],
            operands=[argument],
            ip=ir.InsertionPoint.at_block_begin(block),
        )
        argument.replace_all_uses_except(cast.result, cast)
        inputs[index] = static_type
    function.attributes["function_type"] = ir.TypeAttr.get(
        ir.FunctionType.get(inputs, list(function_type.results))
    )


def _static_type(dynamic_type: ir.Type, shape: tuple[int, ...]) -> tuple[ir.Type, str]:
    """Return the static type of that shape, and the op that casts it to the dynamic one."""
    torch_element = _TORCH_ELEMENT.match(str(dynamic_type))
    if torch_element is not None:
        sizes = ",".join(str(size) for size in shape)
        return ir.Type.parse(f"!torch.vtensor<[{sizes}],{torch_element.group(1)}>"), (
            "torch.tensor_static_info_cast"
        )
    element_type = ir.RankedTensorType(dynamic_type).element_type
    return ir.RankedTensorType.get(list(shape), element_type), "tensor.cast"
