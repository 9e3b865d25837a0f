"""Split an ONNX model's grouped convolutions per group, before import (`--split-grouped-convs`).

IREE 3.13 takes an ONNX `Conv` with `group > 1` as `linalg.conv_2d_ngchw_gfchw`, which neither
im2col nor the channels-last rewrite reaches, and the CPU default for it runs at a few GFLOP/s:
AlexNet's grouped 5x5 convolution took 60 ms of a 88 ms model on a 2-core AVX-512 machine. The
same layers as one ordinary `Conv` per group, between a `Split` of the input channels and a
`Concat` of the outputs, are convolutions every data-tiling path takes: the whole AlexNet ran
about 4x faster, outputs equal (docs/benchmarks.md, 2026-12-05).

Depthwise convolutions (one input channel per group) are left as they are: split, they would be
as many convolutions as channels, and IREE has a window lowering of its own for them. So is a
convolution whose weights (or bias) are not initializers: its groups could not be cut here.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def count_grouped_convolutions(model: Any) -> int:
    """Return how many `Conv` nodes of `model` `split_grouped_convolutions` would rewrite."""
    initializers = {tensor.name: tensor for tensor in model.graph.initializer}
    return sum(_grouped_weights(node, initializers) is not None for node in model.graph.node)


def _grouped_weights(node: Any, initializers: dict[str, Any]) -> tuple[int, Any] | None:
    """Return a grouped `Conv`'s groups and weights (a `TensorProto`) when its weights and bias
    are initializers and its groups hold more than one input channel; else None (the node stays
    as it is). Only the weights' shape is read: counting converts no tensor."""
    group = next((a.i for a in node.attribute if a.name == "group"), 1)
    grouped = node.op_type == "Conv" and group > 1 and len(node.input) > 1
    if not grouped or not all(name in initializers for name in node.input[1:]):
        return None
    weights = initializers[node.input[1]]
    return (group, weights) if len(weights.dims) > 1 and weights.dims[1] > 1 else None


def split_grouped_convolutions(model: Any) -> int:
    """Rewrite, in place, each grouped `Conv` of `model` (an `onnx.ModelProto`) whose weights
    and bias are initializers and whose groups hold more than one input channel as a `Split`,
    one `Conv` per group and a `Concat`; return how many were rewritten."""
    from onnx import helper, numpy_helper

    graph = model.graph
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    nodes, count = [], 0
    for node in graph.node:
        grouped = _grouped_weights(node, initializers)
        if grouped is None:
            nodes.append(node)
            continue
        group, weights = grouped[0], numpy_helper.to_array(grouped[1])
        count += 1
        prefix = f"{node.name or node.output[0]}_group"
        bias = numpy_helper.to_array(initializers[node.input[2]]) if len(node.input) > 2 else None
        biases = np.split(bias, group) if bias is not None else [None] * group
        sizes = numpy_helper.from_array(
            np.full(group, weights.shape[1], np.int64), f"{prefix}_sizes"
        )
        graph.initializer.append(sizes)
        parts = [f"{prefix}{g}_input" for g in range(group)]
        nodes.append(helper.make_node("Split", [node.input[0], sizes.name], parts, axis=1))
        attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        del attributes["group"]
        outputs = []
        kernels = np.split(weights, group)
        for g, (part, kernel, part_bias) in enumerate(zip(parts, kernels, biases, strict=True)):
            inputs = [part, f"{prefix}{g}_weights"]
            graph.initializer.append(numpy_helper.from_array(kernel, inputs[1]))
            if part_bias is not None:
                inputs.append(f"{prefix}{g}_bias")
                graph.initializer.append(numpy_helper.from_array(part_bias, inputs[2]))
            outputs.append(f"{prefix}{g}_output")
            nodes.append(helper.make_node("Conv", inputs, [outputs[-1]], **attributes))
        nodes.append(helper.make_node("Concat", outputs, [node.output[0]], axis=1))
    if count:
        replace_nodes(graph, nodes)
    return count


def replace_nodes(graph: Any, nodes: list[Any]) -> None:
    """Make `nodes` the graph's nodes and drop the initializers nothing reads any more (the
    whole weights of rewritten convolutions), with the graph inputs that name them: an exporter
    that lists its weights as inputs too (PyTorch's older ones) would otherwise leave each
    dropped weight an input the caller must give (a strided convolution of onnx's
    `test_Conv2d_strided`, 2026-12-07). What a subgraph (an `If` or `Loop` body) or a graph
    output reads stays."""
    del graph.node[:]
    graph.node.extend(nodes)
    read = _names_read(graph) | {output.name for output in graph.output}
    dropped = {t.name for t in graph.initializer if t.name not in read}
    for tensor in [t for t in graph.initializer if t.name in dropped]:
        graph.initializer.remove(tensor)
    for value in [v for v in graph.input if v.name in dropped]:
        graph.input.remove(value)


def _names_read(graph: Any) -> set[str]:
    """Return the names the graph's nodes read, their subgraphs' nodes included."""
    read: set[str] = set()
    for node in graph.node:
        read.update(node.input)
        for attribute in node.attribute:
            for body in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
                read |= _names_read(body)
    return read
