"""Read a dispatch benchmark file, or dump a model's dispatches and pick one.

A dispatch benchmark file is what `iree-compile --iree-hal-dump-executable-benchmarks-to=DIR
--iree-codegen-add-tuner-attributes` writes: one `hal.executable` plus a `util.func` marked
`iree.benchmark = "dispatch"`. Anything else that parses is treated as a model.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from iree.compiler import ir

from ireetune.compile.driver import (
    CONFIGURED_PHASE,
    DUMP_BENCHMARKS_FLAG,
    TUNER_ATTRIBUTES_FLAG,
    CompileRequest,
    CompilerTool,
    CompileStatus,
    build_request,
    run_compile,
)
from ireetune.core.errors import IreetuneError
from ireetune.core.input_files import (
    MLIR_BYTECODE_MAGIC,
    ONNX_HINT,
    describe_binary,
    read_input_bytes,
)
from ireetune.core.target import Target

logger = logging.getLogger(__name__)

_BENCHMARK_MARKER = 'iree.benchmark = "dispatch"'
# The dispatch benchmark's one buffer, allocated in its initializer.
_ALLOCATION = re.compile(
    r"^(?P<indent>[ ]*)(?P<buffer>%[\w$]+) = hal\.allocator\.allocate<[^\n]*"
    r"affinity\((?P<affinity>%[\w$]+)\)[^\n]*\{(?P<size>%[\w$]+)\}\n",
    re.MULTILINE,
)
_STRIP_PIPELINE = (
    "builtin.module(hal.executable(hal.executable.variant(builtin.module("
    "iree-codegen-strip-compilation-info))))"
)


@dataclass(frozen=True)
class DumpedDispatch:
    """One dispatch benchmark file dumped from a model."""

    index: int
    name: str
    path: Path


def read_mlir_file(path: Path, what: str = "input file", onnx_hint: str = ONNX_HINT) -> str:
    """Read an MLIR file as text (MLIR bytecode is printed as text) or raise a one-line error
    for a missing, unreadable or binary one (`what` names it; `onnx_hint` says where an ONNX
    model goes instead)."""
    raw = read_input_bytes(path, what)
    if raw.startswith(MLIR_BYTECODE_MAGIC):
        try:
            with ir.Context():
                return str(ir.Module.parse(raw))
        except ir.MLIRError as error:
            raise IreetuneError(f"cannot parse {path} as MLIR bytecode: {error}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise IreetuneError(
            describe_binary(raw, path, what, error, mlir=True, onnx_hint=onnx_hint)
        ) from None


def parse_module(text: str, context: ir.Context, origin: Path) -> ir.Module:
    """Parse MLIR text, turning a parse failure into a one-line error naming the file."""
    try:
        with context:
            return ir.Module.parse(text)
    except ir.MLIRError as error:
        first = str(error).splitlines()
        detail = next(
            (line.strip() for line in first if "error" in line.lower()), first[0] if first else ""
        )
        raise IreetuneError(f"cannot parse {origin} as MLIR: {detail[:300]}") from error


def is_dispatch_benchmark(text: str) -> bool:
    """Say whether MLIR text is a dispatch benchmark dump rather than a model."""
    return _BENCHMARK_MARKER in text and "hal.executable" in text


# What `dump_dispatches` leaves beside the benchmarks: the model compiled up to its configured
# executables, whose host program still holds one `stream.cmd.dispatch` per launch.
CONFIGURED_PROGRAM = "configured.mlir"


def dump_dispatches(
    model_path: Path, target: Target, output_dir: Path, timeout_s: float
) -> list[DumpedDispatch]:
    """Compile a model once, dumping one benchmark file per dispatch, and list them in order.

    The compile stops once the executables are configured (the dump is written then, the same
    files as a full compile's): no code is generated, and its output (CONFIGURED_PROGRAM) is
    the program whose dispatch sites `model.hot.count_dispatch_invocations` counts. Before, a
    full compile dumped the benchmarks and a second one, to the stream phase, gave the counts
    (docs/benchmarks.md: one compile of the model for the profile)."""
    output_dir.mkdir(parents=True, exist_ok=True)
    result = run_compile(
        build_request(
            target,
            model_path,
            output_dir / CONFIGURED_PROGRAM,
            phase_flags=(TUNER_ATTRIBUTES_FLAG, CONFIGURED_PHASE),
            dumps=((DUMP_BENCHMARKS_FLAG, output_dir),),
            timeout_s=timeout_s,
        )
    )
    if result.status is CompileStatus.TIMED_OUT:
        raise IreetuneError(
            f"compiling {model_path} to find its dispatches took over {timeout_s:.0f} s"
        )
    if not result.ok:
        raise IreetuneError(f"iree-compile failed on {model_path}: {result.error_line}")
    files = sorted(output_dir.glob("*_benchmark.mlir"), key=_dispatch_sort_key)
    if target.traits.zeroes_benchmark_buffers:
        for path in files:
            path.write_text(zero_benchmark_buffer(path.read_text()))
    if not files:
        dynamic = find_dynamic_signatures(model_path)
        if dynamic:
            raise IreetuneError(
                f"{model_path} has dynamic shapes ({dynamic[0]}); the compiler dumps dispatch "
                "benchmarks only for static shapes: export the model with fixed sizes"
            )
    return [DumpedDispatch(i, _dispatch_name(p), p) for i, p in enumerate(files)]


def zero_benchmark_buffer(text: str) -> str:
    """Return a dispatch benchmark with its buffer zeroed once, in the initializer that
    allocates it (unchanged when it is not of the form IREE 3.13 dumps: one allocation).

    The dump allocates one buffer for all the dispatch's bindings and leaves it uninitialised;
    read as floats, the garbage holds denormals, which the CPU computes on far more slowly:
    MobileNet-v2's 3136x24x144 matmul dispatch took 2.0 ms on it and 0.2 ms zeroed, and its
    profile put that dispatch first. Zeros are ordinary values to the arithmetic, and a safe
    index for a gather.
    """
    allocations = list(_ALLOCATION.finditer(text))
    device = re.search(r"hal\.device\.allocator<(%[\w$]+) : !hal\.device>", text)
    if len(allocations) != 1 or device is None:
        logger.warning(
            "a dispatch benchmark not of the form IREE 3.13 dumps: its buffer is not zeroed, "
            "and its time may include denormals"
        )
        return text
    match = allocations[0]
    indent, buffer, affinity, size = match.group("indent", "buffer", "affinity", "size")
    lines = [
        f"%zero_fill_cmd = hal.command_buffer.create device({device.group(1)} : !hal.device) "
        f"mode(OneShot) categories(Transfer) affinity({affinity}) : !hal.command_buffer",
        "%zero_fill_offset = arith.constant 0 : index",
        "%zero_fill_pattern = arith.constant 0 : i32",
        f"hal.command_buffer.fill_buffer<%zero_fill_cmd : !hal.command_buffer> "
        f"target({buffer} : !hal.buffer)[%zero_fill_offset, {size}] "
        'pattern(%zero_fill_pattern : i32) flags("None")',
        "hal.command_buffer.finalize<%zero_fill_cmd : !hal.command_buffer>",
        "%zero_fill_wait = util.null : !hal.fence",
        f"%zero_fill_done = hal.fence.create device({device.group(1)} : !hal.device) "
        'flags("None") : !hal.fence',
        f"hal.device.queue.execute<{device.group(1)} : !hal.device> affinity({affinity}) "
        "wait(%zero_fill_wait) signal(%zero_fill_done) commands(%zero_fill_cmd) "
        'flags("None")',
        "%zero_fill_forever = arith.constant -1 : i32",
        "%zero_fill_status = hal.fence.await until([%zero_fill_done]) "
        'timeout_millis(%zero_fill_forever) flags("None") : i32',
        'util.status.check_ok %zero_fill_status, "failed to zero the benchmark buffer"',
    ]
    fill = "".join(f"{indent}{line}\n" for line in lines)
    return text[: match.end()] + fill + text[match.end() :]


def find_dynamic_signatures(model_path: Path) -> list[str]:
    """List the model's function arguments and results whose shape has a dynamic size (`?`).

    Returns "@name argument N: TYPE" and "@name result N: TYPE"; an empty list when every shape
    is static or the model cannot be read here (the compiler has already said why then).
    """
    context = ir.Context()
    try:
        with context:
            module = ir.Module.parse(model_path.read_text())
    except (ir.MLIRError, OSError, UnicodeDecodeError):
        return []
    found: list[str] = []

    def visit(operation: ir.Operation) -> ir.WalkResult:
        if "function_type" not in operation.attributes:
            return ir.WalkResult.ADVANCE
        signature = ir.TypeAttr(operation.attributes["function_type"]).value
        if not isinstance(signature, ir.FunctionType):
            return ir.WalkResult.ADVANCE
        name = ir.StringAttr(operation.attributes["sym_name"]).value
        for role, types in (("argument", signature.inputs), ("result", signature.results)):
            for index, value_type in enumerate(types):
                if (
                    isinstance(value_type, ir.ShapedType)
                    and value_type.has_rank
                    and not value_type.has_static_shape
                ):
                    found.append(f"@{name} {role} {index}: {value_type}")
        return ir.WalkResult.ADVANCE

    with context:
        module.operation.walk(visit)
    return found


def _dispatch_sort_key(path: Path) -> tuple[int, str]:
    match = re.search(r"_dispatch_(\d+)", path.name)
    return (int(match.group(1)) if match else 1 << 30, path.name)


def _dispatch_name(path: Path) -> str:
    """Return the name of the executable a dumped benchmark launches, as the model's program
    names it at its dispatch sites (`model/hot.count_dispatch_invocations`): from the file
    (`module_<executable>_<variant>_benchmark.mlir` does not say where the executable's name
    ends: a data-tiling encoding's is `_encoding_3`), else from the file's name."""
    with path.open() as text:
        for line in text:
            found = _EXECUTABLE.match(line)
            if found:
                return found.group(1)
    match = re.match(r"(?:module_)?(.*_dispatch_\d+)", path.stem)
    return match.group(1) if match else path.stem.removesuffix("_benchmark")


_EXECUTABLE = re.compile(r"\s*hal\.executable (?:private |public )?@([\w$.-]+)")


def select_dispatch(dispatches: list[DumpedDispatch], choice: str | None) -> DumpedDispatch:
    """Pick a dispatch by index or name; with no choice, raise an error that lists them all."""
    if not dispatches:
        raise IreetuneError("the model has no dispatches to tune")
    listing = "; ".join(f"{d.index}: {d.name}" for d in dispatches)
    if choice is None and len(dispatches) == 1:
        return dispatches[0]
    if choice is None:
        raise IreetuneError(f"choose a dispatch with --dispatch NAME|INDEX: {listing}")
    if choice.isdigit():
        index = int(choice)
        if index < len(dispatches):
            return dispatches[index]
        raise IreetuneError(
            f"dispatch index {index} out of range 0..{len(dispatches) - 1}: {listing}"
        )
    matches = [d for d in dispatches if d.name == choice or d.path.name == choice]
    if not matches:
        matches = [d for d in dispatches if choice in d.name]
    if len(matches) != 1:
        raise IreetuneError(f"no single dispatch matches '{choice}': {listing}")
    return matches[0]


def strip_configurations(
    benchmark_path: Path, output_path: Path, timeout_s: float, keep_root_markers: bool = False
) -> None:
    """Remove existing lowering configs so that a spec can set new ones, and (unless asked to
    keep them) the `root_op` markers of `--iree-codegen-add-tuner-attributes`, which a model
    compile never carries: a DAG matcher (`cast_compatible_dag_from_root`, the reduction
    family's) compares the op's attributes and misses an op that still has one."""
    result = run_compile(
        CompileRequest(
            benchmark_path,
            output_path,
            phase_flags=(f"--pass-pipeline={_STRIP_PIPELINE}",),
            timeout_s=timeout_s,
            tool=CompilerTool.OPT,
        )
    )
    if not result.ok:
        raise IreetuneError(
            f"cannot strip configurations from {benchmark_path}: {result.error_line}"
        )
    # The strip pass leaves the lowering_config of an op that is no Linalg op (a `linalg.pack`).
    names = ("lowering_config",) if keep_root_markers else ("lowering_config", "root_op")
    _remove_attributes(output_path, names)


def _remove_attributes(path: Path, names: tuple[str, ...]) -> None:
    """Delete every attribute of these names from the ops of a module file, in place."""
    context = ir.Context()
    module = parse_module(read_mlir_file(path), context, path)
    marked: list[tuple[ir.Operation, str]] = []

    def collect(op: ir.Operation) -> ir.WalkResult:
        marked.extend((op, name) for name in names if name in op.attributes)
        return ir.WalkResult.ADVANCE

    module.operation.walk(collect)
    if not marked:
        return
    for op, name in marked:
        del op.attributes[name]
    path.write_text(str(module))
