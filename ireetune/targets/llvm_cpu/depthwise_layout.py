"""Depthwise convolutions to channels-last, as a preprocessing transform spec made for a model.

ONNX convolutions are NCHW. IREE 3.13's `iree-preprocessing-convert-conv-to-channels-last`
rewrites the ordinary ones but leaves `linalg.depthwise_conv_2d_nchw_chw` as it is, and the CPU
codegen vectorizes an NCHW depthwise convolution along the image columns with a masked window
(`DoubleTilingExpert`): MobileNet-v2's 56x56x144 3x3 one took 1.2-1.4 ms on this project's
2-core znver5 machine, the same convolution channels-last 0.075 ms (`ConvTileAndDecomposeExpert`,
vectors along the channels; 2026-11-28, docs/benchmarks.md).

No compiler option reaches them, but a transform spec run before global optimization does
(`--iree-preprocessing-transform-spec-filename`): each depthwise convolution is generalized and
its channel loop packed by the whole channel count, which puts the channels innermost (the
unit outer dimension folds away, and IREE recognises the result as an NHWC depthwise
convolution). `transform.structured.pack` takes static sizes (or handles, not parameters), so
the spec holds one matcher and one action per channel count, and is written for the model's own
channel counts. With the channels-last rewrite of the other convolutions the layout changes
between them cancel out; alone, they cost more than they save (measured, same day), hence the
option's dependence on it.
"""

from __future__ import annotations

import re
from pathlib import Path

from ireetune.compile.driver import CompileRequest, run_compile
from ireetune.core.files import write_text_atomically

TRANSFORM_SPEC_FLAG = "--iree-preprocessing-transform-spec-filename"
SPEC_FILE_NAME = "depthwise_channels_last.mlir"
_DEPTHWISE_OP = "linalg.depthwise_conv_2d_nchw_chw"
# The channel count of an NCHW depthwise convolution: its input's second dimension.
_DEPTHWISE_INPUT = re.compile(
    re.escape(_DEPTHWISE_OP) + r"\b[^\n]*?\bins\([^:\n]*:\s*tensor<\d+x(\d+)x\d+x\d+x"
)
_CHANNELS_LINE = "// ireetune: depthwise channels-last for channel counts "


def find_depthwise_channels(input_ir: str) -> tuple[int, ...]:
    """Return the distinct channel counts of the NCHW depthwise convolutions in `input_ir` (the
    model after IREE's input conversion, `--compile-to=input`), sorted."""
    return tuple(sorted({int(c) for c in _DEPTHWISE_INPUT.findall(input_ir)}))


def render_spec(channels: tuple[int, ...]) -> str:
    """Return the transform spec that turns every NCHW depthwise convolution with one of
    `channels` channels channels-last."""
    if not channels or any(c < 1 for c in channels):
        raise ValueError(f"channel counts must be positive and at least one: {channels}")
    pieces = [
        _CHANNELS_LINE + ",".join(str(c) for c in channels),
        "module attributes {transform.with_named_sequence} {",
    ]
    pieces.extend(_matcher_and_action(c) for c in channels)
    pairs = ", ".join(f"@match_{c} -> @channels_last_{c}" for c in channels)
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


def _matcher_and_action(channels: int) -> str:
    """One matcher (the op, and its channel loop's size) and the action that packs that loop."""
    # The generalized op's loops are (n, oh, ow, c, kh, kw): the channels are loop 3.
    return f"""  transform.named_sequence @match_{channels}(
      %op: !transform.any_op {{transform.readonly}}) -> !transform.any_op {{
    transform.match.operation_name %op ["{_DEPTHWISE_OP}"] : !transform.any_op
    %size = transform.match.structured %op : (!transform.any_op) -> !transform.param<i64> {{
    ^bb0(%s: !transform.any_op):
      %dim = transform.match.structured.dim %s[3] : (!transform.any_op) -> !transform.param<i64>
      transform.match.structured.yield %dim : !transform.param<i64>
    }}
    %want = transform.param.constant {channels} : i64 -> !transform.param<i64>
    transform.match.param.cmpi eq %size, %want : !transform.param<i64>
    transform.yield %op : !transform.any_op
  }}
  transform.named_sequence @channels_last_{channels}(
      %op: !transform.any_op {{transform.consumed}}) {{
    %generic = transform.structured.generalize %op : (!transform.any_op) -> !transform.any_op
    %packed = transform.structured.pack %generic packed_sizes = [0, 0, 0, {channels}, 0, 0]
        : (!transform.any_op) -> !transform.op<"linalg.generic">
    transform.yield
  }}"""


def is_generated_spec(path: Path) -> bool:
    """Say whether `path` holds exactly a spec `render_spec` writes (a run folder is untrusted
    data: a transform spec of another content could do anything to the model)."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return False
    first = text.split("\n", 1)[0]
    if path.name != SPEC_FILE_NAME or not first.startswith(_CHANNELS_LINE):
        return False
    listed = first[len(_CHANNELS_LINE) :].split(",")
    if not all(item.isdigit() for item in listed):
        return False
    try:
        return text == render_spec(tuple(int(item) for item in listed))
    except ValueError:
        return False


def write_depthwise_spec(
    model_path: Path, target_flags: tuple[str, ...], folder: Path, timeout_s: float
) -> Path | None:
    """Write the spec for the model's NCHW depthwise convolutions into `folder`; return its
    path, or None when the model has none (or does not get through IREE's input conversion,
    which the flag phase then reports on its own)."""
    if any(character.isspace() for character in str(folder.resolve())):
        return None  # a flags file holds one flag a line, with no whitespace in it
    folder.mkdir(parents=True, exist_ok=True)
    converted = folder / "input_conversion.mlir"
    result = run_compile(
        CompileRequest(
            model_path, converted, target_flags=target_flags,
            phase_flags=("--compile-to=input",), timeout_s=timeout_s,
        )
    )  # fmt: skip
    if not result.ok:
        return None
    try:
        channels = find_depthwise_channels(converted.read_text())
    finally:
        converted.unlink(missing_ok=True)
    if not channels:
        return None
    path = folder / SPEC_FILE_NAME
    write_text_atomically(path, render_spec(channels))
    return path


def spec_flag(path: Path) -> str:
    """Spell the flag that applies the spec at `path` (absolute: the flags file is used from
    anywhere)."""
    return f"{TRANSFORM_SPEC_FLAG}={path.resolve()}"
