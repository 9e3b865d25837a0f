"""The GPU, verified in one device call: compile here, measure there once, decide here.

    python bench/gpu_check.py prepare --target cuda:sm_80 --out DIR [--candidates 64]
    # carry DIR to the GPU host (it needs only Python and numpy: the wheels travel in DIR)
    python DIR/gpu_check.py device DIR [--deadline 480] [--archive PATH]
    # carry the archive back
    python bench/gpu_check.py report DIR [ARCHIVE]

`prepare` does every compile: the dispatch suite (three f16 transposed-B matmuls, one of them
from docs/benchmarks.md's H100 table, a batch matmul and an attention), each with its candidates
in ireetune's order and every candidate's reference program (`tune-dispatch --stop-after compile
--references all`), and a whole model (`ireetune tune MODEL --stop-after compile`) whose one
device step also carries the model variants its static ranking predicts. DIR holds only what the
device reads (at most 50 MiB with the wheels); the compile side's folders stay in `DIR.work`.

`device` runs, within its deadline and in this order: the default of every dispatch, the first
candidates of each, the model, then every candidate of each. Each is the product's own command
in a process of its own (`python -m ireetune.cli measure`): the
benchmark worker, the campaign, the output checks and the model timing. A unit the deadline
reaches is stopped; after every unit the archive is written again, so a call cut short still
brings back what it measured. The verb imports neither the IREE compiler nor onnx.

`report` folds the archive into each run with the product's decide stage (`finish` for every
dispatch folder, `continue` for the model) and prints one Markdown table.

With `--target cpu` (local-task) or `--target vulkan` (e.g. Mesa's lavapipe) the same three verbs
run on stand-ins with tiny shapes; tests/bench/test_gpu_check.py runs them end to end. docs/gpu.md
("One GPU call") gives the commands for a 15-minute GPU slot.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPOSITORY = Path(__file__).resolve().parents[1]
PLAN_NAME = "plan.json"
LOG_NAME = "device_log.json"
ARCHIVE_NAME = "results.tar.gz"
MAX_PAYLOAD_BYTES = 50 * 2**20
MAX_ARCHIVE_BYTES = 10 * 2**20
PAYLOAD_NAME = "payload.tar.xz"
# Seconds kept back from the deadline to write the archive, and the least a unit is started with.
ARCHIVE_MARGIN_S = 5.0
MIN_UNIT_S = 3.0
# The order the device measures in: what is most worth having first.
STAGES = ("defaults", "first", "all")
# The runtime wheel and the pure-Python packages (and their compiled cores) the device step
# imports besides numpy; versions pinned to this host's (docs/gpu.md).
RUNTIME_WHEELS = (
    "iree-base-runtime", "ml_dtypes", "pydantic", "pydantic-core", "annotated-types",
    "typing-extensions", "typing-inspection",
)  # fmt: skip


# --- The suite (compile host) -----------------------------------------------------------------


@dataclass(frozen=True)
class SuiteProblem:
    """One dispatch of the suite: its name, op family and one-op model."""

    name: str
    family: str
    model: str


def _fill(shape: str, element: str) -> str:
    return (
        f"  %zero = arith.constant 0.0 : {element}\n"
        f"  %empty = tensor.empty() : tensor<{shape}x{element}>\n"
        f"  %init = linalg.fill ins(%zero : {element}) outs(%empty : tensor<{shape}x{element}>) "
        f"-> tensor<{shape}x{element}>\n"
    )


def mmt(m: int, n: int, k: int, operand: str, result: str) -> SuiteProblem:
    """A transposed-B matmul (`linalg.matmul` with indexing maps: IREE 3.13 has no
    matmul_transpose_b)."""
    model = (
        f"func.func @main(%lhs: tensor<{m}x{k}x{operand}>, %rhs: tensor<{n}x{k}x{operand}>) "
        f"-> tensor<{m}x{n}x{result}> {{\n"
        + _fill(f"{m}x{n}", result)
        + "  %r = linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>,\n"
        "      affine_map<(d0, d1, d2) -> (d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1)>]\n"
        f"      ins(%lhs, %rhs : tensor<{m}x{k}x{operand}>, tensor<{n}x{k}x{operand}>)\n"
        f"      outs(%init : tensor<{m}x{n}x{result}>) -> tensor<{m}x{n}x{result}>\n"
        f"  return %r : tensor<{m}x{n}x{result}>\n}}\n"
    )
    return SuiteProblem(f"mmt_{m}x{n}x{k}_{operand}", "matmul", model)


def batch_matmul(b: int, m: int, n: int, k: int, operand: str, result: str) -> SuiteProblem:
    """A batch matmul."""
    model = (
        f"func.func @main(%lhs: tensor<{b}x{m}x{k}x{operand}>, %rhs: tensor<{b}x{k}x{n}x{operand}>) "
        f"-> tensor<{b}x{m}x{n}x{result}> {{\n"
        + _fill(f"{b}x{m}x{n}", result)
        + f"  %r = linalg.batch_matmul ins(%lhs, %rhs : tensor<{b}x{m}x{k}x{operand}>, "
        f"tensor<{b}x{k}x{n}x{operand}>)\n"
        f"      outs(%init : tensor<{b}x{m}x{n}x{result}>) -> tensor<{b}x{m}x{n}x{result}>\n"
        f"  return %r : tensor<{b}x{m}x{n}x{result}>\n}}\n"
    )
    return SuiteProblem(f"bmm_{b}x{m}x{n}x{k}_{operand}", "batch matmul", model)


def attention(batch: int, queries: int, keys: int, head: int) -> SuiteProblem:
    """An f16 attention (`iree_linalg_ext.attention`, scale 1/sqrt(head))."""
    q, kv, o = (
        f"{batch}x{queries}x{head}xf16",
        f"{batch}x{keys}x{head}xf16",
        f"{batch}x{queries}x{head}xf16",
    )
    model = f"""
#q = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>
#k = affine_map<(d0, d1, d2, d3, d4) -> (d0, d3, d2)>
#v = affine_map<(d0, d1, d2, d3, d4) -> (d0, d3, d4)>
#s = affine_map<(d0, d1, d2, d3, d4) -> ()>
#o = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d4)>
func.func @main(%q: tensor<{q}>, %k: tensor<{kv}>, %v: tensor<{kv}>) -> tensor<{o}> {{
  %scale = arith.constant {head**-0.5} : f16
  %empty = tensor.empty() : tensor<{o}>
  %r = iree_linalg_ext.attention <{{indexing_maps = [#q, #k, #v, #s, #o]}}>
      ins(%q, %k, %v, %scale : tensor<{q}>, tensor<{kv}>, tensor<{kv}>, f16)
      outs(%empty : tensor<{o}>) {{
    ^bb0(%score: f32):
      iree_linalg_ext.yield %score : f32
  }} -> tensor<{o}>
  return %r : tensor<{o}>
}}
"""  # fmt: skip
    return SuiteProblem(f"attention_{batch}x{queries}x{keys}x{head}_f16", "attention", model)


# The GPU suite: sub-millisecond to about a millisecond on an H100 (docs/benchmarks.md's table
# holds the first and third matmuls: 0.255 ms and 0.144 ms with IREE's default).
GPU_SUITE = (
    mmt(2048, 1280, 5120, "f16", "f32"),
    mmt(512, 4096, 4096, "f16", "f32"),
    mmt(1024, 8192, 1024, "f16", "f32"),
    batch_matmul(16, 1024, 1024, 128, "f16", "f32"),
    attention(8, 1024, 1024, 64),
)
# The stand-ins: the same families with shapes that compile and run in well under a second.
STAND_IN_SUITE = (
    mmt(64, 64, 128, "f32", "f32"),
    mmt(32, 128, 64, "f32", "f32"),
    mmt(128, 32, 64, "f32", "f32"),
    batch_matmul(2, 32, 32, 64, "f32", "f32"),
)
STAND_IN_SKIPPED = (
    ("attention", "not run on this stand-in: ireetune tunes attention for CUDA and ROCm only"),
)
# The whole model's dispatches get fewer candidates than the suite's: they travel twice (the
# dispatch folders and the variants).
GPU_MODEL = REPOSITORY / "examples" / "transformer_block.mlir"


def is_gpu_target(target: str) -> bool:
    return target.split(":")[0].lower() in ("cuda", "rocm", "hip")


@dataclass(frozen=True)
class TimingChoice:
    """How the device step times a dispatch (written into every folder's manifest).

    On a GPU the benchmark worker times a batch of dispatches per call, in process; the first
    pass times a quarter of that batch (`--screen-fraction`, the product's GPU default) and the
    leaders are confirmed on the full batch. With 3 repetitions of at least 20 ms (5 ms in the
    first pass), a sub-millisecond candidate costs about 15-30 ms of timing plus its load, which
    the prewarm processes (the product's default on GPUs) take off the clock: room for 5 or more
    candidates a second.
    """

    repetitions: int
    min_repetition_s: float
    confirm_rounds: int


GPU_TIMING = TimingChoice(repetitions=3, min_repetition_s=0.02, confirm_rounds=5)
STAND_IN_TIMING = TimingChoice(repetitions=2, min_repetition_s=0.002, confirm_rounds=2)


# --- prepare (compile host) --------------------------------------------------------------------


def work_folder(out: Path) -> Path:
    """Return the compile side's folder beside the payload (it never travels)."""
    return out.parent / f"{out.name}.work"


def dump_benchmark(problem: SuiteProblem, target: str, folder: Path) -> Path:
    """Compile the problem's model for the target, dumping its one dispatch benchmark."""
    from ireetune.core.tools import find_tool
    from ireetune.targets import parse_target

    folder.mkdir(parents=True, exist_ok=True)
    model = folder / "model.mlir"
    model.write_text(problem.model)
    dumps = folder / "dumps"
    subprocess.run(
        [find_tool("iree-compile"), str(model), *parse_target(target).compile_flags(),
         f"--iree-hal-dump-executable-benchmarks-to={dumps}", "--iree-codegen-add-tuner-attributes",
         "-o", str(folder / "model.vmfb")],
        check=True, capture_output=True,
    )  # fmt: skip
    (path,) = sorted(dumps.glob("*_benchmark.mlir"))
    return path


def write_stage_folders(run_dir: Path, dispatch_dir: Path, first: int) -> dict[str, str]:
    """Copy a compiled run folder into its three stages, each a benchmark folder of its own:
    the default alone, the first `first` candidates (in ireetune's order), every candidate."""
    from dataclasses import replace

    from ireetune.flows.handoff.manifest import read_manifest, write_manifest

    manifest = read_manifest(run_dir)
    kept = {"defaults": (), "first": manifest.candidates[:first], "all": manifest.candidates}
    stages = {}
    for stage in STAGES:
        stage_dir = dispatch_dir / stage
        shutil.copytree(run_dir, stage_dir)
        if stage != "all":
            write_manifest(stage_dir, replace(manifest, candidates=kept[stage]))
        stages[stage] = stage_dir.name
    return stages


def folder_files(folder: Path) -> list[str]:
    """Return the folder-relative files a benchmark folder's device side reads."""
    from ireetune.flows.handoff.manifest import MANIFEST_NAME, read_manifest

    manifest = read_manifest(folder)
    files = [MANIFEST_NAME]
    for entry in (manifest.baseline, *manifest.candidates):
        files += [path for path in (entry.vmfb, entry.reference_vmfb) if path]
    return files


def candidate_bytes(folder: Path) -> tuple[int, int]:
    """Return how many candidates a benchmark folder holds and their bytes (binary and
    reference program)."""
    from ireetune.flows.handoff.manifest import read_manifest

    manifest = read_manifest(folder)
    size = sum(
        (folder / path).stat().st_size
        for entry in manifest.candidates
        for path in (entry.vmfb, entry.reference_vmfb)
        if path
    )
    return len(manifest.candidates), size


def prepare_dispatches(
    arguments: argparse.Namespace, work: Path, problems: tuple[SuiteProblem, ...]
) -> list[dict[str, Any]]:
    """Compile each suite problem's candidates and stage folders."""
    from ireetune.flows.dispatch.options import References, StopAfter, TuneOptions
    from ireetune.flows.dispatch.tuner import tune_dispatch

    timing = GPU_TIMING if is_gpu_target(arguments.target) else STAND_IN_TIMING
    entries = []
    for problem in problems:
        started = time.monotonic()
        dispatch_dir = work / "dispatches" / problem.name
        benchmark = dump_benchmark(problem, arguments.target, dispatch_dir / "source")
        result = tune_dispatch(
            TuneOptions(
                input_path=benchmark, target=arguments.target, num_candidates=arguments.candidates,
                output_dir=dispatch_dir / "compile", devices=tuple(arguments.devices),
                repetitions=timing.repetitions, min_repetition_s=timing.min_repetition_s,
                confirm_rounds=timing.confirm_rounds, stop_after=StopAfter.COMPILE,
                references=References.ALL, use_database=False, show_progress=False,
                jobs=arguments.jobs,
            )
        )  # fmt: skip
        compiled, _ = candidate_bytes(result.run_dir)
        first = max(1, compiled // 8)
        stages = write_stage_folders(result.run_dir, dispatch_dir, first)
        counted, size = candidate_bytes(dispatch_dir / "all")
        entries.append({
            "name": problem.name, "family": problem.family,
            "stages": {stage: f"dispatches/{problem.name}/{folder}" for stage, folder in stages.items()},
            "asked": arguments.candidates, "compiled": compiled, "first": first,
            "compile_success_rate": result.compile_success_rate,
            "bytes_per_candidate": size / counted if counted else 0.0,
            "compile_s": time.monotonic() - started,
        })  # fmt: skip
        print(
            f"{problem.name}: {compiled} of {arguments.candidates} candidates compiled in "
            f"{entries[-1]['compile_s']:.0f} s",
            flush=True,
        )
    return entries


def add_predicted_variants(run_dir: Path, per_dispatch: int, jobs: int) -> list[str]:
    """Compile the model variants the static ranking predicts and add them to the first device
    step, so that the model is decided without a second trip.

    The split flow builds its variants from each hot dispatch's measured, verified winner and
    runners-up, which costs a second round trip. Here the candidates come from ireetune's own
    order instead: each dispatch folder's first `per_dispatch` compiled candidates, alone and
    (the first of each) together. The device step then profiles the model, measures the
    dispatch folders and times these variants in one call; `continue` decides among them.
    """
    from ireetune.compile.pool import default_jobs
    from ireetune.executor.base import LocalExecutor
    from ireetune.flows.handoff.finish import read_run_record
    from ireetune.flows.handoff.manifest import read_manifest
    from ireetune.flows.handoff.model_folder import (
        VariantTask,
        read_device_manifest,
    )
    from ireetune.flows.model.phases import model_of
    from ireetune.flows.model.split import compile_variant_rows
    from ireetune.flows.model.split_device import send_to_device
    from ireetune.flows.model.state import read_run_file
    from ireetune.flows.model.state_restore import restore_split_run, save_run
    from ireetune.model.select import MODEL_RULE
    from ireetune.model.variants import plan_variants

    stored = read_run_file(run_dir)
    run = restore_split_run(run_dir, stored, LocalExecutor(), stored.run_options())
    options, state = run.options, run.split_state
    names = {d.problem: d.name for d in state.dispatches}
    candidates: list[tuple[str, list[Path]]] = []
    for problem, folder in sorted(state.folders.items()):
        if not folder:
            continue
        listed = [c.candidate_id for c in read_manifest(run_dir / folder).candidates]
        _, records = read_run_record(run_dir / folder)
        specs = [run_dir / folder / records[cid].spec_path for cid in listed[:per_dispatch]]
        if specs:
            candidates.append((names[problem], specs))
    plans = plan_variants(candidates)
    rows, built = compile_variant_rows(
        run.executor, model_of(run), plans, run_dir, state, jobs or default_jobs()
    )
    if not built:
        return []
    first_step = read_device_manifest(run_dir)
    state.variants = rows
    # The same round trip, now with the variants: calls per round from a warm-up of the default
    # (the model's time is not known before the device has run it).
    state.round_trip = first_step.round_trip - 1
    task = VariantTask(
        tuple(built), rounds=options.rounds, calls_per_round=0, confirm_top=3,
        confirm_rounds=max(2 * options.rounds, 10), threshold=MODEL_RULE.threshold,
    )  # fmt: skip
    send_to_device(run, first_step.profile, first_step.folders, task)
    save_run(run)
    return [b.label for b in built]


def write_model_weights(model: Path, folder: Path) -> tuple[str, ...]:
    """Return the model's `--input` specs: the first argument random, every later one (the
    weights) written to a .npy file whose values repeat along its last two dimensions.

    Random weights for examples/transformer_block.mlir are 22 MiB that do not compress; these
    travel as a few kilobytes (the payload is an xz archive) and make outputs that
    compress as well, while every output column within a period of 16 still differs, so the
    output checks still see a misplaced tile. Timing does not depend on the values.
    """
    import numpy as np

    from ireetune.frontend.model_inputs import read_entry_signature
    from ireetune.verify.compare import numpy_dtype

    _, signature = read_entry_signature(model.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    specs = []
    values = np.random.default_rng(0).standard_normal(16)
    for index, spec in enumerate(signature):
        text = "x".join(map(str, (*spec.shape, spec.element_type)))
        if index and len(spec.shape) >= 2:
            rows, columns = np.indices(spec.shape[-2:])
            weights = values[(rows + columns) % 16] / np.sqrt(spec.shape[-2])
            path = folder / f"arg{index}.npy"
            np.save(
                path, np.broadcast_to(weights, spec.shape).astype(numpy_dtype(spec.element_type))
            )
            text += f"=@{path}"
        specs.append(text)
    return tuple(specs)


def prepare_model(arguments: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Prepare the whole model's split run with its predicted variants in the first step."""
    from ireetune.flows.handoff.manifest import read_manifest
    from ireetune.flows.model.state import read_run_file
    from ireetune.flows.model.tuner import ModelTuneOptions, prepare_split_run

    started = time.monotonic()
    status = prepare_split_run(
        ModelTuneOptions(
            model_path=arguments.model, target=arguments.target, devices=tuple(arguments.devices),
            inputs=write_model_weights(arguments.model, work / "weights"),
            num_candidates=arguments.model_candidates, max_dispatches=arguments.max_dispatches,
            candidates_per_dispatch=arguments.variants_per_dispatch, rounds=arguments.rounds,
            output_dir=work / "model", use_database=False, show_progress=False,
            search_flags=False, jobs=arguments.jobs,
        )
    )  # fmt: skip
    run_dir = status.run_dir
    labels = add_predicted_variants(run_dir, arguments.variants_per_dispatch, arguments.jobs)
    state = read_run_file(run_dir).split
    assert state is not None, "prepare_split_run starts a split run"
    predicted = {
        folder: [c.candidate_id for c in read_manifest(run_dir / folder).candidates][
            : arguments.variants_per_dispatch
        ]
        for folder in state.folders.values()
        if folder
    }
    counted = [candidate_bytes(run_dir / folder) for folder in predicted]
    count = sum(c for c, _ in counted)
    print(f"model: {len(predicted)} dispatch folders, {len(labels)} variants", flush=True)
    return {
        "source": str(arguments.model), "run": f"model/{run_dir.name}", "variants": labels,
        "predicted": predicted, "compile_s": time.monotonic() - started,
        "candidates": max((c for c, _ in counted), default=0),
        "bytes_per_candidate": sum(b for _, b in counted) / count if count else 0.0,
    }  # fmt: skip


def download_wheels(destination: Path, python_version: str) -> None:
    """Download the runtime wheel and the pure-Python wheels for the device's Python, pinned to
    the versions this host runs (docs/gpu.md)."""
    from importlib.metadata import version

    pins = [f"{name}=={version(name)}" for name in RUNTIME_WHEELS]
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
         "--python-version", python_version, "--implementation", "cp",
         "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
         "--platform", "manylinux2014_x86_64", "-d", str(destination), *pins],
        check=True,
    )  # fmt: skip


def write_payload(work: Path, out: Path, plan: dict[str, Any]) -> None:
    """Write into `out` exactly what the device reads, as one xz archive (`PAYLOAD_NAME`): the
    stage folders' and the model step's listed files and the package; beside it this script.

    CUDA binaries are mostly PTX text and shrink about five times; xz's window also stores the
    `first` stage's copies of a dispatch's candidates once.
    """
    files: list[str] = []
    for entry in plan["dispatches"]:
        for folder in entry["stages"].values():
            files += [f"{folder}/{name}" for name in folder_files(work / folder)]
    if plan["model"]:
        run = plan["model"]["run"]
        manifest = json.loads((work / run / "device_step.json").read_text())
        files += [f"{run}/device_step.json", *(f"{run}/{name}" for name in manifest["files"])]
    package = REPOSITORY / "ireetune"
    with tarfile.open(out / PAYLOAD_NAME, "w:xz") as tar:
        for relative in dict.fromkeys(files):
            tar.add(work / relative, arcname=relative)
        for path in sorted(package.rglob("*.py")):
            tar.add(path, arcname=str(Path("lib") / path.relative_to(package.parent)))
    shutil.copyfile(Path(__file__), out / "gpu_check.py")


def unpack_payload(folder: Path) -> str:
    """Extract the payload archive into the folder (once)."""
    if (folder / "lib").exists():
        return "extracted before"
    with tarfile.open(folder / PAYLOAD_NAME, "r:xz") as tar:
        tar.extractall(folder, filter="data")
    return "extracted"


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def prepare(arguments: argparse.Namespace) -> int:
    from ireetune.targets import parse_target

    out: Path = arguments.out.resolve()
    work = work_folder(out)
    if (out.exists() and any(out.iterdir())) or work.exists():
        raise SystemExit(f"gpu_check: error: {out} or {work} exists; choose a new --out")
    target = parse_target(arguments.target)
    arguments.devices = (
        arguments.devices.split(",") if arguments.devices else [target.runtime_device]
    )
    gpu = is_gpu_target(arguments.target)
    arguments.model = arguments.model or GPU_MODEL
    if arguments.model_candidates is None:
        arguments.model_candidates = max(1, arguments.candidates // 4)
    started = time.monotonic()
    problems = GPU_SUITE if gpu else STAND_IN_SUITE
    if arguments.only:
        names = arguments.only.split(",")
        unknown = sorted(set(names) - {problem.name for problem in problems})
        if unknown:
            raise SystemExit(
                f"gpu_check: error: --only names no suite dispatch: {', '.join(unknown)}"
            )
        problems = tuple(problem for problem in problems if problem.name in names)
    work.mkdir(parents=True)
    skipped = () if gpu else STAND_IN_SKIPPED
    plan: dict[str, Any] = {
        "format": "ireetune-gpu-check/1", "target": arguments.target, "devices": arguments.devices,
        "timing": vars(GPU_TIMING if gpu else STAND_IN_TIMING),
        "dispatches": prepare_dispatches(arguments, work, problems),
        "skipped": [{"family": family, "reason": reason} for family, reason in skipped],
        "model": prepare_model(arguments, work) if arguments.model != Path("none") else None,
    }  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    write_payload(work, out, plan)
    if arguments.wheels == "download":
        download_wheels(out / "wheels", arguments.python_version)
    elif arguments.wheels != "none":
        shutil.copytree(Path(arguments.wheels), out / "wheels")
    plan["wheel_bytes"] = folder_bytes(out / "wheels") if (out / "wheels").exists() else 0
    plan["prepare_s"] = time.monotonic() - started
    for folder in (out, work):
        (folder / PLAN_NAME).write_text(json.dumps(plan, indent=2) + "\n")
    size = folder_bytes(out)
    plan["payload_bytes"] = size
    (work / PLAN_NAME).write_text(json.dumps(plan, indent=2) + "\n")
    print(f"{out}: {size / 2**20:.1f} MiB (wheels {plan['wheel_bytes'] / 2**20:.1f} MiB), "
          f"prepared in {plan['prepare_s']:.0f} s")  # fmt: skip
    if size > MAX_PAYLOAD_BYTES:
        print(f"gpu_check: warning: the payload is over {MAX_PAYLOAD_BYTES / 2**20:.0f} MiB")
    print(f"next: carry {out}; there: python {out.name}/gpu_check.py device {out.name}")
    return 0


# --- device (GPU host: Python, numpy and the folder's wheels only) -----------------------------


def runtime_path(folder: Path) -> list[str]:
    """Return the folders the device side imports from: the package, then the wheels'."""
    return [str(folder / "lib"), str(folder / "site")]


def install_wheels(folder: Path) -> str:
    """Install the folder's wheels into `folder/site` unless the runtime already imports."""
    probe = [sys.executable, "-c", "import iree.runtime, pydantic, numpy"]
    environment = runtime_environment(folder)
    if subprocess.run(probe, env=environment, capture_output=True, check=False).returncode == 0:
        return "the runtime imports already"
    wheels = sorted((folder / "wheels").glob("*.whl"))
    if not wheels:
        raise SystemExit(
            "gpu_check: error: the runtime does not import and the folder has no wheels"
        )
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--quiet",
         "--target", str(folder / "site"), *map(str, wheels)],
        check=True,
    )  # fmt: skip
    return f"installed {len(wheels)} wheels"


def runtime_environment(folder: Path) -> dict[str, str]:
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*runtime_path(folder), *inherited])}


@dataclass(frozen=True)
class Unit:
    """One thing the device runs: a product command on one folder."""

    kind: str  # defaults, first, model, all
    name: str
    folder: str


def device_units(plan: dict[str, Any]) -> list[Unit]:
    """Return the units in the order they are worth having: every default, the first
    candidates of each dispatch, the model, then every candidate of each."""
    units = [Unit("defaults", d["name"], d["stages"]["defaults"]) for d in plan["dispatches"]]
    units += [Unit("first", d["name"], d["stages"]["first"]) for d in plan["dispatches"]]
    if plan["model"]:
        units.append(Unit("model", "model", plan["model"]["run"]))
    units += [Unit("all", d["name"], d["stages"]["all"]) for d in plan["dispatches"]]
    return units


def run_unit(
    unit: Unit, folder: Path, devices: list[str], seconds: float, environment: dict[str, str]
) -> dict[str, Any]:
    """Run the product's command for one unit; stop its whole process group at `seconds`."""
    command = [sys.executable, "-m", "ireetune.cli", "measure", str(folder / unit.folder),
               "--devices", ",".join(devices)]  # fmt: skip
    started = time.monotonic()
    process = subprocess.Popen(
        command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        output, _ = process.communicate(timeout=seconds)
        status = "done" if process.returncode == 0 else f"failed (exit {process.returncode})"
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        status = "cut by the deadline"
    sys.stdout.write(output)
    sys.stdout.flush()
    return {
        "kind": unit.kind, "name": unit.name, "folder": unit.folder, "status": status,
        "seconds": time.monotonic() - started, "allowed_s": seconds, "output_tail": output[-2000:],
    }  # fmt: skip


def result_files(folder: Path, plan: dict[str, Any]) -> list[Path]:
    """Return what the device wrote that the compile side reads back."""
    found = [folder / LOG_NAME]
    for entry in plan["dispatches"]:
        found += [folder / f"{stage}/benchmark_results.json" for stage in entry["stages"].values()]
    if plan["model"]:
        device_dir = folder / plan["model"]["run"] / "device"
        found += sorted(device_dir.rglob("*.json")) + sorted(device_dir.rglob("*.npz"))
    return [path for path in found if path.is_file()]


def write_archive(folder: Path, plan: dict[str, Any], archive: Path) -> int:
    """Write every result so far into the archive (atomically); return its size."""
    partial = archive.with_name(archive.name + ".partial")
    with tarfile.open(partial, "w:gz") as tar:
        for path in result_files(folder, plan):
            tar.add(path, arcname=str(path.relative_to(folder)))
    partial.replace(archive)
    return archive.stat().st_size


def device(arguments: argparse.Namespace) -> int:
    started = time.monotonic()
    folder: Path = arguments.dir.resolve()
    archive: Path = (arguments.archive or folder / ARCHIVE_NAME).resolve()
    plan = json.loads((folder / PLAN_NAME).read_text())
    devices = arguments.devices.split(",") if arguments.devices else plan["devices"]
    log: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "devices": devices,
        "deadline_s": arguments.deadline, "python": sys.version.split()[0], "seconds": {},
        "units": [],
    }  # fmt: skip

    def save() -> None:
        log["seconds"]["total"] = time.monotonic() - started
        (folder / LOG_NAME).write_text(json.dumps(log, indent=2) + "\n")
        log["archive_bytes"] = write_archive(folder, plan, archive)

    mark = time.monotonic()
    log["payload"] = unpack_payload(folder)
    log["install"] = install_wheels(folder)
    log["seconds"]["install"] = time.monotonic() - mark
    environment = runtime_environment(folder)
    mark = time.monotonic()
    opened = subprocess.run(
        [sys.executable, "-c", "import sys, iree.runtime as rt\n"
         "for uri in sys.argv[1:]: print(uri, rt.get_device(uri))", *devices],
        env=environment, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    log["seconds"]["open"] = time.monotonic() - mark
    log["device_open"] = (opened.stdout + opened.stderr).strip()[-2000:]
    if opened.returncode != 0:
        save()
        sys.stderr.write(f"gpu_check: error: the device does not open:\n{log['device_open']}\n")
        return 2
    print(log["device_open"], flush=True)
    for unit in device_units(plan):
        left = arguments.deadline - (time.monotonic() - started) - ARCHIVE_MARGIN_S
        if left < MIN_UNIT_S:
            log["units"].append({"kind": unit.kind, "name": unit.name, "folder": unit.folder,
                                 "status": "not started: the deadline", "seconds": 0.0})  # fmt: skip
            continue
        print(f"== {unit.kind} {unit.name} ({left:.0f} s left)", flush=True)
        log["units"].append(run_unit(unit, folder, devices, left, environment))
        save()
    save()
    print(f"wrote {archive} ({archive.stat().st_size / 2**20:.2f} MiB) in "
          f"{time.monotonic() - started:.0f} s")  # fmt: skip
    if archive.stat().st_size > MAX_ARCHIVE_BYTES:
        print(f"gpu_check: warning: the archive is over {MAX_ARCHIVE_BYTES / 2**20:.0f} MiB")
    return 0


# --- report (compile host) ---------------------------------------------------------------------


def unpack(archive: Path, work: Path, plan: dict[str, Any]) -> None:
    """Extract the device's results into the compile side's folders; refuse any other file."""
    allowed = {LOG_NAME}
    for entry in plan["dispatches"]:
        allowed |= {f"{folder}/benchmark_results.json" for folder in entry["stages"].values()}
    model_device = f"{plan['model']['run']}/device/" if plan["model"] else None
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            inside = member.name in allowed or (
                model_device is not None and member.name.startswith(model_device)
                and ".." not in Path(member.name).parts
            )  # fmt: skip
            if not member.isfile() or not inside:
                raise SystemExit(f"gpu_check: error: {archive}: {member.name} is not a result")
            tar.extract(member, work, filter="data")


def _stage_reached(work: Path, folder: str) -> str:
    """Say how far a stage folder's results go: 'check' (complete), 'measure', or ''."""
    path = work / folder / "benchmark_results.json"
    return str(json.loads(path.read_text()).get("stage", "")) if path.exists() else ""


def dispatch_row(work: Path, entry: dict[str, Any], units: dict[str, dict[str, Any]]) -> str:
    """Decide the furthest complete stage of one dispatch with `finish`; render its row."""
    from ireetune.core.errors import IreetuneError
    from ireetune.flows.handoff.finish import finish_run

    reached = {stage: _stage_reached(work, folder) for stage, folder in entry["stages"].items()}
    complete = [stage for stage in reversed(STAGES) if reached[stage] == "check"]
    compiled = f"{entry['compiled']}/{entry['asked']} ({entry['compile_success_rate']:.0%})"
    missing = [
        f"{stage} ({(units.get(stage + ':' + entry['name']) or {}).get('status', 'not run')})"
        for stage in STAGES
        if reached[stage] != "check"
    ]
    notes = "missing: " + ", ".join(missing) if missing else "complete"
    if not complete:
        return f"| {entry['name']} | {entry['family']} | - | - | not measured | - | - | {compiled} | {notes} |"
    stage = complete[0]
    try:
        result = finish_run(work / entry["stages"][stage])
    except IreetuneError as error:
        return f"| {entry['name']} | {entry['family']} | - | - | not decided: {error} | - | - | {compiled} | {notes} |"
    results = json.loads((work / entry["stages"][stage] / "benchmark_results.json").read_text())
    campaign = results["campaign"]
    measured = sum(1 for c in campaign["candidates"] if c["status"] == "measured")
    listed = {"defaults": 0, "first": entry["first"], "all": entry["compiled"]}[stage]
    rate = (
        f"{measured}/{listed} at {campaign['measured_per_second']:.2f}/s"
        if listed
        else "default only"
    )
    best, estimate = result.best, result.decision.winner_estimate if result.decision else None
    if best is None or estimate is None:
        tuned, speedup, verified = "-", "default kept", "no winner"
    else:
        tuned = f"{best.median_ms:.4f}" if best.median_ms is not None else "-"
        speedup = f"{estimate.describe()} (candidate {best.candidate_id})"
        verified = {True: "yes", False: "no: outputs differ", None: "not compared"}[
            best.outputs_match
        ]
    return (
        f"| {entry['name']} | {entry['family']} | {result.baseline_ms:.4f} | {tuned} | {speedup} "
        f"| {verified} | {rate} | {compiled} | decided on '{stage}'; {notes} |"
    )


def model_row(work: Path, model: dict[str, Any], unit: dict[str, Any] | None) -> str:
    """Continue the model's run (the product's decide stage); render its row."""
    from ireetune.core.errors import IreetuneError
    from ireetune.flows.handoff.finish import finish_run
    from ireetune.flows.model.tuner import continue_split_run

    run_dir = work / model["run"]
    name = Path(model["source"]).name
    status = (unit or {}).get("status", "not run")
    results = run_dir / "device" / "results_1.json"
    if not results.exists() or json.loads(results.read_text()).get("done") is not True:
        done = json.loads(results.read_text()) if results.exists() else {}
        parts = [p for p in ("profile", "variants") if p in done]
        parts += [f"folder {Path(f).name}" for f in done.get("folders", {})]
        return (
            f"| model {name} | model | - | - | not decided | - | - | - | device step {status}; "
            f"measured: {', '.join(parts) or 'nothing'}; missing: the rest |"
        )
    try:
        continue_split_run(run_dir)
    except IreetuneError as error:
        return f"| model {name} | model | - | - | not decided: {error} | - | - | - | {status} |"
    report = json.loads((run_dir / "report.json").read_text())
    # What deciding in one trip cost: were the dispatch-level winners among the predicted?
    hits = []
    for folder, predicted in model["predicted"].items():
        try:
            best = finish_run(run_dir / folder).best
        except IreetuneError:
            continue
        if best is not None:
            hits.append(best.candidate_id in predicted)
    speedup = (
        f"{report['speedup']:.3f}x [{report['speedup_low']:.3f}, {report['speedup_high']:.3f}]"
        if report["speedup_low"] is not None
        else "no spec kept"
    )
    tuned = f"{report['tuned_ms']:.3f}" if report["tuned_ms"] is not None else "-"
    return (
        f"| model {name} | model | {report['default_ms']:.3f} | {tuned} | {speedup} "
        f"| outputs compared | {len(model['variants'])} variants | - | winner "
        f"{report['winner'] or '-'}; dispatch winners among the predicted variants: "
        f"{sum(hits)} of {len(hits)} |"
    )


def report(arguments: argparse.Namespace) -> int:
    out: Path = arguments.dir.resolve()
    work = work_folder(out)
    plan = json.loads((work / PLAN_NAME).read_text())
    archive: Path = arguments.archive or out / ARCHIVE_NAME
    if not archive.exists():
        raise SystemExit(f"gpu_check: error: no results archive at {archive}")
    unpack(archive, work, plan)
    log = json.loads((work / LOG_NAME).read_text())
    units = {f"{u['kind']}:{u['name']}": u for u in log["units"]}
    print(f"GPU check: {plan['target']} on {', '.join(log['devices'])}, {log['date']}\n")
    print("| dispatch | family | default ms | tuned ms | speedup (default / tuned) [95%] "
          "| winner verified | candidates measured | compiled | notes |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for entry in plan["dispatches"]:
        print(dispatch_row(work, entry, units))
    for skipped in plan["skipped"]:
        print(
            f"| {skipped['family']} | {skipped['family']} | - | - | - | - | - | - | {skipped['reason']} |"
        )
    if plan["model"]:
        print(model_row(work, plan["model"], units.get("model:model")))
    spent: dict[str, float] = {"install": log["seconds"]["install"], "open": log["seconds"]["open"]}
    for unit in log["units"]:
        spent[unit["kind"]] = spent.get(unit["kind"], 0.0) + unit["seconds"]
    total = log["seconds"]["total"]
    where = ", ".join(f"{kind} {seconds:.1f} s" for kind, seconds in spent.items())
    print(f"| time | device call | | | {total:.1f} s of {log['deadline_s']:.0f} | | | | {where}; "
          f"archive {log.get('archive_bytes', 0) / 2**20:.2f} MiB |")  # fmt: skip
    print(f"| time | prepare here | | | {plan['prepare_s']:.0f} s | | | | payload "
          f"{plan.get('payload_bytes', 0) / 2**20:.1f} MiB |")  # fmt: skip
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    prepare_parser = verbs.add_parser("prepare", help="compile everything here")
    prepare_parser.add_argument("--target", required=True, help="cuda:sm_80, cpu, vulkan, ...")
    prepare_parser.add_argument("--out", type=Path, required=True, help="the payload folder")
    prepare_parser.add_argument("--candidates", type=int, default=64, help="per dispatch")
    prepare_parser.add_argument("--devices", default="", help="default: the target's device")
    prepare_parser.add_argument("--only", default="", help="comma-separated suite dispatches")
    prepare_parser.add_argument("--model", type=Path, default=None,
                                help="the whole model (default examples/transformer_block.mlir; none: no model)")  # fmt: skip
    prepare_parser.add_argument("--model-candidates", type=int, default=None,
                                help="candidates per model dispatch (default: a quarter of --candidates)")  # fmt: skip
    prepare_parser.add_argument("--max-dispatches", type=int, default=3)
    prepare_parser.add_argument("--variants-per-dispatch", type=int, default=2)
    prepare_parser.add_argument("--rounds", type=int, default=5, help="model timing rounds")
    prepare_parser.add_argument("--wheels", default="download",
                                help="download (default), none, or a folder of wheels to copy")  # fmt: skip
    prepare_parser.add_argument("--python-version", default="3.12", help="the device's Python")
    prepare_parser.add_argument("--jobs", type=int, default=0, help="parallel compiles (0: auto)")
    device_parser = verbs.add_parser("device", help="measure on the device host")
    device_parser.add_argument("dir", type=Path)
    device_parser.add_argument("--deadline", type=float, default=480.0, help="seconds")
    device_parser.add_argument("--archive", type=Path, default=None)
    device_parser.add_argument("--devices", default="", help="default: the plan's")
    report_parser = verbs.add_parser("report", help="decide here and print the table")
    report_parser.add_argument("dir", type=Path)
    report_parser.add_argument("archive", type=Path, nargs="?", default=None)
    arguments = parser.parse_args()
    if arguments.verb == "prepare":
        sys.path.insert(0, str(REPOSITORY))
        return prepare(arguments)
    if arguments.verb == "device":
        sys.path[:0] = runtime_path(arguments.dir.resolve())
        return device(arguments)
    sys.path.insert(0, str(REPOSITORY))
    return report(arguments)


if __name__ == "__main__":
    sys.exit(main())
