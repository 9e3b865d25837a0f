"""Benchmark the flag phase (issue 18) on this machine's CPU; figures go to docs/benchmarks.md.

Part `matmul`: the README example (examples/matmul.mlir, 1024^3 f32) through `ireetune tune`
(flag phase, then dispatch tuning under the winning flags). Reports the flag winner's interval
over default flags (whole model, real inputs, interleaved in one process), the combined result
(flags plus spec), and P9: the tuned model against NumPy/OpenBLAS on the same inputs, timed
interleaved in one process with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset for that process.

Part `conv`: a convolutional network from the onnx package rebuilt with seeded random weights
(REFERENCE.md: every ConstantOfShape weight becomes a random initializer), imported, and put
through the flag phase alone, twice: with the fixed list of known-good sets only (the phase
before issue 25) and with the searched space (the list as seeds, then single option changes,
successive halving, and the local-task runtime options). Each gives its winner's interval over
the default, its runtime flags, its wall time and every set's interval and verdict.

Usage: python bench/flag_search.py [--part matmul|conv|both] [--conv-model light_squeezenet.onnx]
    [--time-budget SECONDS]
Writes bench/results/flag_search_PART.json and prints the reports.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from ireetune.core.input_archive import write_input_archive
from ireetune.core.target import spec_flags
from ireetune.core.tools import find_tool
from ireetune.executor import LocalExecutor
from ireetune.flags.file import read_flags_file
from ireetune.flags.model_search import search_model_flags
from ireetune.flags.trials import ModelFlagSearch, describe_trial, trial_row
from ireetune.flows.model.tuner import ModelTuneOptions, tune_model
from ireetune.frontend.model_import import import_model
from ireetune.frontend.model_inputs import make_model_inputs, read_entry_signature
from ireetune.targets import parse_target

ROOT = Path(__file__).resolve().parents[1]

# Runs in its own process: IREE's tuned model and NumPy's matmul on the same inputs, interleaved.
_P9_SCRIPT = """
import json, sys, time
import numpy as np
import iree.runtime as runtime
request = json.loads(sys.argv[1])
with np.load(request["inputs"]) as archive:
    lhs, rhs = archive["arg0"], archive["arg1"]
device = runtime.get_device(request["device"])
functions = {}
for name, path in request["models"].items():
    config = runtime.Config(device=device)
    context = runtime.SystemContext(config=config)
    module = runtime.VmModule.mmap(config.vm_instance, path)
    context.add_vm_module(module)
    functions[name] = context.modules[module.name][request["function"]]
args = [runtime.asdevicearray(device, lhs), runtime.asdevicearray(device, rhs)]
expected = lhs @ rhs
times = {name: [] for name in [*functions, "numpy"]}
for name, function in functions.items():
    result = np.asarray(function(*args).to_host())
    assert np.allclose(result, expected, rtol=1e-3, atol=1e-2), name
for _ in range(request["rounds"]):
    for name, function in functions.items():
        start = time.perf_counter(); function(*args); times[name].append((time.perf_counter() - start) * 1e3)
    start = time.perf_counter(); np.matmul(lhs, rhs); times["numpy"].append((time.perf_counter() - start) * 1e3)
print(json.dumps(times))
"""


def _load() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def _compile_applied(model: Path, flags_file: Path | None, spec: Path | None, output: Path) -> None:
    """Build the tuned model the way the report tells a user to (flags file, spec)."""
    target = parse_target("cpu")
    words = [find_tool("iree-compile"), str(model), *target.target_flags()]
    words += [f"@{flags_file}"] if flags_file else []
    words += spec_flags(target, spec) if spec else []
    subprocess.run([*words, "-o", str(output)], check=True, capture_output=True)


def run_matmul(rounds: int, num_candidates: int, scratch: Path) -> dict[str, object]:
    model = ROOT / "examples" / "matmul.mlir"
    load_before = _load()
    started = time.perf_counter()
    result = tune_model(
        ModelTuneOptions(
            model_path=model, target="cpu", num_candidates=num_candidates, max_dispatches=3,
            candidates_per_dispatch=2, rounds=rounds, output_dir=scratch, use_database=False,
            show_progress=False,
        )
    )  # fmt: skip
    wall_s = time.perf_counter() - started
    print((result.run_dir / "report.txt").read_text())
    tuned = scratch / "tuned.vmfb"
    _compile_applied(model, result.tuned_flags_path, result.tuned_spec_path, tuned)
    default = scratch / "default.vmfb"
    _compile_applied(model, None, None, default)
    environment = {
        k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
    }
    request = {
        "inputs": str(result.run_dir / "inputs.npz"), "function": "matmul", "rounds": 4 * rounds,
        "models": {"default": str(default), "tuned": str(tuned)}, "device": "local-task",
    }  # fmt: skip
    completed = subprocess.run(
        [sys.executable, "-c", _P9_SCRIPT, json.dumps(request)],
        check=True, capture_output=True, text=True, env=environment,
    )  # fmt: skip
    times = json.loads(completed.stdout)
    medians = {name: float(np.median(values)) for name, values in times.items()}
    # On a loaded machine the fastest call is the best estimate of the uncontended time.
    minima = {name: float(np.min(values)) for name, values in times.items()}
    # One thread each (IREE's local-sync device, one OpenBLAS thread): less exposed to other
    # processes taking one of the two cores from a two-thread run in the middle of a call.
    completed = subprocess.run(
        [sys.executable, "-c", _P9_SCRIPT, json.dumps({**request, "device": "local-sync"})],
        check=True, capture_output=True, text=True,
        env={**environment, "OPENBLAS_NUM_THREADS": "1"},
    )  # fmt: skip
    single = {
        name: float(np.median(values)) for name, values in json.loads(completed.stdout).items()
    }
    search = result.flag_search
    return {
        "model": "examples/matmul.mlir (1024^3 f32)",
        "load_average_before": load_before,
        "load_average_after": _load(),
        "wall_s": round(wall_s, 1),
        "flags": list(result.flags),
        "flag_speedup": search.estimate.describe() if search and search.estimate else None,
        "flag_default_ms": search.estimate.baseline_ms if search and search.estimate else None,
        "flag_winner_ms": search.estimate.candidate_ms if search and search.estimate else None,
        "spec_written": result.tuned_spec_path is not None,
        "spec_speedup_under_flags": result.estimate.describe() if result.estimate else None,
        "combined": result.combined.describe() if result.combined else None,
        "p9_session_median_ms": medians,
        "p9_session_min_ms": minima,
        "p9_tuned_over_openblas": medians["tuned"] / medians["numpy"],
        "p9_tuned_over_openblas_min": minima["tuned"] / minima["numpy"],
        "p9_default_over_tuned": medians["default"] / medians["tuned"],
        "p9_single_thread_median_ms": single,
        "p9_single_thread_tuned_over_openblas": single["tuned"] / single["numpy"],
        "trials": [trial_row(t) for t in search.trials] if search else [],
        "flags_file_checked": list(read_flags_file(result.tuned_flags_path))
        if result.tuned_flags_path
        else [],
    }


def rebuild_with_random_weights(source: Path, output: Path, seed: int) -> None:
    """Replace every ConstantOfShape weight by seeded random values (REFERENCE.md)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(source)
    rng = np.random.default_rng(seed)
    initializers = {i.name: i for i in model.graph.initializer}
    kept_nodes = []
    new_initializers = []
    for node in model.graph.node:
        if node.op_type != "ConstantOfShape" or node.input[0] not in initializers:
            kept_nodes.append(node)
            continue
        shape = tuple(int(d) for d in numpy_helper.to_array(initializers[node.input[0]]))
        if len(shape) == 1:
            # Biases and batch-norm parameters: positive and near 1 keeps variances sane.
            values = 1.0 + 0.1 * np.abs(rng.standard_normal(shape))
        else:
            fan_in = int(np.prod(shape[1:])) or 1
            values = rng.standard_normal(shape) / np.sqrt(fan_in)
        new_initializers.append(numpy_helper.from_array(values.astype(np.float32), node.output[0]))
    del model.graph.node[:]
    model.graph.node.extend(kept_nodes)
    used = {name for node in kept_nodes for name in node.input}
    kept_initializers = [i for i in model.graph.initializer if i.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend([*kept_initializers, *new_initializers])
    weight_names = {i.name for i in model.graph.initializer} | {
        i.name for i in initializers.values()
    }
    inputs = [i for i in model.graph.input if i.name not in weight_names]
    del model.graph.input[:]
    model.graph.input.extend(inputs)
    model.ir_version = max(model.ir_version, 8)
    onnx.save(model, output)


def run_conv(
    model_name: str, rounds: int, scratch: Path, time_budget_s: float | None
) -> dict[str, object]:
    import onnx

    source = Path(onnx.__file__).parent / "backend/test/data/light" / model_name
    rebuilt = scratch / model_name.replace(".onnx", "_random.onnx")
    rebuild_with_random_weights(source, rebuilt, seed=0)
    mlir_path = import_model(rebuilt, scratch / "import")
    function, signature = read_entry_signature(mlir_path.read_text())
    inputs_path = scratch / "conv_inputs.npz"
    arrays = make_model_inputs(signature, seed=0)
    write_input_archive(inputs_path, arrays)
    target = parse_target("cpu")
    searched = target.flag_space()
    figures: dict[str, object] = {"model": f"{model_name} with seeded random weights"}
    for name, space in (("list", replace(searched, tuned=(), runtime=())), ("search", searched)):
        load_before = _load()
        started = time.perf_counter()
        result = search_model_flags(
            LocalExecutor(),
            ModelFlagSearch(
                source_path=mlir_path, function=function, inputs_path=inputs_path,
                base_flags=tuple(target.compile_flags()), user_flags=(), device="local-task",
                space=space, rounds=rounds, repetitions=0, jobs=2, time_budget_s=time_budget_s,
            ),
            scratch / f"conv_flags_{name}",
        )  # fmt: skip
        wall_s = time.perf_counter() - started
        print(f"== {name}")
        for trial in result.trials:
            print(describe_trial(trial))
        figures[name] = {
            "load_average_before": load_before,
            "load_average_after": _load(),
            "wall_s": round(wall_s, 1),
            "winner": list(result.winner.flags),
            "winner_speedup": result.estimate.describe() if result.estimate else None,
            "runtime_flags": list(result.runtime_flags),
            "runtime_speedup": (
                result.runtime_estimate.describe() if result.runtime_estimate else None
            ),
            "compiled_sets": len(result.trials),
            "notes": list(result.notes),
            "trials": [trial_row(t) for t in result.trials],
        }
    return figures


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--part", choices=("matmul", "conv", "both"), default="both")
    parser.add_argument("--conv-model", default="light_squeezenet.onnx")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--num-candidates", type=int, default=16)
    parser.add_argument("--time-budget", type=float, default=None, help="seconds per flag phase")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    figures: dict[str, object] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.processor() or platform.machine()}, "
        f"{len(os.sched_getaffinity(0))} cores",
    }
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        if args.part in ("matmul", "both"):
            figures["matmul"] = run_matmul(args.rounds, args.num_candidates, scratch / "matmul")
        if args.part in ("conv", "both"):
            (scratch / "conv").mkdir()
            figures["conv"] = run_conv(
                args.conv_model, args.rounds, scratch / "conv", args.time_budget
            )
    output = args.out / f"flag_search_{args.part}.json"
    output.write_text(json.dumps(figures, indent=2, default=str) + "\n")
    summary = {
        part: {
            k: ({kk: vv for kk, vv in v.items() if kk != "trials"} if isinstance(v, dict) else v)
            for k, v in values.items()
            if k != "trials"
        }
        for part, values in figures.items()
        if isinstance(values, dict)
    }
    print(json.dumps({**summary, "date": figures["date"], "machine": figures["machine"]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
