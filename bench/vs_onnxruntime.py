"""Time IREE (llvm-cpu) against ONNX Runtime on the same CPU, side by side in one process.

Three subcommands:

    # write the zoo: three CNNs of the onnx package with seeded weights (bench/real_weights.py),
    # a BERT-style encoder and a MobileNetV2-style depthwise net, all f32, batch 1, opset 17
    python bench/vs_onnxruntime.py zoo --out runs/zoo

    # one model: IREE with the compiler's defaults, IREE with tuned flags / spec (if given) and
    # ONNX Runtime, interleaved, with the outputs compared first
    python bench/vs_onnxruntime.py measure runs/zoo/resnet50.onnx \
        --flags-file tuned_flags.txt --spec tuned_spec.mlir --runtime-flags runtime_flags.txt \
        --rounds 15 --calls 5 --json resnet50.json
    # (a run that tuned its own import, its grouped convolutions split: add
    # --tuned-mlir RUN/import_split/MODEL.mlir; the default stays the model as given)

    # the whole zoo as a markdown table (tuned flags per model: NAME=FILE, NAME is the stem)
    python bench/vs_onnxruntime.py all --zoo runs/zoo --flags-file resnet50=tuned_flags.txt \
        --json-dir runs/zoo/figures

How `measure` times. Each model is imported with `iree-import-onnx` and compiled with
`iree-compile` for llvm-cpu (`--iree-llvmcpu-target-cpu=host`); the checking and timing are
ireetune's own (`ireetune/model/ort_compare.py`, the comparison `ireetune tune` makes at the end
of an ONNX model's run): one worker process loads the binaries with `iree.runtime` on the
`local-task` device, and ONNX Runtime runs the same .onnx file on its CPU
provider with `intra_op_num_threads` equal to IREE's worker count (read from
`iree-run-module --dump_task_topologies` under the same runtime flags). All variants get the same
seeded inputs. Each is called once and its outputs compared with ONNX Runtime's (f32:
`|iree - ort| <= atol + rtol * |ort|` with atol relative to the output's largest magnitude); if
any output differs, no time is reported and the exit status is 2. Then every variant is warmed
up, and in each of `--rounds` rounds every variant is called `--calls` times in turn (the order
rotates from round to round, with a short pause between variants, and each variant's turn starts
with an untimed call that takes the hit of ONNX Runtime's still-spinning threads), so a slow drift
of the machine moves all of them alike.

The figures: each variant's median call time and the ratios IREE / ONNX Runtime (above 1: IREE
is slower), each with a 95% interval from a two-level bootstrap over rounds (resample whole
rounds, then the calls inside each; ireetune's decision/medians.py), and each
variant's median over its fastest call. The header records the load average at start and end
(figures are only worth recording when it is below 1), the CPU model, the thread counts and the
versions. `--runtime-flags` are IREE runtime flags (one per line, e.g.
`--task_topology_max_group_count=2`); the worker parses them before it opens the device, so
they apply to both IREE variants, and ONNX Runtime's thread count follows the worker count they
give.

`all` runs `measure` in a fresh process per model, then prints
one markdown row per model and the geometric mean of the ratios with its interval.

Needs ireetune with its `ort` extra (`pip install 'ireetune[ort]'`: onnxruntime), `onnx`,
`iree-base-compiler` and `iree-base-runtime`, and bench/real_weights.py (for the zoo's CNNs).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ireetune.core.input_archive import write_input_archive
from ireetune.decision.medians import Estimate, bootstrap_medians, compare_side_by_side, summarize
from ireetune.frontend.dispatches import read_mlir_file
from ireetune.frontend.model_inputs import read_entry_signature
from ireetune.model.ort_compare import (
    IREE_DEFAULT,
    IREE_TUNED,
    OrtComparison,
    OrtComparisonRequest,
    OrtStatus,
    compare_with_onnxruntime,
    onnxruntime_version,
)
from ireetune.model.ort_worker import ONNXRUNTIME

BENCH_DIR = Path(__file__).resolve().parent
OPSET = 17
LLVM_CPU_FLAGS = (
    "--iree-hal-target-device=local",
    "--iree-hal-local-target-device-backends=llvm-cpu",
    "--iree-llvmcpu-target-cpu=host",
)
ZOO_CNNS = {
    "resnet50": "light_resnet50",
    "inception_v1": "light_inception_v1",
    "squeezenet": "light_squeezenet",
}


class BenchError(Exception):
    """A mistake in the arguments or a failed tool: printed as one line, exit status 1."""


class OutputMismatch(Exception):
    """An IREE output differs from ONNX Runtime's: no speed is reported, exit status 2."""

    def __init__(self, record: dict[str, Any]) -> None:
        super().__init__("; ".join(record["output_problems"]))
        self.record = record


# --- The zoo -----------------------------------------------------------------------------------


def write_light_cnn(name: str, path: Path, seed: int) -> Path:
    """Write one of the onnx package's light networks with seeded weights (opset 17)."""
    import onnx

    sys.path.insert(0, str(BENCH_DIR))
    from real_weights import rebuild_with_real_weights

    source = Path(onnx.__file__).parent / "backend/test/data/light" / f"{name}.onnx"
    model = rebuild_with_real_weights(onnx.load(str(source)), seed)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


class GraphWriter:
    """Collect nodes and seeded initializers of an f32 ONNX graph written by hand."""

    def __init__(self, seed: int) -> None:
        from onnx import helper, numpy_helper

        self.helper = helper
        self.numpy_helper = numpy_helper
        self.rng = np.random.default_rng(seed)
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []

    def constant(self, name: str, values: Any) -> str:
        """Add an initializer holding `values` and return its name."""
        self.initializers.append(self.numpy_helper.from_array(np.asarray(values), name))
        return name

    def weight(self, name: str, shape: Sequence[int], fan_in: int, gain: float = 1.0) -> str:
        """Add a seeded weight scaled by gain / sqrt(fan-in), so activations keep their size."""
        values = self.rng.standard_normal(tuple(shape)) * (gain / math.sqrt(fan_in))
        return self.constant(name, values.astype(np.float32))

    def vector(self, name: str, size: int, centre: float, spread: float = 0.02) -> str:
        """Add a seeded 1-D tensor near `centre` (biases, layer-norm scales)."""
        values = centre + spread * self.rng.standard_normal(size)
        return self.constant(name, values.astype(np.float32))

    def node(self, op: str, inputs: list[str], output: str, **attributes: Any) -> str:
        """Add one single-output node and return its output's name."""
        self.nodes.append(self.helper.make_node(op, inputs, [output], **attributes))
        return output

    def save(
        self,
        path: Path,
        graph_name: str,
        inputs: list[tuple[str, list[int]]],
        outputs: list[tuple[str, list[int]]],
    ) -> Path:
        """Check the graph and write it as an opset-17 model."""
        import onnx
        from onnx import TensorProto

        def values(pairs: list[tuple[str, list[int]]]) -> list[Any]:
            return [
                self.helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
                for name, shape in pairs
            ]

        graph = self.helper.make_graph(
            self.nodes, graph_name, values(inputs), values(outputs), self.initializers
        )
        model = self.helper.make_model(graph, opset_imports=[self.helper.make_opsetid("", OPSET)])
        model.ir_version = 8
        onnx.checker.check_model(model, full_check=True)
        onnx.save(model, str(path))
        return path


def write_bert_encoder(path: Path, seed: int, layers: int = 2) -> Path:
    """Write a BERT-base style encoder: hidden 768, 12 heads, 128 tokens, batch 1, f32.

    Each layer, post-norm as in BERT: separate Q, K, V projections, softmax attention per head
    (no mask: every token is valid), output projection, residual, LayerNorm; MLP 768 -> 3072
    (GELU, erf form) -> 768, residual, LayerNorm. The input is the tokens' embeddings
    [1, 128, 768]: the embedding lookup is a gather that says nothing about compute.
    """
    hidden, heads, tokens, inner = 768, 12, 128, 3072
    head = hidden // heads
    g = GraphWriter(seed)
    g.constant("scale", np.float32(1.0 / math.sqrt(head)))
    g.constant("half", np.float32(0.5))
    g.constant("one", np.float32(1.0))
    g.constant("inv_sqrt2", np.float32(1.0 / math.sqrt(2.0)))
    g.constant("heads_shape", np.array([1, tokens, heads, head], dtype=np.int64))
    g.constant("hidden_shape", np.array([1, tokens, hidden], dtype=np.int64))

    def linear(x: str, name: str, rows: int, columns: int) -> str:
        product = g.node("MatMul", [x, g.weight(f"{name}_w", (rows, columns), rows)], f"{name}_mm")
        return g.node("Add", [product, g.vector(f"{name}_bias", columns, 0.0)], f"{name}_out")

    def layer_norm(x: str, name: str) -> str:
        scale = g.vector(f"{name}_g", hidden, 1.0)
        return g.node(
            "LayerNormalization",
            [x, scale, g.vector(f"{name}_b", hidden, 0.0)],
            f"{name}_out",
            axis=-1,
            epsilon=1e-12,
        )

    def split_heads(x: str, name: str, perm: list[int]) -> str:
        return g.node(
            "Transpose",
            [g.node("Reshape", [x, "heads_shape"], f"{name}_4d")],
            f"{name}_heads",
            perm=perm,
        )

    x = "embeddings"
    for index in range(layers):
        p = f"l{index}"
        q = split_heads(linear(x, f"{p}_q", hidden, hidden), f"{p}_q", [0, 2, 1, 3])
        k = split_heads(linear(x, f"{p}_k", hidden, hidden), f"{p}_k", [0, 2, 3, 1])
        v = split_heads(linear(x, f"{p}_v", hidden, hidden), f"{p}_v", [0, 2, 1, 3])
        scores = g.node("Mul", [g.node("MatMul", [q, k], f"{p}_qk"), "scale"], f"{p}_scores")
        probabilities = g.node("Softmax", [scores], f"{p}_probabilities", axis=-1)
        context = g.node("MatMul", [probabilities, v], f"{p}_context")
        merged = g.node(
            "Reshape",
            [g.node("Transpose", [context], f"{p}_context_t", perm=[0, 2, 1, 3]), "hidden_shape"],
            f"{p}_merged",
        )
        attended = g.node("Add", [x, linear(merged, f"{p}_proj", hidden, hidden)], f"{p}_res1")
        x = layer_norm(attended, f"{p}_ln1")
        up = linear(x, f"{p}_up", hidden, inner)
        erf = g.node("Erf", [g.node("Mul", [up, "inv_sqrt2"], f"{p}_up_scaled")], f"{p}_erf")
        gelu = g.node(
            "Mul",
            [g.node("Mul", [up, "half"], f"{p}_up_half"), g.node("Add", [erf, "one"], f"{p}_erf1")],
            f"{p}_gelu",
        )
        x = layer_norm(
            g.node("Add", [x, linear(gelu, f"{p}_down", inner, hidden)], f"{p}_res2"), f"{p}_ln2"
        )
    g.node("Identity", [x], "hidden_states")
    shape = [1, tokens, hidden]
    return g.save(path, "bert_encoder", [("embeddings", shape)], [("hidden_states", shape)])


# MobileNetV2's inverted residual blocks: (expansion, output channels, repeats, first stride).
MOBILENET_V2_BLOCKS = (
    (1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
    (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1),
)  # fmt: skip


def write_mobilenet_v2(path: Path, seed: int) -> Path:
    """Write a MobileNetV2 (width 1.0, 224x224, batch 1, f32) with batch norm folded away.

    Depthwise 3x3 convolutions between 1x1 expansions and projections, ReLU6 as `Clip`, residuals
    where the shape allows, global average pooling and a 1000-way `Gemm`: memory-bound depthwise
    work that the zoo's other CNNs do not have.
    """
    g = GraphWriter(seed)
    g.constant("relu6_min", np.float32(0.0))
    g.constant("relu6_max", np.float32(6.0))
    he_gain = math.sqrt(2.0)

    def conv(
        x: str,
        name: str,
        inputs: int,
        outputs: int,
        kernel: int,
        stride: int,
        groups: int = 1,
        relu6: bool = True,
    ) -> str:
        fan_in = inputs // groups * kernel * kernel
        shape = (outputs, inputs // groups, kernel, kernel)
        gain = he_gain if relu6 else 1.0
        weight = g.weight(f"{name}_w", shape, fan_in, gain)
        out = g.node(
            "Conv",
            [x, weight, g.vector(f"{name}_b", outputs, 0.0)],
            f"{name}_conv",
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            group=groups,
            pads=[kernel // 2] * 4,
        )
        if not relu6:
            return out
        return g.node("Clip", [out, "relu6_min", "relu6_max"], f"{name}_relu6")

    x = conv("image", "stem", 3, 32, 3, 2)
    channels = 32
    for block, (expansion, outputs, repeats, first_stride) in enumerate(MOBILENET_V2_BLOCKS):
        for repeat in range(repeats):
            name = f"b{block}_{repeat}"
            stride = first_stride if repeat == 0 else 1
            wide = channels * expansion
            y = x if expansion == 1 else conv(x, f"{name}_expand", channels, wide, 1, 1)
            y = conv(y, f"{name}_dw", wide, wide, 3, stride, groups=wide)
            y = conv(y, f"{name}_project", wide, outputs, 1, 1, relu6=False)
            if stride == 1 and channels == outputs:
                y = g.node("Add", [x, y], f"{name}_residual")
            x, channels = y, outputs
    x = conv(x, "head", channels, 1280, 1, 1)
    pooled = g.node("Flatten", [g.node("GlobalAveragePool", [x], "pooled_4d")], "pooled", axis=1)
    classifier = g.weight("classifier_w", (1280, 1000), 1280)
    g.node("Gemm", [pooled, classifier, g.vector("classifier_b", 1000, 0.0)], "logits")
    return g.save(path, "mobilenet_v2", [("image", [1, 3, 224, 224])], [("logits", [1, 1000])])


def write_zoo(out_dir: Path, seed: int) -> list[Path]:
    """Write every model of the zoo into `out_dir` and return their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [
        write_light_cnn(light, out_dir / f"{name}.onnx", seed) for name, light in ZOO_CNNS.items()
    ]
    paths.append(write_bert_encoder(out_dir / "bert_encoder.onnx", seed))
    paths.append(write_mobilenet_v2(out_dir / "mobilenet_v2.onnx", seed))
    return paths


# --- Measuring one model -------------------------------------------------------------------------


def find_tool(name: str) -> str:
    """Return the path of an IREE tool, preferring the one beside this Python."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.is_file() else shutil.which(name)
    if found is None:
        raise BenchError(f"{name} not found: install iree-base-compiler and iree-base-runtime")
    return found


def run_tool(command: list[str]) -> str:
    """Run a tool and return its stdout, or raise BenchError with its last error line."""
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        lines = [line for line in result.stderr.splitlines() if line.strip()] or ["(no output)"]
        raise BenchError(f"{Path(command[0]).name} failed: {lines[-1][:300]}")
    return result.stdout


def read_flags(path: Path) -> list[str]:
    """Read a flags file: whitespace-separated flags, as `iree-compile @FILE` reads them."""
    try:
        return path.read_text().split()
    except OSError as error:
        raise BenchError(f"cannot read flags file {path}: {error}") from error


def import_onnx(model_path: Path, work_dir: Path) -> Path:
    """Import the model to MLIR with iree-import-onnx, upgrading it to opset 17 if older."""
    import onnx
    from onnx import version_converter

    model = onnx.load(str(model_path))
    opset = max((e.version for e in model.opset_import if e.domain in ("", "ai.onnx")), default=0)
    source = model_path
    if opset < OPSET:
        source = work_dir / f"{model_path.stem}_opset{OPSET}.onnx"
        onnx.save(version_converter.convert_version(model, OPSET), str(source))
    mlir_path = work_dir / f"{model_path.stem}.mlir"
    run_tool([find_tool("iree-import-onnx"), str(source), "-o", str(mlir_path)])
    return mlir_path


def compile_model(mlir_path: Path, flags: Sequence[str], vmfb_path: Path) -> Path:
    """Compile for llvm-cpu on this host with the given extra flags."""
    run_tool(
        [find_tool("iree-compile"), str(mlir_path), *LLVM_CPU_FLAGS, *flags, "-o", str(vmfb_path)]
    )
    return vmfb_path


def make_inputs(model_path: Path, seed: int) -> dict[str, np.ndarray]:
    """Return seeded inputs for the model's graph inputs (unknown dimensions are 1)."""
    import onnx
    from onnx import helper

    model = onnx.load(str(model_path), load_external_data=False)
    constants = {init.name for init in model.graph.initializer}
    rng = np.random.default_rng(seed)
    inputs: dict[str, np.ndarray] = {}
    for value in model.graph.input:
        if value.name in constants:
            continue
        tensor_type = value.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in tensor_type.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
        if np.issubdtype(dtype, np.floating):
            inputs[value.name] = rng.standard_normal(shape).astype(dtype)
        elif np.issubdtype(dtype, np.integer):
            inputs[value.name] = rng.integers(0, 100, size=shape).astype(dtype)
        else:
            raise BenchError(f"input {value.name} has a type this script does not fill: {dtype}")
    return inputs


def describe_machine() -> dict[str, Any]:
    """Return the CPU model, core count and versions of everything timed."""
    cpu_model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass

    def version(package: str) -> str:
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    compiler = run_tool([find_tool("iree-compile"), "--version"])
    compiler_line = next(
        (line.strip() for line in compiler.splitlines() if "compiler version" in line), "?"
    )
    return {
        "cpu_model": cpu_model,
        "logical_cpus": os.cpu_count(),
        "python": platform.python_version(),
        "iree_compile": compiler_line,
        "iree_base_runtime": version("iree-base-runtime"),
        "onnxruntime": version("onnxruntime"),
        "onnx": version("onnx"),
        "numpy": version("numpy"),
    }


@dataclass(frozen=True)
class MeasureOptions:
    """What `measure` was asked for."""

    model_path: Path
    flags_file: Path | None
    spec_path: Path | None
    runtime_flags_file: Path | None
    rounds: int
    calls: int
    warmup: int
    seed: int
    rtol: float
    atol_scale: float
    work_dir: Path
    # The tuned variant's MLIR when it is not the model's import (a run that split the model's
    # grouped convolutions tunes its own import: the report's `apply:` line names it).
    tuned_mlir: Path | None = None


def measure(options: MeasureOptions, log: Callable[[str], None]) -> dict[str, Any]:
    """Compile, check and time the model; return the figures as a JSON-ready dict.

    Raises OutputMismatch (after logging every differing output) when an IREE variant's
    outputs differ from ONNX Runtime's: a speed of a wrong result is not reported.
    """
    if onnxruntime_version() is None:
        raise BenchError("onnxruntime is not installed: pip install 'ireetune[ort]'")
    load_start = os.getloadavg()
    machine = describe_machine()
    log(f"load average at start: {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}")
    log(f"cpu: {machine['cpu_model']} ({machine['logical_cpus']} logical cpus)")
    log(
        f"versions: {machine['iree_compile']}; iree-base-runtime {machine['iree_base_runtime']};"
        f" onnxruntime {machine['onnxruntime']}; onnx {machine['onnx']}; numpy {machine['numpy']}"
    )

    tuned_flags = read_flags(options.flags_file) if options.flags_file else []
    if options.spec_path is not None:
        if not options.spec_path.is_file():
            raise BenchError(f"spec not found: {options.spec_path}")
        tuned_flags.append(f"--iree-codegen-tuning-spec-path={options.spec_path.resolve()}")
    runtime_flags = read_flags(options.runtime_flags_file) if options.runtime_flags_file else []
    if tuned_flags:
        log(f"tuned compile flags: {' '.join(tuned_flags)}")

    options.work_dir.mkdir(parents=True, exist_ok=True)
    mlir_path = import_onnx(options.model_path, options.work_dir)
    stem = options.model_path.stem
    variants = [
        (IREE_DEFAULT, compile_model(mlir_path, [], options.work_dir / f"{stem}_default.vmfb"))
    ]
    if tuned_flags or options.tuned_mlir is not None:
        tuned_vmfb = options.work_dir / f"{stem}_tuned.vmfb"
        tuned_source = options.tuned_mlir or mlir_path
        variants.append((IREE_TUNED, compile_model(tuned_source, tuned_flags, tuned_vmfb)))
    inputs_path = options.work_dir / f"{stem}_inputs.npz"
    write_input_archive(inputs_path, list(make_inputs(options.model_path, options.seed).values()))
    function, _ = read_entry_signature(read_mlir_file(mlir_path))
    comparison = compare_with_onnxruntime(
        OrtComparisonRequest(
            options.model_path, variants, function, inputs_path, runtime_flags,
            rounds=options.rounds, calls=options.calls, warmup=options.warmup, rtol=options.rtol,
            atol_scale=options.atol_scale,
        )
    )  # fmt: skip
    log(
        f"threads: IREE local-task workers {comparison.threads}, ONNX Runtime intra-op "
        f"{comparison.threads} (inter-op 1, sequential); runtime flags: "
        f"{' '.join(runtime_flags) or '(none)'}"
    )
    record: dict[str, Any] = {
        "model": str(options.model_path),
        "machine": machine,
        "iree_workers": comparison.threads,
        "ort_intra_op_threads": comparison.threads,
        "tuned_compile_flags": tuned_flags,
        "tuned_mlir": None if options.tuned_mlir is None else str(options.tuned_mlir),
        "runtime_flags": runtime_flags,
        "load_average_start": list(load_start),
        "rtol": options.rtol,
        "atol_scale": options.atol_scale,
        "outputs_match": comparison.status is not OrtStatus.REFUSED,
        "output_problems": list(comparison.problems),
        "max_error": comparison.to_json()["max_error"],
    }
    if comparison.status is OrtStatus.REFUSED:
        record["load_average_end"] = list(os.getloadavg())
        for line in comparison.problems:
            log(f"OUTPUT MISMATCH: {line}")
        raise OutputMismatch(record)
    if comparison.status is not OrtStatus.MEASURED:
        raise BenchError(f"the comparison did not run: {comparison.describe()}")
    log(
        f"outputs agree with ONNX Runtime (rtol {options.rtol:g}, atol {options.atol_scale:g} x "
        f"max |ORT|; max abs error {comparison.max_error:.3g})"
    )
    load_end = os.getloadavg()
    record.update(describe_times(comparison, options.warmup))
    record["load_average_end"] = list(load_end)
    for line in format_figures(record):
        log(line)
    log(f"load average at end: {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}")
    return record


def describe_times(comparison: OrtComparison, warmup: int) -> dict[str, Any]:
    """Return medians, ratios to ONNX Runtime and their intervals, with the raw times."""
    figures = comparison.to_json()
    kept = ("median_ms", "median_over_fastest", "ratio_to_onnxruntime", "times_ms")
    result: dict[str, Any] = {
        "rounds": comparison.rounds,
        "calls_per_round": comparison.calls,
        "warmup_calls": warmup,
        "untimed_calls_per_turn": comparison.settle,
        **{key: figures[key] for key in kept},
    }
    times = comparison.times_ms
    if IREE_TUNED in times:
        pair = compare_side_by_side(
            {IREE_DEFAULT: times[IREE_DEFAULT], IREE_TUNED: times[IREE_TUNED]}, IREE_TUNED
        )
        result["tuned_speedup_over_default"] = asdict(pair.ratios[IREE_DEFAULT])
    result["slow_rounds"] = {name: count_slow_rounds(rounds) for name, rounds in times.items()}
    fast = fast_machine_rounds(times[ONNXRUNTIME])
    if fast is not None and len(fast) >= MIN_FAST_ROUNDS:
        kept = {name: tuple(rounds[i] for i in fast) for name, rounds in times.items()}
        ratios = compare_side_by_side(kept, ONNXRUNTIME).ratios
        result["fast_machine"] = {
            "rounds": len(fast),
            "ratio_to_onnxruntime": {name: asdict(ratio) for name, ratio in ratios.items()},
        }
    return result


# A round counts as one where the machine ran at its slow speed when ONNX Runtime's median call
# in it is above this many times its fastest round's: on the 2-core development machine the
# variants slow for seconds at a time, by different amounts (ONNX Runtime about 1.18x, the tuned
# GoogLeNet 1.58x; docs/benchmarks.md, issue 39). The ratios over the other rounds say how the
# variants compare when ONNX Runtime does not; they are reported beside the figures over every
# round, never instead of them. Selecting by ONNX Runtime's own time keeps out its slower
# rounds only, so it does not favour IREE. IREE's calls have slow phases of their own, which
# ONNX Runtime's do not show (its calling thread spins on a worker's CPU; ZFNet-512's tuned
# model ran slow in 8 of 15 rounds of one measurement, in rounds where ONNX Runtime ran fast,
# 2026-12-07): each variant's own count of slow rounds is printed too (`slow_rounds`).
SLOW_ROUND = 1.10
# Fewer rounds than this at the fast speed give no figure of their own.
MIN_FAST_ROUNDS = 10


def slow_rounds_of(rounds: Sequence[Sequence[float]]) -> list[bool]:
    """Say of each round whether its median call is above SLOW_ROUND times the fastest round's
    (a round without calls is not slow)."""
    medians = [statistics.median(calls) if calls else None for calls in rounds]
    fastest = min((median for median in medians if median is not None), default=0.0)
    return [median is not None and median > SLOW_ROUND * fastest for median in medians]


def fast_machine_rounds(reference: Sequence[Sequence[float]]) -> list[int] | None:
    """Return the rounds in which `reference` ran at its fast speed, or None when it did in
    every round."""
    slow = slow_rounds_of(reference)
    return [i for i, is_slow in enumerate(slow) if not is_slow] if any(slow) else None


def count_slow_rounds(rounds: Sequence[Sequence[float]]) -> int:
    """Return in how many rounds a variant's median call is above SLOW_ROUND times its own
    fastest round's."""
    return sum(slow_rounds_of(rounds))


def format_figures(record: dict[str, Any]) -> list[str]:
    """Render a measure record's figures as lines of text."""
    lines = [
        f"{record['rounds']} rounds x {record['calls_per_round']} calls per variant,"
        f" {record['warmup_calls']} warm-up calls, {record.get('untimed_calls_per_turn', 0)}"
        " untimed call(s) at the start of each turn; medians with 95% intervals:"
    ]
    for name, estimate in record["median_ms"].items():
        over = record["median_over_fastest"][name]
        lines.append(
            f"  {name:14s} {Estimate(**estimate).describe('ms')}  (median/fastest {over:.2f})"
        )
    for name, estimate in record["ratio_to_onnxruntime"].items():
        lines.append(f"  {name} / onnxruntime: {Estimate(**estimate).describe('x')}")
    if "tuned_speedup_over_default" in record:
        speedup = Estimate(**record["tuned_speedup_over_default"]).describe("x")
        lines.append(f"  iree_tuned speedup over iree_default: {speedup}")
    slow = record.get("slow_rounds")
    if slow:
        counts = ", ".join(f"{name} {count}" for name, count in slow.items())
        lines.append(
            f"  rounds in which each variant's median was above {SLOW_ROUND:.2f}x its own fastest "
            f"round's: {counts}"
        )
    fast = record.get("fast_machine")
    if fast:
        lines.append(
            f"  the machine ran at its slow speed in {record['rounds'] - fast['rounds']} of "
            f"{record['rounds']} rounds (ONNX Runtime's median above {SLOW_ROUND:.2f}x its "
            f"fastest round's); over the other {fast['rounds']}:"
        )
        for name, estimate in fast["ratio_to_onnxruntime"].items():
            lines.append(f"    {name} / onnxruntime: {Estimate(**estimate).describe('x')}")
    return lines


# --- The whole zoo -----------------------------------------------------------------------------


def parse_per_model(pairs: Sequence[str], what: str) -> dict[str, Path]:
    """Parse NAME=FILE arguments into a dict keyed by model stem."""
    result = {}
    for pair in pairs:
        name, separator, file_name = pair.partition("=")
        if not separator or not name or not file_name:
            raise BenchError(f"{what} '{pair}': give NAME=FILE, NAME being the model's file stem")
        result[name] = Path(file_name)
    return result


def geometric_mean_estimate(records: Sequence[dict[str, Any]], variant: str) -> Estimate | None:
    """Return the geometric mean over models of `variant` / ONNX Runtime with its interval.

    Each model's ratio is resampled exactly as `measure` resampled it (the same variants, the
    same seed), so a zoo of one model gets that model's interval; resample i of the mean
    combines resample i of every model (their timings are independent).
    """
    logs = []
    points = []
    for record in records:
        times = record["times_ms"]
        if variant not in times:
            return None
        names = list(times)
        samples = bootstrap_medians([tuple(tuple(c) for c in times[name]) for name in names])
        ratios = samples[:, names.index(variant)] / samples[:, names.index("onnxruntime")]
        logs.append(np.log(ratios))
        points.append(record["ratio_to_onnxruntime"][variant]["value"])
    if not points:
        return None
    point = math.exp(statistics.fmean(math.log(p) for p in points))
    return summarize(point, np.exp(np.mean(logs, axis=0)))


def format_table(records: Sequence[dict[str, Any]], failures: dict[str, str]) -> list[str]:
    """Render the zoo's figures as a markdown table, with the geometric means."""
    lines = [
        "| model | load avg start / end | IREE default ms | IREE tuned ms | ORT ms "
        "| IREE default / ORT | IREE tuned / ORT |",
        "|---|---|---|---|---|---|---|",
    ]

    def cell(mapping: dict[str, Any], key: str, unit: str) -> str:
        return Estimate(**mapping[key]).describe(unit) if key in mapping else "-"

    for record in records:
        medians, ratios = record["median_ms"], record["ratio_to_onnxruntime"]
        load = f"{record['load_average_start'][0]:.2f} / {record['load_average_end'][0]:.2f}"
        lines.append(
            f"| {Path(record['model']).stem} | {load} | {cell(medians, 'iree_default', 'ms')} "
            f"| {cell(medians, 'iree_tuned', 'ms')} | {cell(medians, 'onnxruntime', 'ms')} "
            f"| {cell(ratios, 'iree_default', 'x')} | {cell(ratios, 'iree_tuned', 'x')} |"
        )
    for name, reason in failures.items():
        lines.append(f"| {name} | - | {reason} | - | - | - | - |")
    means = [geometric_mean_estimate(records, v) for v in ("iree_default", "iree_tuned")]
    if records and means[0] is not None:
        cells = [m.describe("x") if m is not None else "-" for m in means]
        lines.append(f"| geometric mean | | | | | {cells[0]} | {cells[1]} |")
    return lines


def measure_zoo(arguments: argparse.Namespace) -> int:
    """Run `measure` in a fresh process per model of the zoo and print the markdown table."""
    models = sorted(arguments.zoo.glob("*.onnx"))
    if not models:
        raise BenchError(f"no .onnx files in {arguments.zoo}: write them with `zoo --out`")
    flags_files = parse_per_model(arguments.flags_file, "--flags-file")
    specs = parse_per_model(arguments.spec, "--spec")
    runtime_flags = parse_per_model(arguments.runtime_flags, "--runtime-flags")
    unknown = sorted(
        (set(flags_files) | set(specs) | set(runtime_flags)) - {m.stem for m in models}
    )
    if unknown:
        raise BenchError(f"no model named {', '.join(unknown)} in {arguments.zoo}")
    json_dir = arguments.json_dir or Path(tempfile.mkdtemp(prefix="vs_ort_"))
    json_dir.mkdir(parents=True, exist_ok=True)
    records, failures = [], {}
    for model in models:
        json_path = json_dir / f"{model.stem}.json"
        command = [
            sys.executable,
            str(Path(__file__).resolve()),
            "measure",
            str(model),
            "--rounds",
            str(arguments.rounds),
            "--calls",
            str(arguments.calls),
            "--warmup",
            str(arguments.warmup),
            "--json",
            str(json_path),
            "--work-dir",
            str(json_dir / f"{model.stem}_work"),
        ]
        for option, table in (
            ("--flags-file", flags_files),
            ("--spec", specs),
            ("--runtime-flags", runtime_flags),
        ):
            if model.stem in table:
                command += [option, str(table[model.stem])]
        print(f"## {model.stem}", flush=True)
        status = subprocess.run(command, check=False).returncode
        if status == 0:
            records.append(json.loads(json_path.read_text()))
        else:
            failures[model.stem] = "outputs differ" if status == 2 else f"failed (exit {status})"
    print()
    print("\n".join(format_table(records, failures)))
    return 0 if not failures else 1


# --- Command line ------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """Declare the three subcommands and their options."""
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)

    zoo = commands.add_parser("zoo", help="write the zoo's .onnx files")
    zoo.add_argument("--out", type=Path, required=True)
    zoo.add_argument("--seed", type=int, default=0)

    def timing_options(command: argparse.ArgumentParser) -> None:
        command.add_argument("--rounds", type=int, default=15, help="rounds (default 15)")
        command.add_argument("--calls", type=int, default=5, help="calls per variant and round")
        command.add_argument("--warmup", type=int, default=3, help="warm-up calls per variant")

    one = commands.add_parser("measure", help="time one model against ONNX Runtime")
    one.add_argument("model", type=Path)
    one.add_argument("--flags-file", type=Path, help="tuned iree-compile flags (one per line)")
    one.add_argument("--spec", type=Path, help="tuning spec (--iree-codegen-tuning-spec-path)")
    one.add_argument("--runtime-flags", type=Path, help="IREE runtime flags file (process-wide)")
    one.add_argument(
        "--tuned-mlir", type=Path,
        help="compile the tuned variant from this MLIR instead of the model's import (the run "
        "folder's import_split/MODEL.mlir when its run split the grouped convolutions)",
    )  # fmt: skip
    timing_options(one)
    one.add_argument("--seed", type=int, default=0, help="seed of the inputs")
    one.add_argument("--rtol", type=float, default=1e-3)
    one.add_argument(
        "--atol-scale",
        type=float,
        default=1e-3,
        help="absolute tolerance as a fraction of the output's largest magnitude",
    )
    one.add_argument("--work-dir", type=Path, help="keep the MLIR and .vmfb files here")
    one.add_argument("--json", type=Path, help="write the figures (and raw times) here")

    every = commands.add_parser("all", help="measure every model of a zoo, print a table")
    every.add_argument("--zoo", type=Path, required=True)
    every.add_argument("--flags-file", action="append", default=[], metavar="NAME=FILE")
    every.add_argument("--spec", action="append", default=[], metavar="NAME=FILE")
    every.add_argument("--runtime-flags", action="append", default=[], metavar="NAME=FILE")
    every.add_argument("--json-dir", type=Path, help="keep each model's JSON and binaries here")
    timing_options(every)
    return parser


def run_measure(arguments: argparse.Namespace) -> int:
    """Handle `measure`: print the figures and write the JSON record."""
    if not arguments.model.is_file():
        raise BenchError(f"model not found: {arguments.model}")
    if arguments.tuned_mlir is not None and not arguments.tuned_mlir.is_file():
        raise BenchError(f"tuned MLIR not found: {arguments.tuned_mlir}")
    if arguments.rounds < 2 or arguments.calls < 1 or arguments.warmup < 0:
        raise BenchError("give --rounds of at least 2, --calls of at least 1, --warmup >= 0")
    if arguments.rtol < 0 or arguments.atol_scale < 0:
        raise BenchError("give --rtol and --atol-scale of at least 0")
    with tempfile.TemporaryDirectory(prefix="vs_ort_") as scratch:
        options = MeasureOptions(
            model_path=arguments.model,
            flags_file=arguments.flags_file,
            spec_path=arguments.spec,
            runtime_flags_file=arguments.runtime_flags,
            rounds=arguments.rounds,
            calls=arguments.calls,
            warmup=arguments.warmup,
            seed=arguments.seed,
            rtol=arguments.rtol,
            atol_scale=arguments.atol_scale,
            work_dir=arguments.work_dir or Path(scratch),
            tuned_mlir=arguments.tuned_mlir,
        )
        try:
            record = measure(options, lambda line: print(line, flush=True))
            status = 0
        except OutputMismatch as mismatch:
            record, status = mismatch.record, 2
            print("outputs differ from ONNX Runtime's: no speed reported", file=sys.stderr)
    if arguments.json is not None:
        arguments.json.parent.mkdir(parents=True, exist_ok=True)
        arguments.json.write_text(json.dumps(record, indent=1) + "\n")
    return status


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line, run the subcommand, return its exit status."""
    arguments = build_parser().parse_args(argv)
    try:
        if arguments.command == "zoo":
            for path in write_zoo(arguments.out, arguments.seed):
                print(f"wrote {path}")
            return 0
        if arguments.command == "measure":
            return run_measure(arguments)
        return measure_zoo(arguments)
    except BenchError as error:
        print(f"vs_onnxruntime: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
