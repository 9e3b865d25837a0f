"""The model under tuning: how it compiles, and the inputs it is timed and checked on."""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ireetune.compile.driver import (
    CompileRequest,
    CompileStatus,
    binary_inputs,
    build_request,
    run_compile,
)
from ireetune.compile.pool import hash_binary
from ireetune.core.errors import IreetuneError
from ireetune.core.files import write_text_atomically
from ireetune.core.input_archive import write_input_archive
from ireetune.core.target import Target
from ireetune.frontend.dispatches import read_mlir_file
from ireetune.frontend.model_inputs import (
    InputSpec,
    check_arguments,
    choose_function,
    make_model_inputs,
    parse_input_spec,
    read_entry_signature,
    read_public_functions,
    with_index_bounds,
)
from ireetune.frontend.specialize import specialize_module
from ireetune.verify.compare import check_inputs, numpy_dtype

# Global options that let a model IREE 3.13 fails to compile at default flags compile: a chain
# of ONNX ConvTranspose ops whose last feeds a padded convolution fails in codegen ("slice along
# dimension 3 runs out-of-bounds"), and compiles with im2col (pinned by
# tests/model/test_prepare.py; found on 2026-12-06 on a held-out decoder).
RESCUE_FLAGS = ("--iree-global-opt-use-im2col-for-convs",)


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
    # The binaries compiled from this model, by what decides their code (`binary_inputs`), with
    # their hash: a compile of the same inputs copies the binary instead of compiling again (the
    # flag finalists' winner with the kept specs is the final check's first set, whose last set
    # the flags' combined check compiles again).
    built: dict[tuple[object, ...], tuple[Path, str]] = field(default_factory=dict)

    def compile(self, spec_path: Path | None, output: Path) -> str:
        """Compile the model (with a spec when given); return '' or the error line."""
        return self._compile(spec_path, output)[0]

    def _compile(self, spec_path: Path | None, output: Path) -> tuple[str, str]:
        """Compile the model as `compile` does; return '' or the error line, and the
        compiler's diagnostics of a failure ('' otherwise)."""
        timeout_s = self.compile_timeout_s
        request = build_request(
            self.target, self.mlir_path, output, spec_path=spec_path,
            default_specs=self.with_default_specs, timeout_s=timeout_s,
        )  # fmt: skip
        if self._copy_built(request):
            return "", ""
        result = run_compile(request)
        if result.status is CompileStatus.TIMED_OUT:
            return f"compile timed out after {timeout_s:.0f} s", ""
        if result.ok:
            self.remember(request)
            return "", ""
        return result.error_line, result.stderr

    def remember(self, request: CompileRequest, digest: str = "") -> None:
        """Keep a compiled binary of this model (compiled by `request`; `digest`, its
        `hash_binary` when the compile already took it) for `compile` to reuse."""
        output = request.output_path
        self.built[binary_inputs(request)] = (output, digest or hash_binary(output))

    def _copy_built(self, request: CompileRequest) -> bool:
        """Put the binary of the same inputs at the request's output, when one was built and is
        still what it was (its hash); say whether it did."""
        built = self.built.get(binary_inputs(request))
        if built is None or not built[0].is_file() or hash_binary(built[0]) != built[1]:
            return False
        if built[0] != request.output_path:
            shutil.copyfile(built[0], request.output_path)
        return True

    def compile_default(self, output: Path) -> None:
        """Compile the default model (no spec) into `output`, or refuse the model, naming the
        operation the compiler failed on (the run leaves no folder, so no log); later compiles
        get ten times its compile time (at least a minute)."""
        started = time.monotonic()
        error, diagnostics = self._compile(None, output)
        if error:
            where = describe_failing_op(diagnostics)
            rescue = "" if "timed out" in error else self._rescue(output)
            raise IreetuneError(
                f"the model does not compile for {self.target.name}: {error}{where}{rescue}"
            )
        self.compile_timeout_s = max(60.0, 10.0 * (time.monotonic() - started))

    def _rescue(self, output: Path) -> str:
        """Say which of RESCUE_FLAGS, added to the model's flags, lets a model that does not
        compile compile ('' when none does: each is tried once, its binary removed)."""
        flags = self.target.global_flags
        for flag in (f for f in RESCUE_FLAGS if f not in flags):
            trial = replace(self, target=self.target.with_global_flags([*flags, flag]), built={})
            binary = output.with_name(f"{output.stem}_rescue.vmfb")
            error, _ = trial._compile(None, binary)
            binary.unlink(missing_ok=True)
            if not error:
                return f"; it compiles with {flag}: tune it with --flags={flag}"
        return ""


# The source line MLIR prints under a diagnostic: an ONNX operator as iree-import-onnx writes it,
# or any operation's name.
_ONNX_OPERATOR = re.compile(r'torch\.operator "(onnx\.\w+)"')
_OPERATION = re.compile(r'=\s*"?([a-z_][\w]*\.[\w.]+)')
_LOCATION = re.compile(r":(?P<line>\d+):\d+: error:")


def describe_failing_op(stderr: str) -> str:
    """Return where a model's compile failed, from its first error's location and the source
    line MLIR prints under it (' (in its onnx.ConvTranspose, line 15 of the model's MLIR)'), or
    '' when the diagnostic names neither."""
    lines = stderr.splitlines()
    first = next((i for i, line in enumerate(lines) if "error:" in line), None)
    if first is None:
        return ""
    snippet = lines[first + 1] if first + 1 < len(lines) else ""
    operator = _ONNX_OPERATOR.search(snippet) or _OPERATION.search(snippet)
    location = _LOCATION.search(lines[first])
    where = [
        *([f"in its {operator.group(1)}"] if operator else []),
        *([f"line {location.group('line')} of the model's MLIR"] if location else []),
    ]
    return f" ({', '.join(where)})" if where else ""


def prepare_model_source(
    mlir_path: Path, function: str, input_flags: Sequence[str], work_dir: Path
) -> tuple[Path, str, list[InputSpec]]:
    """Return the model source to tune, its function and its inputs' specs.

    The function is the one `--function` names, else the module's only public one. The source
    is the model's own file, or a copy in `work_dir` holding only that function as public (the
    others become private, and the compiler drops them: profiling, timing and the dispatches
    tuned are then all that function's), with its dynamic sizes fixed by `--input` (each such
    argument takes the given static type, cast back to the dynamic one for its uses; the
    compiler folds the casts into static dispatches, which is what dispatch benchmarks need).
    """
    text = read_mlir_file(mlir_path, "model file")
    functions = read_public_functions(text)
    name = choose_function(functions, function)
    arguments = functions[name]
    check_arguments(name, arguments)
    given = [parse_input_spec(flag) for flag in input_flags]
    if given and len(given) != len(arguments):
        raise IreetuneError(
            f"the model's @{name} takes {len(arguments)} inputs; {len(given)} --input given"
        )
    for number, (spec, argument) in enumerate(zip(given, arguments, strict=False), start=1):
        sizes_fit = len(spec.shape) == len(argument.dims) and all(
            expected in (None, size)
            for size, expected in zip(spec.shape, argument.dims, strict=False)
        )
        same_type = np.dtype(numpy_dtype(spec.element_type)) == np.dtype(
            numpy_dtype(argument.element_type)
        )
        if not (sizes_fit and same_type):
            raise IreetuneError(
                f"--input {number} is {_describe_tensor(spec)}; the model's @{name} takes "
                f"{argument.describe()} there"
            )
    dynamic = {i: given[i].shape for i, a in enumerate(arguments) if a.is_dynamic and given}
    if len(functions) > 1 or dynamic:
        text = specialize_module(text, name, dynamic)
        work_dir.mkdir(parents=True, exist_ok=True)
        mlir_path = work_dir / f"{mlir_path.stem}.{name}.mlir"
        write_text_atomically(mlir_path, text)
    _, signature = read_entry_signature(text, name)
    if not given:
        return mlir_path, name, signature
    # The signature's spelling of each type (`si8` for a given `i8`), and its index bounds.
    specs = [replace(s, element_type=e.element_type) for s, e in zip(given, signature, strict=True)]
    return mlir_path, name, with_index_bounds(specs, signature)


def _describe_tensor(spec: InputSpec) -> str:
    return "x".join([*(str(size) for size in spec.shape), spec.element_type])


def write_model_inputs(
    mlir_path: Path,
    input_flags: Sequence[str],
    seed: int,
    inputs_path: Path,
    function: str = "",
    work_dir: Path | None = None,
) -> tuple[Path, str]:
    """Write the inputs of the model's function (`prepare_model_source`, whose copy of the model
    goes into `work_dir`, by default beside the inputs); return the source to tune and the
    function."""
    mlir_path, function, specs = prepare_model_source(
        mlir_path, function, input_flags, work_dir or inputs_path.parent
    )
    check_inputs(
        [spec.shape for spec in specs], [spec.element_type for spec in specs], "the model's inputs"
    )
    arrays = make_model_inputs(specs, seed)
    write_input_archive(inputs_path, arrays)
    return mlir_path, function
