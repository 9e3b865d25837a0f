"""Write each operation as a small model function that IREE compiles into one dispatch.

The function takes the operation's inputs and returns its result, so the same file serves both
purposes of seeds/003: compiled as is it is the verification program (`@main` on real inputs);
compiled with `--iree-hal-dump-executable-benchmarks-to` it yields the dispatch to profile. For a
256x384x512 f32 matmul with the right-hand side transposed:

    func.func @main(%lhs: tensor<256x512xf32>, %rhs: tensor<384x512xf32>) -> tensor<256x384xf32> {
      %zero = arith.constant 0.0 : f32
      %empty = tensor.empty() : tensor<256x384xf32>
      %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<256x384xf32>) -> tensor<256x384xf32>
      %result = linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, ...]
                  ins(%lhs, %rhs : ...) outs(%init : ...) -> tensor<256x384xf32>
      return %result : tensor<256x384xf32>
    }
"""

from __future__ import annotations

from pathlib import Path

from ireetune.profiler.operations import (
    ConvLayout,
    ConvOperation,
    ElementType,
    MatmulLayout,
    MatmulOperation,
    Operation,
    OperationKind,
)

DIALECT = "linalg"
FUNCTION = "main"


def _tensor(shape: tuple[int, ...], element_type: ElementType) -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{element_type.value}>"


def _zero_init_lines(element_type: ElementType, out_type: str) -> list[str]:
    """Return the lines that fill `%init` (of `out_type`) with zeros of the accumulator type."""
    value = "0" if element_type.is_integer else "0.0"
    return [
        f"%zero = arith.constant {value} : {element_type.value}",
        f"%empty = tensor.empty() : {out_type}",
        f"%init = linalg.fill ins(%zero : {element_type.value}) outs(%empty : {out_type}) -> {out_type}",
    ]


def _matmul_maps(layout: MatmulLayout, batched: bool) -> str:
    """Indexing maps over (b,) m, n, k for the layout's operands."""
    dims = ["d0", "d1", "d2", "d3"] if batched else ["d0", "d1", "d2"]
    batch = dims[:1] if batched else []
    m, n, k = dims[-3:]
    lhs = [*batch, k, m] if layout.lhs_transposed else [*batch, m, k]
    rhs = [*batch, n, k] if layout.rhs_transposed else [*batch, k, n]
    out = [*batch, m, n]
    domain = ", ".join(dims)
    return ", ".join(
        f"affine_map<({domain}) -> ({', '.join(results)})>" for results in (lhs, rhs, out)
    )


def _matmul_body(operation: MatmulOperation) -> tuple[list[str], str]:
    """Return the body lines computing the matmul into `%product` and the product's type."""
    lhs_type = _tensor(operation.lhs_shape, operation.input_type)
    rhs_type = _tensor(operation.rhs_shape, operation.input_type)
    out_type = _tensor(operation.output_shape, operation.accumulator_type)
    batched = operation.batch is not None
    op_name = "linalg.batch_matmul" if batched else "linalg.matmul"
    maps = (
        ""
        if operation.layout is MatmulLayout.NN
        else f" indexing_maps = [{_matmul_maps(operation.layout, batched)}]"
    )
    return [
        *_zero_init_lines(operation.accumulator_type, out_type),
        f"%product = {op_name}{maps} ins(%lhs, %rhs : {lhs_type}, {rhs_type}) outs(%init : {out_type}) -> {out_type}",
    ], out_type


def _bias_relu_lines(operation: MatmulOperation, out_type: str) -> list[str]:
    acc = operation.accumulator_type.value
    add, maximum = (
        ("arith.addi", "arith.maxsi")
        if operation.accumulator_type.is_integer
        else ("arith.addf", "arith.maximumf")
    )
    identity = "affine_map<(d0, d1) -> (d0, d1)>"
    return [
        f"%result_empty = tensor.empty() : {out_type}",
        f"%result = linalg.generic {{indexing_maps = [{identity}, affine_map<(d0, d1) -> (d1)>, {identity}], "
        'iterator_types = ["parallel", "parallel"]} '
        f"ins(%product, %bias : {out_type}, tensor<{operation.n}x{acc}>) outs(%result_empty : {out_type}) {{",
        f"^bb0(%in: {acc}, %b: {acc}, %out: {acc}):",
        f"  %sum = {add} %in, %b : {acc}",
        f"  %relu = {maximum} %sum, %zero : {acc}",
        f"  linalg.yield %relu : {acc}",
        f"}} -> {out_type}",
    ]


def _conv_body(operation: ConvOperation) -> tuple[list[str], str]:
    image_type = _tensor(operation.image_shape, operation.input_type)
    filter_type = _tensor(operation.filter_shape, operation.input_type)
    out_type = _tensor(operation.output_shape, operation.accumulator_type)
    op_name = (
        "linalg.conv_2d_nhwc_hwcf"
        if operation.layout is ConvLayout.NHWC_HWCF
        else "linalg.conv_2d_nchw_fchw"
    )
    attributes = (
        f"{{dilations = dense<{operation.dilation}> : tensor<2xi64>, "
        f"strides = dense<{operation.stride}> : tensor<2xi64>}}"
    )
    return [
        *_zero_init_lines(operation.accumulator_type, out_type),
        f"%product = {op_name} {attributes} ins(%lhs, %rhs : {image_type}, {filter_type}) outs(%init : {out_type}) -> {out_type}",
    ], out_type


def generate_mlir(operation: Operation) -> str:
    """Return the operation as an MLIR module with one public function `@main`."""
    argument_names = ["%lhs", "%rhs", "%bias"]
    arguments = ", ".join(
        f"{argument_names[i]}: {_tensor(shape, element_type)}"
        for i, (shape, element_type) in enumerate(
            zip(operation.input_shapes, operation.input_types, strict=True)
        )
    )
    result = "%product"
    if isinstance(operation, ConvOperation):
        lines, out_type = _conv_body(operation)
    else:
        lines, out_type = _matmul_body(operation)
        if operation.kind is OperationKind.MATMUL_BIAS_RELU:
            assert operation.batch is None, "the fused dispatch is an unbatched matmul"
            lines += _bias_relu_lines(operation, out_type)
            result = "%result"
    body = "\n".join(f"  {line}" for line in lines)
    return (
        f"// {operation.name}: generated by `ireetune profile`.\n"
        f"func.func @{FUNCTION}({arguments}) -> {out_type} {{\n"
        f"{body}\n"
        f"  return {result} : {out_type}\n"
        "}\n"
    )


def operation_dir(generated_dir: Path, operation: Operation) -> Path:
    """Return the operation's folder: `generated/linalg/matmul/<name>/` (seeds/003's tree)."""
    return generated_dir / DIALECT / operation.kind.value / operation.name


def write_operation(generated_dir: Path, operation: Operation) -> Path:
    """Write the operation's MLIR into its folder and return the file's path."""
    folder = operation_dir(generated_dir, operation)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{operation.name}.mlir"
    path.write_text(generate_mlir(operation))
    return path
