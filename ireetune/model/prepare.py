"""The model under tuning: how it compiles, and the inputs it is timed and checked on."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ireetune.compile.driver import CompileStatus, build_request, run_compile
from ireetune.core.input_archive import write_input_archive
from ireetune.core.target import Target
from ireetune.errors import IreetuneError
from ireetune.frontend.dispatches import read_mlir_file
from ireetune.frontend.model_inputs import (
    InputSpec,
    make_model_inputs,
    parse_input_spec,
    read_entry_signature,
)
from ireetune.verify.compare import check_inputs


@dataclass
class ModelUnderTuning:
    """The model under tuning: its MLIR, entry function, inputs and default outputs."""

    mlir_path: Path
    function: str
    inputs_path: Path
    target: Target
    with_default_specs: bool
    # The runtime device the model and its dispatches are timed on (`--devices`' first).
    device: str = ""
    default_outputs: tuple[Any, ...] = ()
    # Until the default has compiled, allow a long time; afterwards a compile with a spec gets
    # ten times the default's compile time (at least a minute): seen here, iree-compile can
    # deadlock on a candidate spec, and that must not stall the run.
    compile_timeout_s: float = 1200.0

    def compile(self, spec_path: Path | None, output: Path) -> str:
        """Compile the model (with a spec when given); return '' or the error line."""
        timeout_s = self.compile_timeout_s
        result = run_compile(
            build_request(
                self.target,
                self.mlir_path,
                output,
                spec_path=spec_path,
                default_specs=self.with_default_specs,
                timeout_s=timeout_s,
            )
        )
        if result.status is CompileStatus.TIMED_OUT:
            return f"compile timed out after {timeout_s:.0f} s"
        return "" if result.ok else result.error_line

    def compile_default(self, output: Path) -> None:
        """Compile the default model (no spec) into `output`, or refuse the model; later
        compiles get ten times its compile time (at least a minute)."""
        started = time.monotonic()
        error = self.compile(None, output)
        if error:
            raise IreetuneError(f"the model does not compile for {self.target.name}: {error}")
        self.compile_timeout_s = max(60.0, 10.0 * (time.monotonic() - started))


def _describe_tensor(spec: InputSpec) -> str:
    return "x".join([*(str(size) for size in spec.shape), spec.element_type])


def write_model_inputs(
    mlir_path: Path, input_flags: Sequence[str], seed: int, inputs_path: Path
) -> str:
    function, signature = read_entry_signature(read_mlir_file(mlir_path, "model file"))
    specs: list[InputSpec] = (
        [parse_input_spec(text) for text in input_flags] if input_flags else signature
    )
    if input_flags and len(specs) != len(signature):
        raise IreetuneError(
            f"the model's @{function} takes {len(signature)} inputs; {len(specs)} --input given"
        )
    for number, (spec, expected) in enumerate(zip(specs, signature, strict=True), start=1):
        if (spec.shape, spec.element_type) != (expected.shape, expected.element_type):
            raise IreetuneError(
                f"--input {number} is {_describe_tensor(spec)}; the model's @{function} takes "
                f"{_describe_tensor(expected)} there"
            )
    check_inputs(
        [spec.shape for spec in specs], [spec.element_type for spec in specs], "the model's inputs"
    )
    arrays = make_model_inputs(specs, seed)
    write_input_archive(inputs_path, arrays)
    return function
