"""Tune every model of a zoo through the real command line and say how each run ended.

Each model is tuned with `ireetune tune MODEL --target cpu --time-budget 120` in a process of its
own, in a folder of its own (with a tuning database of its own), and its end is classified:

- result: exit status 0; what the run reports is read from its folder (report.json): the tuned
  model's speedup over the compiler's default, the flags the flag phase kept, the dispatches
  tuned and the specs kept;
- one line: exit status 2 with exactly one `ireetune: error: ...` line on stderr (the line is
  recorded);
- defect: anything else: a traceback, another exit status, more than one line, exit 0 without a
  report, or a run still going after a generous timeout (`--timeout`, by default 10 x budget +
  600 s; it is killed with every process it started).

A defect's folder is kept whole; the other runs' .vmfb files are removed once their report is
read (the light CNNs with real weights make binaries of hundreds of MB), unless
`--keep-binaries`.

The models:

- light: every CNN of the onnx package's light zoo (onnx/backend/test/data/light), rebuilt with
  seeded weights (bench/vs_onnxruntime.py's `write_light_cnn`, over bench/real_weights.py);
- pytorch-converted, simple: the small models the package ships under backend/test/data,
  converted to opset 17 as bench/real_weights.py converts. Each is first imported with
  `iree-import-onnx`; one that does not import is still given to `ireetune tune` (whose own
  import must fail in one line) and is listed in a section of its own, "not imported", with the
  importer's reason;
- variant: small models as users have them, written here with onnx.helper: a dynamic batch tuned
  with `--input`, fp16, bf16, int8 (QDQ around a convolution and a matmul, MatMulInteger,
  QLinearMatMul), weights in external data, several inputs and outputs, and a `.mlir` of two
  public functions tuned with `--function NAME`.

    python bench/model_zoo.py --list
    python bench/model_zoo.py --out runs/zoo                      # the whole zoo, one at a time
    python bench/model_zoo.py --models light_squeezenet,fp16_conv --time-budget 60 --out runs/z
    python bench/model_zoo.py --models multi_io --no-flag-search -- --num-candidates 2 --rounds 2

Arguments after `--` go to every `ireetune tune` unchanged. The script writes
OUT/zoo_results.json (rewritten after each model, so an interrupted zoo keeps what it measured)
and prints a markdown table for docs/benchmarks.md. Exit status: 0 when no model is a defect, 1
when one is, 2 for a mistake in the arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, version_converter

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from vs_onnxruntime import OPSET, GraphWriter, write_light_cnn  # noqa: E402

from ireetune.core.tools import find_tool, first_error_line  # noqa: E402

ONNX_DATA = Path(onnx.__file__).parent / "backend/test/data"
RESULTS_NAME = "zoo_results.json"
ERROR_PREFIX = "ireetune: error:"
SEED = 0

RESULT = "result"
ONE_LINE = "one line"
DEFECT = "defect"

# The names the importer gives ONNX element types (MLIR's), for the table's inputs column.
ELEMENT_NAMES = {
    TensorProto.FLOAT: "f32",
    TensorProto.FLOAT16: "f16",
    TensorProto.BFLOAT16: "bf16",
    TensorProto.DOUBLE: "f64",
    TensorProto.INT8: "si8",
    TensorProto.UINT8: "ui8",
    TensorProto.INT16: "si16",
    TensorProto.INT32: "si32",
    TensorProto.INT64: "si64",
    TensorProto.BOOL: "i1",
}


class ZooError(Exception):
    """A mistake in the arguments: printed as one line, exit status 2."""


@dataclass(frozen=True)
class ZooModel:
    """One model of the zoo: how to write its file and how to tune it."""

    name: str
    source: str  # "light", "pytorch-converted", "simple" or "variant"
    write: Callable[[Path], Path]  # Writes the model into a folder, returns its file.
    tune_arguments: tuple[str, ...] = ()  # What a user would add: --input, --function.
    inputs: str = ""  # Described by hand where the file does not say (MLIR).
    check_import: bool = False  # Try iree-import-onnx first (the package's test models).


@dataclass
class ModelOutcome:
    """How one model's `ireetune tune` ended, and what it reported."""

    name: str
    source: str
    inputs: str
    command: list[str]
    outcome: str = DEFECT
    exit_status: int | None = None
    wall_s: float = 0.0
    line: str = ""  # The one line, or what makes the end a defect.
    not_imported: str = ""  # iree-import-onnx's reason, for a model it does not import.
    run_folder: str = ""
    report: dict[str, Any] = field(default_factory=dict)
    stderr_tail: list[str] = field(default_factory=list)


# --- Writing the models --------------------------------------------------------------------------


def write_upgraded(source: Path, folder: Path) -> Path:
    """Write a package model converted to opset 17 (IR version 8 at least); the original when
    the converter refuses it, so that ireetune's own conversion meets it."""
    model = onnx.load(str(source))
    target = folder / f"{source.parent.name}.onnx"
    try:
        model.ir_version = max(model.ir_version, 8)
        model = version_converter.convert_version(model, OPSET)
    except Exception:  # The converter raises plain exceptions for ops it can not convert.
        shutil.copyfile(source, target)
        return target
    onnx.save(model, str(target))
    return target


def save_graph(
    writer: GraphWriter,
    path: Path,
    inputs: Sequence[tuple[str, int, Sequence[int | str]]],
    outputs: Sequence[tuple[str, int, Sequence[int | str]]],
    external_data: bool = False,
) -> Path:
    """Check and write the writer's nodes as an opset-17 model with typed inputs and outputs."""

    def values(triples: Sequence[tuple[str, int, Sequence[int | str]]]) -> list[Any]:
        return [helper.make_tensor_value_info(n, t, list(shape)) for n, t, shape in triples]

    graph = helper.make_graph(
        writer.nodes, path.stem, values(inputs), values(outputs), writer.initializers
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    if external_data:
        onnx.save_model(
            model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
            location=f"{path.stem}.weights", size_threshold=0,
        )  # fmt: skip
    else:
        onnx.save(model, str(path))
    return path


def write_conv_net(path: Path, batch: int | str, external_data: bool = False) -> Path:
    """Write two 3x3 convolutions with ReLU on a 32x32 image, batch `batch` (a name: dynamic)."""
    g = GraphWriter(SEED)
    x = g.node(
        "Conv", ["image", g.weight("w1", (16, 3, 3, 3), 27), g.vector("b1", 16, 0.0)], "c1",
        pads=[1, 1, 1, 1],
    )  # fmt: skip
    x = g.node("Relu", [x], "r1")
    x = g.node(
        "Conv", [x, g.weight("w2", (32, 16, 3, 3), 144), g.vector("b2", 32, 0.0)], "c2",
        pads=[1, 1, 1, 1], strides=[2, 2],
    )  # fmt: skip
    g.node("Relu", [x], "features")
    f32 = TensorProto.FLOAT
    return save_graph(
        g, path, [("image", f32, [batch, 3, 32, 32])], [("features", f32, [batch, 32, 16, 16])],
        external_data,
    )  # fmt: skip


def write_fp16_conv(path: Path) -> Path:
    """Write a 3x3 convolution, bias and ReLU all in f16."""
    g = GraphWriter(SEED)
    weight = g.rng.standard_normal((32, 16, 3, 3)) / 12.0
    g.constant("w", weight.astype(np.float16))
    g.constant("b", np.zeros(32, dtype=np.float16))
    g.node("Relu", [g.node("Conv", ["image", "w", "b"], "c", pads=[1, 1, 1, 1])], "features")
    f16 = TensorProto.FLOAT16
    return save_graph(
        g, path, [("image", f16, [1, 16, 32, 32])], [("features", f16, [1, 32, 32, 32])]
    )


def write_bf16_matmul(path: Path) -> Path:
    """Write a bf16 input times a bf16 weight (a linear layer's matmul)."""
    import ml_dtypes

    g = GraphWriter(SEED)
    weight = g.rng.standard_normal((256, 256)) / 16.0
    g.constant("w", weight.astype(ml_dtypes.bfloat16))
    g.node("MatMul", ["x", "w"], "y")
    bf16 = TensorProto.BFLOAT16
    return save_graph(g, path, [("x", bf16, [64, 256])], [("y", bf16, [64, 256])])


def write_qdq_conv(path: Path) -> Path:
    """Write an int8 QDQ convolution: the f32 image and the int8 weight dequantized around it,
    the result quantized and dequantized again (what quantization tools emit)."""
    g = GraphWriter(SEED)
    g.constant("x_scale", np.float32(0.05))
    g.constant("x_zero", np.int8(0))
    g.constant("w_scale", np.float32(0.01))
    g.constant("w_zero", np.int8(0))
    g.constant("w_q", g.rng.integers(-127, 128, (32, 16, 3, 3)).astype(np.int8))
    image_q = g.node("QuantizeLinear", ["image", "x_scale", "x_zero"], "image_q")
    image = g.node("DequantizeLinear", [image_q, "x_scale", "x_zero"], "image_dq")
    weight = g.node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], "w_dq")
    out = g.node("Conv", [image, weight], "c", pads=[1, 1, 1, 1])
    out_q = g.node("QuantizeLinear", [out, "x_scale", "x_zero"], "out_q")
    g.node("DequantizeLinear", [out_q, "x_scale", "x_zero"], "features")
    f32 = TensorProto.FLOAT
    return save_graph(
        g, path, [("image", f32, [1, 16, 32, 32])], [("features", f32, [1, 32, 32, 32])]
    )


def write_qdq_matmul(path: Path) -> Path:
    """Write an int8 QDQ matmul: f32 in and out, int8 weight, quantized activations."""
    g = GraphWriter(SEED)
    g.constant("x_scale", np.float32(0.05))
    g.constant("x_zero", np.int8(0))
    g.constant("w_scale", np.float32(0.01))
    g.constant("w_zero", np.int8(0))
    g.constant("w_q", g.rng.integers(-127, 128, (256, 256)).astype(np.int8))
    x_q = g.node("QuantizeLinear", ["x", "x_scale", "x_zero"], "x_q")
    x = g.node("DequantizeLinear", [x_q, "x_scale", "x_zero"], "x_dq")
    weight = g.node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], "w_dq")
    g.node("MatMul", [x, weight], "y")
    f32 = TensorProto.FLOAT
    return save_graph(g, path, [("x", f32, [64, 256])], [("y", f32, [64, 256])])


def write_matmul_integer(path: Path) -> Path:
    """Write MatMulInteger: a ui8 input times an si8 weight with zero points, to si32."""
    g = GraphWriter(SEED)
    g.constant("w", g.rng.integers(-127, 128, (256, 256)).astype(np.int8))
    g.constant("x_zero", np.uint8(128))
    g.constant("w_zero", np.int8(0))
    g.node("MatMulInteger", ["x", "w", "x_zero", "w_zero"], "y")
    return save_graph(
        g, path, [("x", TensorProto.UINT8, [64, 256])], [("y", TensorProto.INT32, [64, 256])]
    )


def write_qlinear_matmul(path: Path) -> Path:
    """Write QLinearMatMul: an si8 input times an si8 weight, requantized to si8."""
    g = GraphWriter(SEED)
    g.constant("x_scale", np.float32(0.05))
    g.constant("x_zero", np.int8(0))
    g.constant("w", g.rng.integers(-127, 128, (256, 256)).astype(np.int8))
    g.constant("w_scale", np.float32(0.01))
    g.constant("w_zero", np.int8(0))
    g.constant("y_scale", np.float32(0.5))
    g.constant("y_zero", np.int8(0))
    g.node(
        "QLinearMatMul",
        ["x", "x_scale", "x_zero", "w", "w_scale", "w_zero", "y_scale", "y_zero"],
        "y",
    )
    si8 = TensorProto.INT8
    return save_graph(g, path, [("x", si8, [64, 256])], [("y", si8, [64, 256])])


def write_multi_io(path: Path) -> Path:
    """Write two inputs and two outputs: a linear layer over one, plus the other; and its ReLU."""
    g = GraphWriter(SEED)
    product = g.node("MatMul", ["x", g.weight("w", (128, 128), 128)], "xw")
    total = g.node("Add", [product, "bias"], "total")
    g.node("Relu", [total], "activated")
    f32 = TensorProto.FLOAT
    return save_graph(
        g, path, [("x", f32, [32, 128]), ("bias", f32, [32, 128])],
        [("total", f32, [32, 128]), ("activated", f32, [32, 128])],
    )  # fmt: skip


TWO_FUNCTIONS_MLIR = """
func.func @small(%lhs: tensor<16x16xf32>, %rhs: tensor<16x16xf32>) -> tensor<16x16xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<16x16xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<16x16xf32>) -> tensor<16x16xf32>
  %r = linalg.matmul ins(%lhs, %rhs : tensor<16x16xf32>, tensor<16x16xf32>)
                     outs(%init : tensor<16x16xf32>) -> tensor<16x16xf32>
  return %r : tensor<16x16xf32>
}
func.func @large(%lhs: tensor<128x256xf32>, %rhs: tensor<256x128xf32>) -> tensor<128x128xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<128x128xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<128x128xf32>) -> tensor<128x128xf32>
  %r = linalg.matmul ins(%lhs, %rhs : tensor<128x256xf32>, tensor<256x128xf32>)
                     outs(%init : tensor<128x128xf32>) -> tensor<128x128xf32>
  return %r : tensor<128x128xf32>
}
"""

TINY_MATMUL_MLIR = """
func.func @main(%lhs: tensor<64x64xf32>, %rhs: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<64x64xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<64x64xf32>) -> tensor<64x64xf32>
  %r = linalg.matmul ins(%lhs, %rhs : tensor<64x64xf32>, tensor<64x64xf32>)
                     outs(%init : tensor<64x64xf32>) -> tensor<64x64xf32>
  return %r : tensor<64x64xf32>
}
"""


def mlir_writer(name: str, text: str) -> Callable[[Path], Path]:
    """Return a writer of `text` as NAME.mlir."""

    def write(folder: Path) -> Path:
        path = folder / f"{name}.mlir"
        path.write_text(text)
        return path

    return write


def onnx_writer(name: str, write: Callable[[Path], Path]) -> Callable[[Path], Path]:
    """Return a writer that names the file NAME.onnx in the folder."""
    return lambda folder: write(folder / f"{name}.onnx")


def list_zoo() -> list[ZooModel]:
    """Return every model of the zoo, in the order they are tuned."""
    models = [
        ZooModel(
            source.stem,
            "light",
            onnx_writer(source.stem, partial(write_light_cnn, source.stem, seed=SEED)),
        )  # fmt: skip
        for source in sorted((ONNX_DATA / "light").glob("light_*.onnx"))
    ]
    for source_name in ("pytorch-converted", "simple"):
        for folder in sorted((ONNX_DATA / source_name).iterdir()):
            if (folder / "model.onnx").is_file():
                models.append(
                    ZooModel(
                        folder.name, source_name,
                        partial(write_upgraded, folder / "model.onnx"),
                        check_import=True,
                    )
                )  # fmt: skip
    models += [
        ZooModel(
            "dynamic_batch", "variant",
            onnx_writer("dynamic_batch", lambda path: write_conv_net(path, "batch")),
            ("--input", "1x3x32x32xf32"),
        ),
        ZooModel("fp16_conv", "variant", onnx_writer("fp16_conv", write_fp16_conv)),
        ZooModel("bf16_matmul", "variant", onnx_writer("bf16_matmul", write_bf16_matmul)),
        ZooModel("int8_qdq_conv", "variant", onnx_writer("int8_qdq_conv", write_qdq_conv)),
        ZooModel("int8_qdq_matmul", "variant", onnx_writer("int8_qdq_matmul", write_qdq_matmul)),
        ZooModel(
            "matmul_integer", "variant", onnx_writer("matmul_integer", write_matmul_integer)
        ),
        ZooModel(
            "qlinear_matmul", "variant", onnx_writer("qlinear_matmul", write_qlinear_matmul)
        ),
        ZooModel(
            "external_data", "variant",
            onnx_writer("external_data", lambda path: write_conv_net(path, 1, external_data=True)),
        ),
        ZooModel("multi_io", "variant", onnx_writer("multi_io", write_multi_io)),
        ZooModel(
            "two_functions", "variant", mlir_writer("two_functions", TWO_FUNCTIONS_MLIR),
            ("--function", "large"),
            "@large: 128x256xf32, 256x128xf32 (and @small)",
        ),
        ZooModel(
            "tiny_matmul", "variant", mlir_writer("tiny_matmul", TINY_MATMUL_MLIR),
            inputs="64x64xf32, 64x64xf32",
        ),
    ]  # fmt: skip
    return models


def describe_inputs(model_path: Path, tune_arguments: Sequence[str]) -> str:
    """Describe an ONNX model's inputs as SHAPExTYPE (a named dimension by its name), and the
    `--input` given with it."""
    graph = onnx.load(str(model_path), load_external_data=False).graph
    # Models of IR version 3 list their weights as inputs too; those are not the user's to give.
    weights = {tensor.name for tensor in graph.initializer}
    described = []
    for value in [value for value in graph.input if value.name not in weights]:
        kind = value.type.WhichOneof("value")
        if kind != "tensor_type":
            described.append(f"{value.name}: {kind}")
            continue
        tensor = value.type.tensor_type
        dims = [str(d.dim_value) if d.HasField("dim_value") else d.dim_param or "?"
                for d in tensor.shape.dim]  # fmt: skip
        element = ELEMENT_NAMES.get(
            tensor.elem_type, TensorProto.DataType.Name(tensor.elem_type).lower()
        )
        described.append("x".join([*dims, element]))
    text = ", ".join(described) or "(none)"
    given = [tune_arguments[i + 1] for i, a in enumerate(tune_arguments[:-1]) if a == "--input"]
    return text + (f" (--input {' '.join(given)})" if given else "")


def import_problem(model_path: Path, folder: Path) -> str:
    """Return why iree-import-onnx does not import the model, or "" when it does."""
    try:
        result = subprocess.run(
            [find_tool("iree-import-onnx"), str(model_path), "-o", str(folder / "import.mlir")],
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return "iree-import-onnx ran past 600 s"
    if result.returncode == 0:
        return ""
    return first_error_line(result.stderr) or f"iree-import-onnx exit status {result.returncode}"


# --- Tuning and classifying ----------------------------------------------------------------------


def find_ireetune() -> list[str]:
    """Return the command of the real ireetune CLI: the entry point beside this Python."""
    beside = Path(sys.executable).parent / "ireetune"
    found = str(beside) if beside.is_file() else shutil.which("ireetune")
    if found is None:
        raise ZooError("the ireetune command was not found: pip install -e . first")
    return [found]


def classify_end(exit_status: int | None, stderr: str, timed_out: bool) -> tuple[str, str]:
    """Classify how a `tune` process ended: (outcome, the line or why it is a defect).

    A result needs exit status 0 and no traceback; a refusal, exit status 2 and stderr of exactly
    one line starting `ireetune: error:`. Everything else is a defect.
    """
    lines = [line for line in stderr.splitlines() if line.strip()]
    if timed_out:
        return DEFECT, "hang: still running at the timeout, killed"
    if "Traceback (most recent call last)" in stderr:
        return DEFECT, f"traceback: {lines[-1].strip()}"
    if exit_status == 0:
        return RESULT, ""
    if exit_status != 2:
        last = f": {lines[-1].strip()}" if lines else ""
        return DEFECT, f"exit status {exit_status}{last}"
    if len(lines) != 1:
        return DEFECT, f"exit status 2 with {len(lines)} lines on stderr"
    if not lines[0].startswith(ERROR_PREFIX):
        return DEFECT, f"exit status 2 with a line not starting '{ERROR_PREFIX}': {lines[0]}"
    return ONE_LINE, lines[0]


def read_run_report(runs_dir: Path) -> tuple[Path, dict[str, Any]]:
    """Read what a finished model run reports from its folder (report.json, tuned_flags.txt)."""
    folders = sorted(runs_dir.glob("model_*"))
    if len(folders) != 1:
        raise FileNotFoundError(f"{len(folders)} model run folders in {runs_dir}")
    run_folder = folders[0]
    report = json.loads((run_folder / "report.json").read_text())
    deployment = report.get("deployment") or {}
    speedup = deployment.get("speedup") or {}
    dispatches = report.get("dispatches") or []
    flag_search = report.get("flag_search") or {}
    notes = [str(d.get("note") or "") for d in dispatches]
    selected = [n for n in notes if n != "not selected"]
    flags_file = run_folder / "tuned_flags.txt"
    summary = {
        "default_ms": deployment.get("default_ms", report.get("default_ms")),
        "tuned_ms": deployment.get("tuned_ms", report.get("tuned_ms")),
        "speedup": speedup.get("value", report.get("speedup")),
        "speedup_low": speedup.get("low"),
        "speedup_high": speedup.get("high"),
        "flags_kept": list(flag_search.get("winner") or []),
        "flag_sets_tried": sum(1 for t in flag_search.get("trials") or [] if t.get("flags")),
        "tuned_flags": flags_file.read_text().split() if flags_file.is_file() else [],
        "dispatches_profiled": len(dispatches),
        "dispatches_selected": len(selected),
        "dispatches_tuned": sum(1 for n in selected if n and not n.startswith("not tuned")),
        "specs_kept": sum(1 for d in dispatches if d.get("kept_spec")),
        "tuned_spec": report.get("tuned_spec"),
        "onnxruntime": (report.get("onnxruntime") or {}).get("status"),
        "headline": deployment.get("headline", ""),
    }
    return run_folder, summary


def tune_model(
    model: ZooModel,
    out_dir: Path,
    budget_s: float,
    timeout_s: float,
    flag_search: bool,
    extra_arguments: Sequence[str],
) -> ModelOutcome:
    """Write the model, tune it with the real CLI in its own folder, and classify the end."""
    folder = out_dir / "models" / model.name
    runs_dir = out_dir / "runs" / model.name
    for path in (folder, runs_dir):
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
    model_path = model.write(folder)
    inputs = model.inputs or describe_inputs(model_path, model.tune_arguments)
    command = [
        *find_ireetune(), "tune", str(model_path), "--target", "cpu",
        "--time-budget", f"{budget_s:g}", "--output-dir", str(runs_dir),
        "--db", str(runs_dir / "tuning.sqlite"), "--no-progress",
        *(() if flag_search else ("--no-flag-search",)), *model.tune_arguments, *extra_arguments,
    ]  # fmt: skip
    outcome = ModelOutcome(model.name, model.source, inputs, command)
    if model.check_import:
        outcome.not_imported = import_problem(model_path, folder)
    started = time.monotonic()
    # A session of its own, so that a hang is ended with every compiler and worker it started.
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        _, stderr = process.communicate(timeout=timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        _, stderr = process.communicate()
        timed_out = True
    outcome.wall_s = time.monotonic() - started
    outcome.exit_status = process.returncode
    outcome.outcome, outcome.line = classify_end(process.returncode, stderr, timed_out)
    outcome.stderr_tail = stderr.splitlines()[-20:]
    if outcome.outcome == RESULT:
        try:
            run_folder, outcome.report = read_run_report(runs_dir)
            outcome.run_folder = str(run_folder)
        except (OSError, ValueError) as error:
            outcome.outcome, outcome.line = DEFECT, f"exit status 0 but no report: {error}"
    return outcome


# --- The table -----------------------------------------------------------------------------------


def describe_result(report: dict[str, Any]) -> str:
    """Render a result's figures for one table cell."""
    speedup = report.get("speedup")
    if speedup is None:
        text = "no speedup reported"
    else:
        low, high = report.get("speedup_low"), report.get("speedup_high")
        interval = f" [{low:.3f}, {high:.3f}]" if low is not None and high is not None else ""
        text = f"{speedup:.3f}x{interval}"
    if report.get("default_ms") is not None and report.get("tuned_ms") is not None:
        text += f" ({report['default_ms']:.3f} -> {report['tuned_ms']:.3f} ms)"
    flags = " ".join(report.get("flags_kept") or []) or "none"
    text += f"; flags kept: {flags}"
    text += (
        f"; dispatches tuned {report.get('dispatches_tuned', 0)} of "
        f"{report.get('dispatches_profiled', 0)}, specs kept {report.get('specs_kept', 0)}"
    )
    return text


def escape_cell(text: str) -> str:
    """Keep a cell's text inside its markdown cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def format_tables(outcomes: Sequence[ModelOutcome]) -> list[str]:
    """Render the outcomes as markdown: the table, then the models IREE does not import."""
    lines = [
        "| model | source | inputs / dtype | time s | outcome | speedup, or the line |",
        "|---|---|---|---|---|---|",
    ]
    not_imported = [o for o in outcomes if o.not_imported]
    for o in outcomes:
        if o.not_imported and o.outcome == ONE_LINE:
            continue  # In its own section below.
        detail = describe_result(o.report) if o.outcome == RESULT else o.line
        lines.append(
            f"| {o.name} | {o.source} | {escape_cell(o.inputs)} | {o.wall_s:.0f} | {o.outcome} "
            f"| {escape_cell(detail)} |"
        )
    counts = {
        kind: sum(1 for o in outcomes if o.outcome == kind) for kind in (RESULT, ONE_LINE, DEFECT)
    }
    lines += ["", ", ".join(f"{count} {kind}" for kind, count in counts.items()) + "."]
    if not_imported:
        lines += [
            "",
            "Not imported (iree-import-onnx refuses the graph; `ireetune tune`'s end beside it):",
            "",
            "| model | source | not imported: reason | ireetune tune |",
            "|---|---|---|---|",
        ]
        for o in not_imported:
            end = o.line if o.outcome != RESULT else "result: " + describe_result(o.report)
            lines.append(
                f"| {o.name} | {o.source} | {escape_cell(o.not_imported)} "
                f"| {o.outcome}: {escape_cell(end)} |"
            )
    return lines


# --- Command line --------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """Declare the options."""
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Arguments after `--` are given to every `ireetune tune` unchanged.",
    )  # fmt: skip
    parser.add_argument("--models", help="comma-separated names of the models to tune (--list)")
    parser.add_argument("--list", action="store_true", help="list the models and stop")
    parser.add_argument(
        "--time-budget", type=float, default=120.0, help="tune's --time-budget (default 120)"
    )
    parser.add_argument(
        "--timeout", type=float,
        help="seconds after which a run is a hang and is killed (default: 10 x budget + 600)",
    )  # fmt: skip
    parser.add_argument("--no-flag-search", action="store_true", help="give tune --no-flag-search")
    parser.add_argument("--out", type=Path, default=Path("zoo_runs"), help="(default zoo_runs)")
    parser.add_argument("--jobs", type=int, default=1, help="models tuned at once (default 1)")
    parser.add_argument(
        "--keep-binaries", action="store_true",
        help="keep the .vmfb files of runs that are not defects (default: removed once read: the "
        "light CNNs with real weights take gigabytes)",
    )  # fmt: skip
    return parser


def select_models(zoo: Sequence[ZooModel], names: str | None) -> list[ZooModel]:
    """Return the models named (all without names), refusing a name the zoo does not have."""
    if names is None:
        return list(zoo)
    wanted = [name.strip() for name in names.split(",") if name.strip()]
    by_name = {model.name: model for model in zoo}
    unknown = [name for name in wanted if name not in by_name]
    if unknown or not wanted:
        raise ZooError(f"no model named {', '.join(unknown) or '(none given)'}: see --list")
    return [by_name[name] for name in wanted]


def write_results(path: Path, outcomes: Sequence[ModelOutcome], settings: dict[str, Any]) -> None:
    """Write every outcome so far as JSON (replacing the file whole)."""
    record = {"settings": settings, "models": [asdict(o) for o in outcomes]}
    scratch = path.with_suffix(".tmp")
    scratch.write_text(json.dumps(record, indent=1) + "\n")
    scratch.replace(path)


def run_zoo(arguments: argparse.Namespace, extra_arguments: Sequence[str]) -> list[ModelOutcome]:
    """Tune the selected models (`--jobs` at a time), writing the JSON after each."""
    models = select_models(list_zoo(), arguments.models)
    if arguments.time_budget <= 0 or arguments.jobs < 1:
        raise ZooError("give --time-budget above 0 and --jobs of at least 1")
    timeout_s = arguments.timeout or 10 * arguments.time_budget + 600
    arguments.out.mkdir(parents=True, exist_ok=True)
    settings = {
        "time_budget_s": arguments.time_budget, "timeout_s": timeout_s,
        "flag_search": not arguments.no_flag_search, "extra_arguments": list(extra_arguments),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "host": os.uname().nodename,
        "cpus": os.cpu_count(),
    }  # fmt: skip
    results_path = arguments.out / RESULTS_NAME
    done: dict[str, ModelOutcome] = {}
    lock = threading.Lock()

    def tune_and_record(model: ZooModel) -> None:
        outcome = tune_model(
            model, arguments.out, arguments.time_budget, timeout_s,
            not arguments.no_flag_search, extra_arguments,
        )  # fmt: skip
        if outcome.outcome != DEFECT and not arguments.keep_binaries:
            for binary in (arguments.out / "runs" / model.name).rglob("*.vmfb"):
                binary.unlink()
        with lock:
            done[model.name] = outcome
            print(f"{model.name}: {outcome.outcome} {outcome.line}".rstrip(), flush=True)
            ordered = [done[m.name] for m in models if m.name in done]
            write_results(results_path, ordered, settings)

    with ThreadPoolExecutor(max_workers=arguments.jobs) as pool:
        for future in [pool.submit(tune_and_record, model) for model in models]:
            future.result()
    return [done[model.name] for model in models]


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line, tune the zoo, print the table; 1 when a model is a defect."""
    argv = list(sys.argv[1:] if argv is None else argv)
    extra_arguments = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    arguments = build_parser().parse_args(own)
    try:
        if arguments.list:
            for model in select_models(list_zoo(), arguments.models):
                print(f"{model.name:40s} {model.source}")
            return 0
        outcomes = run_zoo(arguments, extra_arguments)
    except ZooError as error:
        print(f"model_zoo: {error}", file=sys.stderr)
        return 2
    print()
    print("\n".join(format_tables(outcomes)))
    print(f"\nresults: {arguments.out / RESULTS_NAME}")
    return 1 if any(o.outcome == DEFECT for o in outcomes) else 0


if __name__ == "__main__":
    raise SystemExit(main())
