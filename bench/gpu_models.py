"""Tune three real-size models for a GPU with the split flow: compile here, measure there.

Models (issue 12): `examples/transformer_block.mlir`; a GPT-2-small style decoder stack (f16,
hidden 768, 12 heads, sequence 1024, causal, `--layers` blocks, written here as ONNX with seeded
random weights); ResNet-50 from the onnx package with seeded random weights (bench/real_weights.py),
cast to f16.

    # here (has the compiler): write the models, compile every first round trip
    python bench/gpu_models.py prepare --out runs/gpu --target cuda:sm_80 --devices cuda://0
    # on the GPU host (runtime only: iree-base-runtime, numpy): measure whatever is due
    python bench/gpu_models.py device --out runs/gpu [--devices cuda://0]
    # here: do what is due next (candidates of missed dispatches, model variants, the decision)
    python bench/gpu_models.py continue --out runs/gpu
    # ... device / continue again until every run is done (two round trips when the static
    # ranking covers the hot set), then:
    python bench/gpu_models.py report --out runs/gpu

With the device tool (64 MiB travel each way, the runtime wheel included; 8 files back), copy
only what the device reads, and bring back one archive. A payload over the limit (ResNet-50 and
the GPT-2 stack: their weights alone are 51 and 57 MB) goes in parts (`pack --part-mb 45`), one
device call per part, each copying its part into a folder that stays on the warm machine:

    python bench/gpu_models.py pack --out runs/gpu --dest .gpu_payload      # here; carry it
    python bench/gpu_models.py device --out .gpu_payload                    # there
    python bench/gpu_models.py collect --out .gpu_payload --archive $OUT/results.tar.gz
    python bench/gpu_models.py unpack --out runs/gpu --archive results.tar.gz   # here
    python bench/gpu_models.py continue --out runs/gpu

`local` runs the same flow on one machine (device steps as runtime-only subprocesses), e.g. on
the CPU: `python bench/gpu_models.py local --out runs/cpu --target cpu --devices local-task
--models mlp`. Each run's report.json holds the side-by-side speedup with its interval, the
round trips and the wall time per phase and host; `report` prints them as one table.

The `device` subcommand imports neither the compiler nor onnx: copy the folder (or only the
files `device_step.json` lists) to the GPU host and run it there.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPOSITORY = Path(__file__).resolve().parents[1]
MODELS = ("transformer_block", "gpt2_stack", "resnet50_f16")
EXTRA_MODELS = {"mlp": REPOSITORY / "examples" / "mlp.mlir"}


# --- The models (compile host only: onnx is imported here) -----------------------------------


def write_gpt2_stack(path: Path, layers: int, seed: int = 0) -> Path:
    """Write a GPT-2-small style decoder stack as ONNX: f16, 768 wide, 12 heads, 1024 tokens.

    Each block: LayerNorm, QKV projection, causal softmax attention per head, output
    projection, residual; LayerNorm, MLP 768 -> 3072 (GELU, erf form) -> 768, residual. Weights
    are initializers (seeded, scaled by 1/sqrt(fan-in)), so the model's one input is the tokens'
    hidden states.
    """
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    hidden, heads, tokens, inner = 768, 12, 1024, 3072
    head = hidden // heads
    rng = np.random.default_rng(seed)
    initializers: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def constant(name: str, values: Any) -> str:
        initializers.append(numpy_helper.from_array(np.asarray(values), name))
        return name

    def weight(name: str, rows: int, columns: int) -> str:
        values = rng.standard_normal((rows, columns)) / math.sqrt(rows)
        return constant(name, values.astype(np.float16))

    def vector(name: str, size: int, centre: float) -> str:
        return constant(name, (centre + 0.02 * rng.standard_normal(size)).astype(np.float16))

    def node(op: str, inputs: list[str], output: str, **attributes: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [output], **attributes))
        return output

    mask = np.triu(np.full((tokens, tokens), -30000.0, dtype=np.float16), k=1)
    constant("causal_mask", mask)
    constant("scale", np.float16(1.0 / math.sqrt(head)))
    constant("half", np.float16(0.5))
    constant("one", np.float16(1.0))
    constant("inv_sqrt2", np.float16(1.0 / math.sqrt(2.0)))
    constant("heads_shape", np.array([tokens, heads, head], dtype=np.int64))
    constant("hidden_shape", np.array([tokens, hidden], dtype=np.int64))
    constant("qkv_split", np.array([hidden, hidden, hidden], dtype=np.int64))

    def layer_norm(x: str, name: str) -> str:
        return node(
            "LayerNormalization", [x, vector(f"{name}_g", hidden, 1.0), vector(f"{name}_b", hidden, 0.0)],
            f"{name}_out", axis=-1, epsilon=1e-5,
        )  # fmt: skip

    def linear(x: str, name: str, rows: int, columns: int) -> str:
        product = node("MatMul", [x, weight(f"{name}_w", rows, columns)], f"{name}_mm")
        return node("Add", [product, vector(f"{name}_bias", columns, 0.0)], f"{name}_out")

    x = "hidden_states"
    for index in range(layers):
        p = f"l{index}"
        qkv = linear(layer_norm(x, f"{p}_ln1"), f"{p}_qkv", hidden, 3 * hidden)
        nodes.append(
            helper.make_node("Split", [qkv, "qkv_split"], [f"{p}_q", f"{p}_k", f"{p}_v"], axis=1)
        )
        q = node("Transpose", [node("Reshape", [f"{p}_q", "heads_shape"], f"{p}_q3")], f"{p}_qh", perm=[1, 0, 2])  # fmt: skip
        k = node("Transpose", [node("Reshape", [f"{p}_k", "heads_shape"], f"{p}_k3")], f"{p}_kt", perm=[1, 2, 0])  # fmt: skip
        v = node("Transpose", [node("Reshape", [f"{p}_v", "heads_shape"], f"{p}_v3")], f"{p}_vh", perm=[1, 0, 2])  # fmt: skip
        scores = node("Mul", [node("MatMul", [q, k], f"{p}_qk"), "scale"], f"{p}_scaled")
        probabilities = node(
            "Softmax", [node("Add", [scores, "causal_mask"], f"{p}_masked")], f"{p}_p", axis=-1
        )
        attended = node("Transpose", [node("MatMul", [probabilities, v], f"{p}_pv")], f"{p}_pvt", perm=[1, 0, 2])  # fmt: skip
        merged = node("Reshape", [attended, "hidden_shape"], f"{p}_merged")
        x = node("Add", [x, linear(merged, f"{p}_proj", hidden, hidden)], f"{p}_res1")
        up = linear(layer_norm(x, f"{p}_ln2"), f"{p}_up", hidden, inner)
        erf = node("Erf", [node("Mul", [up, "inv_sqrt2"], f"{p}_scaled_up")], f"{p}_erf")
        gelu = node(
            "Mul", [node("Mul", [up, "half"], f"{p}_half_up"), node("Add", [erf, "one"], f"{p}_erf1")],
            f"{p}_gelu",
        )  # fmt: skip
        x = node("Add", [x, linear(gelu, f"{p}_down", inner, hidden)], f"{p}_res2")
    output = layer_norm(x, "final_ln")
    graph = helper.make_graph(
        nodes, "gpt2_stack",
        [helper.make_tensor_value_info("hidden_states", TensorProto.FLOAT16, [tokens, hidden])],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT16, [tokens, hidden])],
        initializers,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def write_resnet50_f16(path: Path, seed: int = 0) -> Path:
    """Write ResNet-50 from the onnx package with seeded random weights, every float as f16."""
    import numpy as np
    import onnx
    from onnx import TensorProto, numpy_helper

    sys.path.insert(0, str(REPOSITORY / "bench"))
    from real_weights import rebuild_with_real_weights

    source = Path(onnx.__file__).parent / "backend/test/data/light/light_resnet50.onnx"
    model = rebuild_with_real_weights(onnx.load(str(source)), seed)
    graph = model.graph
    for index, initializer in enumerate(graph.initializer):
        if initializer.data_type == TensorProto.FLOAT:
            values = numpy_helper.to_array(initializer).astype(np.float16)
            graph.initializer[index].CopyFrom(numpy_helper.from_array(values, initializer.name))
    for value in [*graph.input, *graph.output]:
        if value.type.tensor_type.elem_type == TensorProto.FLOAT:
            value.type.tensor_type.elem_type = TensorProto.FLOAT16
    del graph.value_info[:]
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def model_path(name: str, models_dir: Path, layers: int) -> Path:
    """Return the model file for `name`, writing it first when it is generated."""
    models_dir.mkdir(parents=True, exist_ok=True)
    if name == "transformer_block":
        return REPOSITORY / "examples" / "transformer_block.mlir"
    if name in EXTRA_MODELS:
        return EXTRA_MODELS[name]
    if name == "gpt2_stack":
        path = models_dir / f"gpt2_stack_{layers}l.onnx"
        return path if path.exists() else write_gpt2_stack(path, layers)
    if name == "resnet50_f16":
        path = models_dir / "resnet50_f16.onnx"
        return path if path.exists() else write_resnet50_f16(path)
    raise SystemExit(f"unknown model {name}; known: {', '.join((*MODELS, *EXTRA_MODELS))}")


# --- The phases -------------------------------------------------------------------------------


def _runs(out: Path) -> dict[str, Path]:
    """Return each model's run folder (recorded in out/runs.json)."""
    index = out / "runs.json"
    return {k: Path(v) for k, v in json.loads(index.read_text()).items()} if index.exists() else {}


def _save_runs(out: Path, runs: dict[str, Path]) -> None:
    (out / "runs.json").write_text(json.dumps({k: str(v) for k, v in runs.items()}, indent=2))


def _payload_mb(run_dir: Path) -> float:
    """Return the size of what the next device step reads (its manifest's files), in MB."""
    manifest = json.loads((run_dir / "device_step.json").read_text())
    return sum((run_dir / f).stat().st_size for f in manifest["files"]) / 1e6


def _phase(run_dir: Path) -> str:
    from ireetune.flows.model.state import read_run_file

    return str(read_run_file(run_dir).split_stage)


def prepare(arguments: argparse.Namespace) -> None:
    from ireetune.flows.model.tuner import ModelTuneOptions, prepare_split_run

    runs = _runs(arguments.out)
    for name in arguments.models.split(","):
        if name in runs:
            print(f"{name}: prepared before: {runs[name]}")
            continue
        started = time.monotonic()
        status = prepare_split_run(
            ModelTuneOptions(
                model_path=model_path(name, arguments.out / "models", arguments.layers),
                target=arguments.target, devices=tuple(arguments.devices.split(",")),
                num_candidates=arguments.num_candidates, max_dispatches=arguments.max_dispatches,
                candidates_per_dispatch=arguments.candidates_per_dispatch,
                rounds=arguments.rounds, output_dir=arguments.out / "runs", use_database=False,
                show_progress=False, search_flags=False, externalize_weights=True,
            )
        )  # fmt: skip
        runs[name] = status.run_dir
        _save_runs(arguments.out, runs)
        print(
            f"{name}: prepared in {time.monotonic() - started:.0f} s; device payload "
            f"{_payload_mb(status.run_dir):.1f} MB; next: {status.next_command}"
        )


def device(arguments: argparse.Namespace) -> None:
    # Runtime only: the device step imports neither the compiler nor onnx.
    from ireetune.flows.handoff.device_step import run_device_step

    for name, run_dir in _runs(arguments.out).items():
        run_dir = arguments.out / run_dir if not run_dir.is_absolute() else run_dir
        if not (run_dir / "device_step.json").exists() or (
            (run_dir / "model_run.json").exists() and _phase(run_dir) != "awaiting-device"
        ):
            continue
        started = time.monotonic()
        path = run_device_step(run_dir, [d for d in arguments.devices.split(",") if d])
        print(f"{name}: device step in {time.monotonic() - started:.0f} s: {path}")


def continue_runs(arguments: argparse.Namespace) -> None:
    from ireetune.flows.model.tuner import continue_split_run

    for name, run_dir in _runs(arguments.out).items():
        if _phase(run_dir) == "done":
            continue
        started = time.monotonic()
        status = continue_split_run(run_dir)
        payload = f"; device payload {_payload_mb(run_dir):.1f} MB" if status.next_command else ""
        print(
            f"{name}: {status.phase} after {time.monotonic() - started:.0f} s "
            f"(round trip {status.round_trip}){payload}"
        )


def report(arguments: argparse.Namespace) -> None:
    print(
        "| model | default ms | tuned ms | speedup [95% interval] | round trips | compile here s "
        "| device s | winner |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, run_dir in _runs(arguments.out).items():
        path = run_dir / "report.json"
        if not path.exists():
            print(f"| {name} | not done ({_phase(run_dir)}) | | | | | | |")
            continue
        data = json.loads(path.read_text())
        figure = (
            f"{data['speedup']:.3f}x [{data['speedup_low']:.3f}, {data['speedup_high']:.3f}]"
            if data["speedup_low"] is not None
            else "no spec kept"
        )
        tuned = f"{data['tuned_ms']:.3f}" if data["tuned_ms"] is not None else "-"
        print(
            f"| {name} | {data['default_ms']:.3f} | {tuned} | {figure} | {data['round_trips']} | "
            f"{data['compile_s']:.0f} | {data['device_s']:.0f} | {data['winner'] or '-'} |"
        )
        for timing in data["timings"]:
            print(
                f"|  | {timing['phase']} ({timing['host']}) {timing['seconds']:.1f} s | | | | | | |"
            )


def pack(arguments: argparse.Namespace) -> None:
    """Copy what the next device steps read into `--dest` (a folder the device tool carries).

    Only `device_step.json` and the files it lists go: the device host needs nothing else. The
    copy keeps the run folders' relative paths and its own runs.json, so `device --out DEST`
    runs there as it would on the whole folders. With `--part-mb`, the files are dealt into
    `DEST/part1`, `DEST/part2`, ... of at most that size each (a file larger than that gets a
    part of its own): one device call carries one part and copies it into a folder that stays
    on the warm machine (`cp -r part1/. stage/`), the last call runs the step on `stage/`.
    """
    import shutil

    packed: dict[str, Path] = {}
    files: list[tuple[Path, Path]] = []
    for name, run_dir in _runs(arguments.out).items():
        if _phase(run_dir) != "awaiting-device":
            continue
        manifest_path = run_dir / "device_step.json"
        for relative in ["device_step.json", *json.loads(manifest_path.read_text())["files"]]:
            files.append((run_dir / relative, Path(run_dir.name) / relative))
        packed[name] = Path(run_dir.name)
    limit = arguments.part_mb * 1e6 if arguments.part_mb else math.inf
    parts: list[list[tuple[Path, Path]]] = [[]]
    used = 0.0
    for source, relative in sorted(files, key=lambda f: -f[0].stat().st_size):
        size = source.stat().st_size
        if parts[-1] and used + size > limit:
            parts.append([])
            used = 0.0
        parts[-1].append((source, relative))
        used += size
    for index, part in enumerate(parts, start=1):
        folder = arguments.dest / f"part{index}" if len(parts) > 1 else arguments.dest
        for source, relative in part:
            (folder / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, folder / relative)
        _save_runs(folder, packed)
        size = sum(source.stat().st_size for source, _ in part)
        print(f"{folder}: {len(part)} files, {size / 1e6:.1f} MB")
    print(f"packed {len(packed)} run(s) into {len(parts)} part(s) under {arguments.dest}")


# What a device step writes that the compile host reads back (small JSON and model outputs).
RESULT_PATTERNS = ("device/results_*.json", "device/step_*/*/*_outputs.npz",
                   "device/step_*/*_outputs.npz", "tuning/*/benchmark_results.json")  # fmt: skip


def collect(arguments: argparse.Namespace) -> None:
    """On the device host: put everything the device steps wrote into one tar archive."""
    import tarfile

    with tarfile.open(arguments.archive, "w:gz") as archive:
        for run_dir in _runs(arguments.out).values():
            base = arguments.out / run_dir
            for pattern in RESULT_PATTERNS:
                for path in sorted(base.glob(pattern)):
                    archive.add(path, arcname=str(Path(run_dir.name) / path.relative_to(base)))
    print(f"wrote {arguments.archive} ({arguments.archive.stat().st_size / 1e6:.1f} MB)")


def unpack(arguments: argparse.Namespace) -> None:
    """Here: extract a `collect` archive into the run folders (by their names)."""
    import tarfile

    parents = {run_dir.name: run_dir.parent for run_dir in _runs(arguments.out).values()}
    with tarfile.open(arguments.archive) as archive:
        for member in archive.getmembers():
            name = Path(member.name).parts[0]
            if name not in parents or not member.isfile():
                raise SystemExit(f"{member.name}: not a file of a known run folder")
            archive.extract(member, parents[name], filter="data")
    print(f"unpacked {arguments.archive}")


def local(arguments: argparse.Namespace) -> None:
    """Run every phase here; each device step in a subprocess, as a GPU host would run it."""
    prepare(arguments)
    for _ in range(4):
        pending = {n: r for n, r in _runs(arguments.out).items() if _phase(r) != "done"}
        if not pending:
            break
        for name, run_dir in pending.items():
            if _phase(run_dir) == "awaiting-device":
                command = [sys.executable, "-m", "ireetune.cli", "measure", str(run_dir)]
                if arguments.devices:
                    command += ["--devices", arguments.devices]
                started = time.monotonic()
                subprocess.run(command, check=True, env=dict(os.environ))
                print(f"{name}: device step in {time.monotonic() - started:.0f} s")
        continue_runs(arguments)
    report(arguments)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "phase",
        choices=["prepare", "device", "continue", "report", "local", "pack", "collect", "unpack"],
    )
    parser.add_argument("--dest", type=Path, help="pack: the folder to copy the payload into")
    parser.add_argument("--archive", type=Path, help="collect/unpack: the results archive")
    parser.add_argument(
        "--part-mb", type=float, default=0.0, help="pack: split the payload into parts of this size"
    )
    parser.add_argument("--out", type=Path, required=True, help="folder of models and runs")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated models")
    parser.add_argument("--target", default="cuda:sm_80", help="what to compile for")
    parser.add_argument("--devices", default="", help="runtime devices (default: the target's)")
    parser.add_argument("--layers", type=int, default=4, help="decoder blocks of the GPT-2 stack")
    parser.add_argument("--num-candidates", type=int, default=16, help="candidates per dispatch")
    parser.add_argument("--max-dispatches", type=int, default=6, help="dispatch problems tuned")
    parser.add_argument(
        "--candidates-per-dispatch", type=int, default=2, help="candidates per dispatch as variants"
    )
    parser.add_argument("--rounds", type=int, default=5, help="model timing rounds")
    arguments = parser.parse_args()
    arguments.out.mkdir(parents=True, exist_ok=True)
    if arguments.phase in ("prepare", "local") and not arguments.devices:
        from ireetune.targets import parse_target

        arguments.devices = parse_target(arguments.target).runtime_device
    {"prepare": prepare, "device": device, "continue": continue_runs, "report": report,
     "local": local, "pack": pack, "collect": collect, "unpack": unpack}[arguments.phase](arguments)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
