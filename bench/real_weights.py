"""Rebuild one of the onnx package's light networks with real (seeded random) weights.

The light models' weights are `ConstantOfShape` splats, so IREE folds much of the network (1x1
convolutions become scalar reductions) and the dispatch mix is not a real model's. This replaces
every `ConstantOfShape` whose shape is an initializer by an initializer of that shape holding
seeded random values: weights scaled by 1/sqrt(fan-in), 1-D tensors (batch-norm scales, means,
variances, biases) positive and near 1. Graph inputs that become initializers stop being inputs,
the IR version is raised to 8 and the opset converted to 17; the result is imported with
`iree-import-onnx`.

    python bench/real_weights.py light_resnet50 --out /tmp/resnet50_real
    # writes /tmp/resnet50_real/light_resnet50_real.onnx and .mlir
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper, version_converter

from ireetune.frontend.model_import import import_model


def rebuild_with_real_weights(model: onnx.ModelProto, seed: int) -> onnx.ModelProto:
    """Return a copy of `model` whose splat weights are seeded random tensors."""
    rng = np.random.default_rng(seed)
    graph = model.graph
    initializers = {init.name: init for init in graph.initializer}
    kept_nodes = []
    replaced: list[onnx.TensorProto] = []
    for node in graph.node:
        if node.op_type != "ConstantOfShape" or node.input[0] not in initializers:
            kept_nodes.append(node)
            continue
        shape = [int(v) for v in numpy_helper.to_array(initializers[node.input[0]])]
        if len(shape) == 1:
            values = rng.uniform(0.8, 1.2, size=shape)
        else:
            fan_in = math.prod(shape[1:]) or 1
            values = rng.standard_normal(size=shape) / math.sqrt(fan_in)
        replaced.append(numpy_helper.from_array(values.astype(np.float32), node.output[0]))
    del graph.node[:]
    graph.node.extend(kept_nodes)
    graph.initializer.extend(replaced)
    # The shapes of the replaced splats are no longer read; weights stop being graph inputs.
    used = {name for node in graph.node for name in node.input}
    for init in [init for init in graph.initializer if init.name not in used]:
        graph.initializer.remove(init)
    constants = {init.name for init in graph.initializer}
    # Inputs that are weights, or that nothing reads any more (the splats' shapes), go.
    data_inputs = [
        value for value in graph.input if value.name not in constants and value.name in used
    ]
    del graph.input[:]
    graph.input.extend(data_inputs)
    model.ir_version = max(model.ir_version, 8)
    return version_converter.convert_version(model, 17)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="light model name, e.g. light_resnet50")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    source = Path(onnx.__file__).parent / "backend/test/data/light" / f"{args.model}.onnx"
    model = rebuild_with_real_weights(onnx.load(str(source)), args.seed)
    onnx.checker.check_model(model)
    args.out.mkdir(parents=True, exist_ok=True)
    onnx_path = args.out / f"{args.model}_real.onnx"
    onnx.save(model, str(onnx_path))
    mlir_path = import_model(onnx_path, args.out)
    print(f"wrote {onnx_path} and {mlir_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
