"""Depthwise convolutions and pooling windows to channels-last, as a preprocessing transform spec
made for a model.

ONNX convolutions and pools are NCHW. IREE 3.13's `iree-preprocessing-convert-conv-to-channels-last`
rewrites the ordinary convolutions but leaves `linalg.depthwise_conv_2d_nchw_chw` and the
`linalg.pooling_nchw_*` windows as they are, and the CPU codegen runs an NCHW window along the
image columns with a masked window (`DoubleTilingExpert`): MobileNet-v2's 56x56x144 3x3
depthwise convolution took 1.2-1.4 ms on this project's 2-core znver5 machine, the same
convolution channels-last 0.075 ms (`ConvTileAndDecomposeExpert`, vectors along the channels);
SqueezeNet's first 3x3 max pool 0.54-0.60 ms against 0.10-0.15 ms (2026-11-28,
docs/benchmarks.md).

No compiler option reaches them, but a transform spec run before global optimization does
(`--iree-preprocessing-transform-spec-filename`): each such op is generalized and its channel
loop packed by the whole channel count, which puts the channels innermost (the unit outer
dimension folds away, and IREE recognises the result as an NHWC window op).
`transform.structured.pack` takes static sizes (or handles, not parameters), so the spec holds
one matcher and one action per op, channel count and window size, and is written for the
model's own. With the channels-last rewrite of the other convolutions the layout changes between
them cancel out; alone, they cost more than they save (measured, same day), hence the option's
dependence on it.

The spec comes in two forms, and the flag phase measures both:
- packed (`channels_last_windows.mlir`): the layout changes stay `linalg.pack`/`linalg.unpack`
  ops. The window's output is unpacked to NCHW in a dispatch of its own (with the activation
  that follows), and its padded input is packed in another: MobileNet-v2 kept 17 such unpack
  and 17 such pack dispatches, each a copy.
- transposed (`channels_last_windows_transposed.mlir`): the spec also lowers the input's and
  the initial value's packs and the output's unpack to transposes
  (`transform.structured.lower_pack`, `lower_unpack`), which transpose propagation cancels
  against the channels-last neighbours': the window then reads its producer's NHWC output and
  its bias and activation fuse into its dispatch. MobileNet-v2 went from 92 dispatches to 55
  and ran 1.13x (one thread) to 1.45x (two) faster; SqueezeNet's max pools ran 1.04x slower
  this way (2026-11-28, docs/benchmarks.md). Where a window's neighbours stay NCHW, a transpose
  may fold back into it, which is why the packed form stays on offer.
"""

from __future__ import annotations

import re
from pathlib import Path

from ireetune.compile.driver import CompileRequest, run_compile
from ireetune.core.files import write_text_atomically

TRANSFORM_SPEC_FLAG = "--iree-preprocessing-transform-spec-filename"
SPEC_FILE_NAME = "channels_last_windows.mlir"
TRANSPOSED_SPEC_FILE_NAME = "channels_last_windows_transposed.mlir"
# Each NCHW window op and the loop of its generalized form that runs over the channels:
# (n, oh, ow, c, kh, kw) for the depthwise convolution, (n, c, oh, ow, kh, kw) for the pools.
CHANNEL_LOOPS = {
    "depthwise_conv_2d_nchw_chw": 3,
    "pooling_nchw_max": 1,
    "pooling_nchw_sum": 1,
}
# An op of those, its input's channels, height and width, and its window's height and width
# (the last two dimensions of its second operand: a pool's window, a depthwise filter).
_WINDOW_OP = re.compile(
    r"linalg\.(" + "|".join(CHANNEL_LOOPS) + r")\b[^\n]*?\bins\([^:\n]*:\s*"
    r"tensor<\d+x(\d+)x(\d+)x(\d+)x[^>]*>,\s*tensor<(?:\d+x)?(\d+)x(\d+)x"
)
# The loops of the window's height and width in either generalized form.
_WINDOW_LOOPS = (4, 5)
# The first line of each form's spec, before its windows (the packed form's, then the transposed).
_HEADERS = (
    "// ireetune: channels-last windows ",
    "// ireetune: channels-last windows, as transposes ",
)
# Each spec file's name, and whether it is the transposed form.
_FORMS = {SPEC_FILE_NAME: False, TRANSPOSED_SPEC_FILE_NAME: True}
# The operands of a generalized window whose packs the transposed form lowers: the input (0)
# and the initial value (2); the filter (1) is a constant, packed once at compile time.
_LOWERED_OPERANDS = (0, 2)

# (op name without `linalg.`, channel count, window height, window width)
Window = tuple[str, int, int, int]


def find_windows(input_ir: str) -> tuple[Window, ...]:
    """Return the distinct NCHW window ops of `input_ir` (the model after IREE's input
    conversion, `--compile-to=input`) with their channel counts and window sizes, sorted. A
    global pool (its window the whole image) is left out: it is a reduction, and packed it made
    a model's compile fail (SqueezeNet's, under data tiling: a vector of 1000x16 elements)."""
    windows = set()
    for op, channels, height, width, kh, kw in _WINDOW_OP.findall(input_ir):
        if op.startswith("pooling") and (kh, kw) == (height, width):
            continue
        windows.add((op, int(channels), int(kh), int(kw)))
    return tuple(sorted(windows))


def render_spec(windows: tuple[Window, ...], transposed: bool = False) -> str:
    """Return the transform spec that turns every NCHW window op of `windows` channels-last, its
    layout changes as packs or (`transposed`) lowered to transposes."""
    if not windows or any(w[0] not in CHANNEL_LOOPS or min(w[1:]) < 1 for w in windows):
        raise ValueError(f"expected known window ops with positive sizes: {windows}")
    header = _HEADERS[transposed]
    pieces = [
        header + ",".join(":".join(str(part) for part in w) for w in windows),
        "module attributes {transform.with_named_sequence} {",
    ]
    pieces.extend(_matcher_and_action(w, transposed) for w in windows)
    pairs = ", ".join(f"@match_{_name(w)} -> @channels_last_{_name(w)}" for w in windows)
    pieces.append(
        "  transform.named_sequence @__transform_main("
        "%root: !transform.any_op {transform.consumed}) {\n"
        f"    %done = transform.foreach_match in %root {pairs}"
        " : (!transform.any_op) -> !transform.any_op\n"
        "    transform.yield\n"
        "  }\n"
        "}\n"
    )
    return "\n".join(pieces)


def _name(window: Window) -> str:
    return "_".join(str(part) for part in window)


def _matcher_and_action(window: Window, transposed: bool) -> str:
    """One matcher (the op, its channel loop's and its window's sizes) and the action that
    packs the channel loop (and, `transposed`, lowers the layout changes to transposes)."""
    op, channels, kh, kw = window
    loop = CHANNEL_LOOPS[op]
    sizes = ", ".join(str(channels) if i == loop else "0" for i in range(6))
    name = _name(window)
    lowering = _lowering() if transposed else ""
    checks = "".join(
        f"""
    %want_{i} = transform.param.constant {size} : i64 -> !transform.param<i64>
    transform.match.param.cmpi eq %size_{i}, %want_{i} : !transform.param<i64>"""
        for i, size in enumerate((channels, kh, kw))
    )
    return f"""  transform.named_sequence @match_{name}(
      %op: !transform.any_op {{transform.readonly}}) -> !transform.any_op {{
    transform.match.operation_name %op ["linalg.{op}"] : !transform.any_op
    %size_0, %size_1, %size_2 = transform.match.structured %op
        : (!transform.any_op) -> (!transform.param<i64>, !transform.param<i64>, !transform.param<i64>) {{
    ^bb0(%s: !transform.any_op):
      %c = transform.match.structured.dim %s[{loop}] : (!transform.any_op) -> !transform.param<i64>
      %h = transform.match.structured.dim %s[{_WINDOW_LOOPS[0]}] : (!transform.any_op) -> !transform.param<i64>
      %w = transform.match.structured.dim %s[{_WINDOW_LOOPS[1]}] : (!transform.any_op) -> !transform.param<i64>
      transform.match.structured.yield %c, %h, %w
          : !transform.param<i64>, !transform.param<i64>, !transform.param<i64>
    }}{checks}
    transform.yield %op : !transform.any_op
  }}
  transform.named_sequence @channels_last_{name}(
      %op: !transform.any_op {{transform.consumed}}) {{
    %generic = transform.structured.generalize %op : (!transform.any_op) -> !transform.any_op
    %packed = transform.structured.pack %generic packed_sizes = [{sizes}]
        : (!transform.any_op) -> !transform.op<"linalg.generic">{lowering}
    transform.yield
  }}"""


def _lowering() -> str:
    """The transposed form's steps after the pack: the packs of the input and the initial value,
    and the unpack of the result, lowered to transposes and reshapes."""
    generic = '!transform.op<"linalg.generic">'
    packs = "".join(
        f"""
    %pack_{i} = transform.get_producer_of_operand %packed[{i}]
        : ({generic}) -> !transform.op<"linalg.pack">
    %pad_{i}, %expand_{i}, %transpose_{i} = transform.structured.lower_pack %pack_{i}
        : (!transform.op<"linalg.pack">) -> (!transform.op<"tensor.pad">,
           !transform.op<"tensor.expand_shape">, !transform.op<"linalg.transpose">)"""
        for i in _LOWERED_OPERANDS
    )
    return f"""{packs}
    %unpack = transform.get_consumers_of_result %packed[0]
        : ({generic}) -> !transform.op<"linalg.unpack">
    %empty, %transpose, %collapse, %slice, %copy = transform.structured.lower_unpack %unpack
        : (!transform.op<"linalg.unpack">) -> (!transform.op<"tensor.empty">,
           !transform.op<"linalg.transpose">, !transform.op<"tensor.collapse_shape">,
           !transform.op<"tensor.extract_slice">, !transform.op<"linalg.copy">)"""


def is_generated_spec(path: Path) -> bool:
    """Say whether `path` holds exactly a spec `render_spec` writes (a run folder is untrusted
    data: a transform spec of another content could do anything to the model)."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return False
    first = text.split("\n", 1)[0]
    transposed = _FORMS.get(path.name)
    if transposed is None or not first.startswith(header := _HEADERS[transposed]):
        return False
    windows: list[Window] = []
    for item in first[len(header) :].split(","):
        op, *sizes = item.split(":")
        if len(sizes) != 3 or not all(size.isdigit() for size in sizes):
            return False
        windows.append((op, int(sizes[0]), int(sizes[1]), int(sizes[2])))
    try:
        return text == render_spec(tuple(windows), transposed)
    except ValueError:
        return False


def write_window_specs(
    model_path: Path, target_flags: tuple[str, ...], folder: Path, timeout_s: float
) -> tuple[Path, ...]:
    """Write the specs for the model's NCHW window ops into `folder`, in both forms; return
    their paths (the transposed form first), or none when the model has no such op (or does not
    get through IREE's input conversion, which the flag phase then reports on its own)."""
    if any(character.isspace() for character in str(folder.resolve())):
        return ()  # a flags file holds one flag a line, with no whitespace in it
    folder.mkdir(parents=True, exist_ok=True)
    converted = folder / "input_conversion.mlir"
    result = run_compile(
        CompileRequest(
            model_path, converted, target_flags=target_flags,
            phase_flags=("--compile-to=input",), timeout_s=timeout_s,
        )
    )  # fmt: skip
    if not result.ok:
        return ()
    try:
        windows = find_windows(converted.read_text())
    finally:
        converted.unlink(missing_ok=True)
    if not windows:
        return ()
    paths = (folder / TRANSPOSED_SPEC_FILE_NAME, folder / SPEC_FILE_NAME)
    for path in paths:
        write_text_atomically(path, render_spec(windows, _FORMS[path.name]))
    return paths


def spec_flag(path: Path) -> str:
    """Spell the flag that applies the spec at `path` (absolute: the flags file is used from
    anywhere)."""
    return f"{TRANSFORM_SPEC_FLAG}={path.resolve()}"
