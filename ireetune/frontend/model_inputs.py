"""Model inputs: `--input` specs like iree-run-module's, and random inputs by default.

A spec is `SHAPExTYPE` (random values), `SHAPExTYPE=VALUE` (every element VALUE) or
`SHAPExTYPE=@file.npy`; for example `1x3x224x224xf32`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ireetune.errors import IreetuneError
from ireetune.input_files import check_input_file
from ireetune.verify.compare import check_inputs, numpy_dtype

_SPEC = re.compile(r"^((?:\d+x)*)([a-z]+\d+)(?:=(.*))?$")
_TENSOR = re.compile(r"tensor<((?:\d+x)*)([a-z]+\d+)>")
_TORCH_TENSOR = re.compile(r"!torch\.vtensor<\[([\d,]*)\],([a-z]+\d+)>")
_FUNCTION = re.compile(r"func\.func (?:public )?@([\w$.-]+)\(([^)]*)\)")


@dataclass(frozen=True)
class InputSpec:
    """One model input: its shape, element type and where its values come from."""

    shape: tuple[int, ...]
    element_type: str
    value: str = ""


def parse_input_spec(text: str) -> InputSpec:
    """Parse `1x3x224x224xf32`, `4xf32=1.5` or `8x8xf16=@values.npy`."""
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


def read_entry_signature(mlir_text: str) -> tuple[str, list[InputSpec]]:
    """Find the model's first public function and its tensor arguments."""
    # The pattern skips `func.func private @...` by construction: only public functions match.
    for match in _FUNCTION.finditer(mlir_text):
        specs = []
        for argument in match.group(2).split("%")[1:]:
            tensor = _TENSOR.search(argument)
            torch_tensor = _TORCH_TENSOR.search(argument)
            if tensor:
                dims = tuple(int(d) for d in tensor.group(1).split("x") if d)
                specs.append(InputSpec(dims, tensor.group(2)))
            elif torch_tensor:
                dims = tuple(int(d) for d in torch_tensor.group(1).split(",") if d)
                specs.append(InputSpec(dims, torch_tensor.group(2)))
            elif "?" in argument:
                # Dispatch benchmarks, and so tuning, exist only for static shapes.
                raise IreetuneError(
                    f"the model has dynamic shapes (argument '%{argument.strip().rstrip(',')}'); "
                    "ireetune tunes static shapes: export the model with fixed sizes"
                )
            else:
                raise IreetuneError(
                    f"cannot make inputs for argument '%{argument.strip()}'; give --input"
                )
        return match.group(1), specs
    raise IreetuneError("no public function found in the model")


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
        elif spec.element_type.startswith(("i", "si", "ui")):
            arrays.append(rng.integers(0, 8, size=spec.shape).astype(dtype))
        else:
            arrays.append(rng.standard_normal(size=spec.shape).astype(np.float32).astype(dtype))
    return arrays
