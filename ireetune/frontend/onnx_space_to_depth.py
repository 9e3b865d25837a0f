"""Rewrite an ONNX model's strided convolutions of few input channels as a space-to-depth and a
stride-1 convolution, before import (part of the rewritten import, frontend/model_import.py).

A network's first convolution reads the image's three channels with a large strided window
(AlexNet's 11x11 at stride 4, ResNet's 7x7 at stride 2). IREE 3.13's CPU code for a
convolution of three input channels runs far from the machine's peak: on a 2-core AMD EPYC
(Zen 4) AlexNet's first convolution ran at 26 GFLOP/s, about a tenth of the peak, and took a
quarter of the model. The same layer as `SpaceToDepth(s)` (each s x s block of pixels becomes
s*s*C channels) followed by a stride-1 convolution over ceil(k/s) x ceil(k/s) blocks, its
weights zero-padded to a multiple of s and rearranged to match, computes the same outputs with
s*s times the input channels; the whole AlexNet ran 1.19-1.24x faster at default flags
(docs/benchmarks.md, 2026-12-07). Under `--iree-global-opt-use-im2col-for-convs` the
convolution is a matrix product already, and the rewrite gains nothing.

Only a `Conv` whose weights (and bias) are initializers, with one group, no dilation, the same
stride s >= 2 on both axes, a window at least s wide, explicit pads, at most
`MAX_INPUT_CHANNELS` input channels and an input of known shape is rewritten.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ireetune.frontend.onnx_groups import replace_nodes

# A convolution of more input channels than this keeps its own form: it fills vectors already.
MAX_INPUT_CHANNELS = 4


def _strided_weights(node: Any, initializers: dict[str, Any], shapes: dict[str, list[int]]) -> int:
    """Return the stride of a `Conv` that `space_to_depth_convolutions` rewrites (0: none).
    Only the weights' shape is read."""
    if node.op_type != "Conv" or len(node.input) < 2:
        return 0
    if not all(name in initializers for name in node.input[1:]):
        return 0
    attributes = {a.name: a for a in node.attribute}
    weights = list(initializers[node.input[1]].dims)
    strides = list(attributes["strides"].ints) if "strides" in attributes else [1, 1]
    shape = shapes.get(node.input[0], [])
    group = attributes["group"].i if "group" in attributes else 1
    if len(weights) != 4 or group != 1 or len(strides) != 2 or strides[0] != strides[1]:
        return 0
    stride = strides[0]
    if stride < 2 or weights[1] > MAX_INPUT_CHANNELS or min(weights[2:]) < stride:
        return 0
    if "dilations" in attributes and any(d != 1 for d in attributes["dilations"].ints):
        return 0
    if "auto_pad" in attributes and attributes["auto_pad"].s not in (b"", b"NOTSET"):
        return 0
    if len(shape) != 4 or not all(size > 0 for size in shape):
        return 0
    pads = list(attributes["pads"].ints) if "pads" in attributes else [0, 0, 0, 0]
    extra = _extra_rows(shape[2:], weights[2:], pads, stride)
    # Where the blocked windows would read fewer rows than the input holds, it stays as it is
    # (no cropping pad).
    return stride if min(extra) >= 0 else 0


def _extra_rows(
    size: list[int], kernel: list[int], pads: list[int], stride: int
) -> tuple[int, int]:
    """Return the rows and the columns to pad at the bottom and right of the input (after its
    own top and left pads) for the blocked windows to read exactly what they need."""
    extra = []
    for axis in range(2):
        out = (size[axis] + pads[axis] + pads[axis + 2] - kernel[axis]) // stride + 1
        blocks = -(-kernel[axis] // stride)
        extra.append((out - 1 + blocks) * stride - size[axis] - pads[axis])
    return extra[0], extra[1]


def _input_shapes(model: Any) -> dict[str, list[int]]:
    """Return every tensor's static shape that ONNX shape inference finds (0: unknown size)."""
    from onnx import shape_inference

    inferred = shape_inference.infer_shapes(model)
    values = [*inferred.graph.input, *inferred.graph.value_info]
    return {
        value.name: [dim.dim_value for dim in value.type.tensor_type.shape.dim] for value in values
    }


def count_space_to_depth(model: Any) -> int:
    """Return how many `Conv` nodes of `model` `space_to_depth_convolutions` would rewrite."""
    initializers = {tensor.name: tensor for tensor in model.graph.initializer}
    shapes = _input_shapes(model)
    return sum(_strided_weights(node, initializers, shapes) > 0 for node in model.graph.node)


def space_to_depth_convolutions(model: Any) -> int:
    """Rewrite, in place, each strided `Conv` of few input channels of `model` (an
    `onnx.ModelProto`) as a `Pad` (where it pads), a `SpaceToDepth` and a stride-1 `Conv`;
    return how many were rewritten."""
    from onnx import helper, numpy_helper

    graph = model.graph
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    shapes = _input_shapes(model)
    nodes, count = [], 0
    for node in graph.node:
        stride = _strided_weights(node, initializers, shapes)
        if not stride:
            nodes.append(node)
            continue
        count += 1
        weights = numpy_helper.to_array(initializers[node.input[1]])
        outputs, channels, kernel_h, kernel_w = weights.shape
        attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        layer_pads = attributes.get("pads", [0, 0, 0, 0])
        top, left = layer_pads[:2]
        extra_h, extra_w = _extra_rows(
            shapes[node.input[0]][2:], [kernel_h, kernel_w], layer_pads, stride
        )
        blocks_h, blocks_w = -(-kernel_h // stride), -(-kernel_w // stride)
        # Weights zero-padded to whole blocks; channel (bh * s + bw) * C + c of a block holds
        # pixel (bh, bw) of channel c, as SpaceToDepth lays them out.
        padded = np.zeros((outputs, channels, blocks_h * stride, blocks_w * stride), weights.dtype)
        padded[:, :, :kernel_h, :kernel_w] = weights
        blocked = padded.reshape(outputs, channels, blocks_h, stride, blocks_w, stride)
        blocked = blocked.transpose(0, 3, 5, 1, 2, 4).reshape(
            outputs, stride * stride * channels, blocks_h, blocks_w
        )
        prefix = f"{node.name or node.output[0]}_space_to_depth"
        graph.initializer.append(
            numpy_helper.from_array(np.ascontiguousarray(blocked), f"{prefix}_weights")
        )
        # The input padded to exactly the rows and columns the blocked windows read.
        source = node.input[0]
        pads = [0, 0, top, left, 0, 0, extra_h, extra_w]
        if any(pads):
            graph.initializer.append(
                numpy_helper.from_array(np.array(pads, np.int64), f"{prefix}_pads")
            )
            nodes.append(helper.make_node("Pad", [source, f"{prefix}_pads"], [f"{prefix}_padded"]))
            source = f"{prefix}_padded"
        nodes.append(
            helper.make_node("SpaceToDepth", [source], [f"{prefix}_blocks"], blocksize=stride)
        )
        nodes.append(
            helper.make_node(
                "Conv",
                [f"{prefix}_blocks", f"{prefix}_weights", *node.input[2:]],
                list(node.output),
                kernel_shape=[blocks_h, blocks_w],
                strides=[1, 1],
            )  # fmt: skip
        )
    if count:
        replace_nodes(graph, nodes)
    return count
