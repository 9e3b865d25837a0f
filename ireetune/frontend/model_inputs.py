"""Model inputs: `--input` specs like iree-run-module's, and random inputs by default.

A spec is `SHAPExTYPE` (random values), `SHAPExTYPE=VALUE` (every element VALUE) or
`SHAPExTYPE=@file.npy`; for example `1x3x224x224xf32`, `16x32xsi8`, `4xi1=1`. The types are
MLIR's, as the model's signature spells them: the torch dialect that ONNX and PyTorch models
import into writes signed (`si64`) and unsigned (`ui8`) integers and booleans (`i1`).

Random values fit what the input is for: booleans are 0 or 1, 8-bit integers (quantized
operands) take their whole range, and wider integers are small non-negative numbers (indices,
sizes); an integer input that indexes a gathered dimension directly stays below its size.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ireetune.core.errors import IreetuneError
from ireetune.core.input_files import check_input_file
from ireetune.verify.compare import check_inputs, numpy_dtype

_SPEC = re.compile(r"^((?:\d+x)*)([a-z]+\d+)(?:=(.*))?$")
_TENSOR = re.compile(r"tensor<((?:(?:\d+|\?)x)*)([a-z]+\d+)>")
_TORCH_TENSOR = re.compile(r"!torch\.vtensor<\[([\d,?-]*)\],([a-z]+\d+)>")
# A symbol is a bare identifier or a quoted string (PyTorch's ONNX exports name their function
# `@"torch-jit-export"`); group 1 or 2 is the name, group 3 the arguments.
_FUNCTION = re.compile(r'func\.func (?:public )?@(?:"([^"]+)"|([\w$.-]+))\(([^)]*)\)')
# An ONNX gather whose indices are a function argument (`%arg0`), as iree-import-onnx writes it:
#   %1 = torch.operator "onnx.Gather"(%0, %arg0) {torch.onnx.axis = 0 : si64} :
#       (!torch.vtensor<[10,16],f32>, !torch.vtensor<[4,3],si64>) -> ...
_ONNX_GATHER = re.compile(
    r'torch\.operator "onnx\.(Gather|GatherElements)"\(%[\w$.-]+, (%[\w$.-]+)\)\s*'
    r"(?:\{([^}]*)\})?\s*:\s*\(!torch\.vtensor<\[([\d,?-]*)\]"
)
_ONNX_AXIS = re.compile(r"torch\.onnx\.axis = (-?\d+)")
# Wider integers are indices or sizes more often than values: small, and never negative.
_SMALL_INTEGER_BOUND = 8


@dataclass(frozen=True)
class InputSpec:
    """One model input: its shape, element type and where its values come from."""

    shape: tuple[int, ...]
    element_type: str
    value: str = ""
    # Random values stay below this (the size of the dimension the input indexes); 0: unknown.
    index_bound: int = 0


@dataclass(frozen=True)
class ArgumentType:
    """A tensor argument of a function as its signature declares it (None: a dynamic size)."""

    name: str
    dims: tuple[int | None, ...]
    element_type: str
    # The declared type of an argument that is no tensor (its element type is then "").
    other_type: str = ""

    @property
    def is_dynamic(self) -> bool:
        return None in self.dims

    def describe(self) -> str:
        return "x".join([*("?" if d is None else str(d) for d in self.dims), self.element_type])


def parse_input_spec(text: str) -> InputSpec:
    """Parse `1x3x224x224xf32`, `4xf32=1.5`, `16x32xsi8` or `8x8xf16=@values.npy`."""
    match = _SPEC.match(text.strip())
    if match is None:
        raise IreetuneError(
            f"bad --input '{text}': expected SHAPExTYPE[=VALUE|=@file.npy], e.g. 1x3x224x224xf32"
        )
    dims = tuple(int(d) for d in match.group(1).split("x") if d)
    element_type = match.group(2)
    try:
        numpy_dtype(element_type)
    except ValueError as error:
        raise IreetuneError(f"bad --input '{text}': unknown element type {element_type}") from error
    value = match.group(3) or ""
    if value.startswith("@"):
        # Checked before any work, as every file a user names (a FIFO would hang np.load).
        check_input_file(Path(value[1:]), "--input file")
    return InputSpec(dims, element_type, value)


def read_public_functions(mlir_text: str) -> dict[str, list[ArgumentType]]:
    """Read the module's public functions, in order, with their arguments."""
    # The pattern skips `func.func private @...` by construction: only public functions match.
    functions: dict[str, list[ArgumentType]] = {}
    for match in _FUNCTION.finditer(mlir_text):
        arguments = []
        for text in match.group(3).split("%")[1:]:
            name = "%" + text.split(":", 1)[0].strip()
            tensor = _TENSOR.search(text)
            torch_tensor = _TORCH_TENSOR.search(text)
            if tensor:
                dims = _read_dims(tensor.group(1).split("x"))
                arguments.append(ArgumentType(name, dims, tensor.group(2)))
            elif torch_tensor:
                dims = _read_dims(torch_tensor.group(1).split(","))
                arguments.append(ArgumentType(name, dims, torch_tensor.group(2)))
            else:
                # Not a tensor: refused when the function is the one tuned (check_arguments).
                declared = text.split(":", 1)[-1].strip().rstrip(",")
                arguments.append(ArgumentType(name, (), "", declared))
        functions[match.group(1) or match.group(2)] = arguments
    return functions


def _read_dims(sizes: list[str]) -> tuple[int | None, ...]:
    return tuple(None if size in ("?", "-1") else int(size) for size in sizes if size)


def choose_function(functions: Mapping[str, object], requested: str) -> str:
    """Return the function to tune: the one `--function` names, else the module's only public
    one; refuse a module of several without `--function`, in one line that lists them."""
    names = ", ".join(f"@{name}" for name in functions)
    if requested:
        if requested.lstrip("@") not in functions:
            raise IreetuneError(
                f"--function {requested}: the model has no public function of that name "
                f"(it has {names or 'none'})"
            )
        return requested.lstrip("@")
    if not functions:
        raise IreetuneError("no public function found in the model")
    if len(functions) > 1:
        raise IreetuneError(
            f"the model has {len(functions)} public functions ({names}): name the one to tune "
            "with --function"
        )
    return next(iter(functions))


def check_arguments(function: str, arguments: list[ArgumentType]) -> None:
    """Refuse, in one line, a function that takes an argument that is no tensor."""
    for argument in arguments:
        if not argument.element_type:
            raise IreetuneError(
                f"cannot make inputs for argument '{argument.name}: {argument.other_type}' of "
                f"@{function}: ireetune makes tensor inputs only"
            )


def read_entry_signature(mlir_text: str, function: str = "") -> tuple[str, list[InputSpec]]:
    """Find the model's public function (the one named, else the only one) and its inputs."""
    functions = read_public_functions(mlir_text)
    name = choose_function(functions, function)
    check_arguments(name, functions[name])
    dynamic = next((a for a in functions[name] if a.is_dynamic), None)
    if dynamic is not None:
        raise IreetuneError(
            f"the model has dynamic shapes (argument '{dynamic.name}' of @{name} is "
            f"{dynamic.describe()}); ireetune tunes static shapes: give the sizes to tune for "
            "with --input, once per input (e.g. --input "
            f"{'x'.join([*('1' if d is None else str(d) for d in dynamic.dims), dynamic.element_type])})"
        )
    bounds = find_index_bounds(mlir_text)
    return name, [
        InputSpec(
            tuple(d for d in argument.dims if d is not None),
            argument.element_type,
            index_bound=bounds.get(argument.name, 0),
        )
        for argument in functions[name]
    ]


def find_index_bounds(mlir_text: str) -> dict[str, int]:
    """Map each argument that indexes a gathered dimension directly (an ONNX Gather's or
    GatherElements' indices) to that dimension's size, the smallest when it indexes several."""
    bounds: dict[str, int] = {}
    for match in _ONNX_GATHER.finditer(mlir_text):
        argument, attributes, data_dims = match.group(2, 3, 4)
        dims = _read_dims(data_dims.split(","))
        axis_match = _ONNX_AXIS.search(attributes or "")
        axis = int(axis_match.group(1)) if axis_match else 0
        if not -len(dims) <= axis < len(dims) or dims[axis] is None:
            continue
        size = dims[axis]
        assert size is not None
        bounds[argument] = min(bounds.get(argument, size), size)
    return bounds


def make_model_inputs(specs: list[InputSpec], seed: int) -> list[npt.NDArray[np.generic]]:
    """Materialise inputs: random by default, a constant, or values from a .npy file."""
    check_inputs(
        [spec.shape for spec in specs], [spec.element_type for spec in specs], "the model's inputs"
    )
    rng = np.random.default_rng(seed)
    arrays: list[npt.NDArray[np.generic]] = []
    for spec in specs:
        dtype = numpy_dtype(spec.element_type)
        if spec.value.startswith("@"):
            path = Path(spec.value[1:])
            try:
                array = np.load(path)
            except (OSError, ValueError) as error:
                raise IreetuneError(f"cannot read input file {path}: {error}") from error
            if tuple(array.shape) != spec.shape:
                raise IreetuneError(
                    f"input file {path} has shape {array.shape}, expected {spec.shape}"
                )
            arrays.append(array.astype(dtype))
        elif spec.value:
            try:
                arrays.append(np.full(spec.shape, float(spec.value)).astype(dtype))
            except ValueError as error:
                raise IreetuneError(f"bad input value '{spec.value}'") from error
        elif np.dtype(dtype).kind in "iub":
            arrays.append(rng.integers(*_integer_range(spec), size=spec.shape).astype(dtype))
        else:
            arrays.append(rng.standard_normal(size=spec.shape).astype(np.float32).astype(dtype))
    return arrays


def _integer_range(spec: InputSpec) -> tuple[int, int]:
    """Return the [low, high) range of an integer input's random values."""
    if spec.element_type == "i1":
        return 0, 2
    if spec.index_bound:
        return 0, spec.index_bound
    info = np.iinfo(numpy_dtype(spec.element_type))
    if info.bits == 8:
        return int(info.min), int(info.max) + 1
    return 0, _SMALL_INTEGER_BOUND


def with_index_bounds(specs: list[InputSpec], signature: list[InputSpec]) -> list[InputSpec]:
    """Give the user's random `--input` specs the index bounds the model's signature knows."""
    return [
        replace(spec, index_bound=expected.index_bound) if not spec.value else spec
        for spec, expected in zip(specs, signature, strict=True)
    ]
