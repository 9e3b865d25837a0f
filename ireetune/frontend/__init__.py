"""Frontends: turn what the user gives into the dispatches and modules the tuner works on.

`load.py` and `dispatches.py` read a dispatch benchmark or dump a model's dispatches and pick
one; `model_import.py` turns a model file (MLIR, ONNX) or a torch module into MLIR, and
`onnx_groups.py` splits an ONNX model's grouped convolutions per group before, when asked;
`model_inputs.py` reads `--input` specs (random inputs by default); `specialize.py` narrows a
module to the function tuned, at the sizes tuned.
"""
