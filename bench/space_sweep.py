"""Sweep every tunable dispatch of a model through the tuner's space steps, to find faults.

A held-out model meets dispatches no test holds: a shape, a fusion or a flag set's layout the
spaces were not written against (AlexNet's batch-1 fully connected layers once ended a run in a
ZeroDivisionError, 2026-12-06). This compiles the model once per flag set with its executable
benchmarks dumped, and takes each dispatch with a root op the tuner parses through the steps a
run takes before compiling a candidate:

    prepare    the target's space for the problem (`prepare_space`)
    default    the compiler's own configuration read from the dispatch (`parse_default_knobs`)
    generate   the first `--candidates` candidates of the space
    order      the space's ordering of them
    spec       a tuning spec built for the first three

A dispatch the tuner refuses with its own error (`IreetuneError`, the one line a user reads) is
counted as refused; any other exception is a fault, printed with its stage and its traceback's
last frames. Nothing is compiled or timed beyond the model's compile, so the sweep runs beside
anything. The exit status is 1 when a fault was found.

    python bench/space_sweep.py MODEL.mlir [--target cpu] [--flag-sets default,dt,im2col]
        [--candidates 64] [--work-dir DIR] [--refusals]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from iree.compiler import ir

from ireetune.core.errors import IreetuneError
from ireetune.core.target import SpaceRequest, Target, prepare_space
from ireetune.core.tools import find_tool, path_argument, run_tool
from ireetune.problem.registry import parse_problem
from ireetune.problem.root_op import find_root_op
from ireetune.spec.builder import build_configuration_spec
from ireetune.targets import parse_target

# The global flag sets a model is swept under: each changes which dispatches the model has
# (data tiling turns matmuls into mmt4d, im2col convolutions into matmuls, channels-last adds
# transposes).
FLAG_SETS: dict[str, tuple[str, ...]] = {
    "default": (),
    "dt": ("--iree-opt-data-tiling", "--iree-llvmcpu-enable-ukernels=mmt4d"),
    "gdt": ("--iree-global-opt-data-tiling",),
    "im2col": ("--iree-global-opt-use-im2col-for-convs",),
    "cl": (
        "--iree-preprocessing-pass-pipeline="
        "builtin.module(util.func(iree-preprocessing-convert-conv-to-channels-last))",
    ),
}
# How many of the ordered candidates get a spec built.
SPECS_BUILT = 3


@dataclass
class SweepCounts:
    """What one flag set's sweep found: dispatches through every step, refused, faulty."""

    ok: int = 0
    refused: list[str] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)


def dump_benchmarks(model: Path, target: Target, flags: Sequence[str], folder: Path) -> str:
    """Compile `model` with `flags`, dumping its executable benchmarks into `folder/dumps`;
    return the compiler's error's tail ('' when it compiled; a folder dumped before is kept)."""
    dumps = folder / "dumps"
    if dumps.is_dir():
        return ""
    folder.mkdir(parents=True, exist_ok=True)
    result = run_tool(
        [
            find_tool("iree-compile"), path_argument(model), *target.compile_flags(), *flags,
            f"--iree-hal-dump-executable-benchmarks-to={dumps}",
            "--iree-codegen-add-tuner-attributes", "-o", path_argument(folder / "model.vmfb"),
        ]
    )  # fmt: skip
    (folder / "model.vmfb").unlink(missing_ok=True)
    if result.returncode:
        return result.stderr.strip()[-300:]
    return ""


def sweep_benchmark(
    benchmark: Path, target: Target, candidates: int, counts: SweepCounts, scratch: Path
) -> None:
    """Take one dumped dispatch benchmark through the space steps, counting it in `counts`."""
    context = ir.Context()
    with context:
        module = ir.Module.parse(benchmark.read_text())
        try:
            root = find_root_op(module)
            problem = parse_problem(root)
        except IreetuneError:
            return  # No root op the tuner takes: not a tunable dispatch.
        stage = "prepare"
        try:
            space = prepare_space(target, problem, benchmark, scratch, context)
            stage = "default"
            default = space.parse_default_knobs(problem, root)
            variant = root
            while variant.name != "hal.executable.variant":
                variant = variant.parent
            request = SpaceRequest(problem, variant.attributes["target"], default, 0)
            stage = "generate"
            pool = list(itertools.islice(space.generate(request), candidates))
            stage = "order"
            ordered = space.order(request, pool)
            stage = "spec"
            for knobs, _ in ordered[:SPECS_BUILT]:
                configuration = space.configuration(problem, knobs, context)
                build_configuration_spec(problem, configuration, (), context)
        except IreetuneError as error:
            counts.refused.append(f"{benchmark.name} at {stage}: {error}")
            return
        except Exception as error:  # noqa: BLE001 - a fault of any kind is what the sweep finds.
            frames = "".join(traceback.format_tb(error.__traceback__)[-3:])
            counts.faults.append(
                f"{benchmark.name} {problem.signature} at {stage}: "
                f"{type(error).__name__}: {error}\n{frames}"
            )
            return
        counts.ok += 1


def sweep_model(
    model: Path, target: Target, flags: Sequence[str], candidates: int, folder: Path
) -> SweepCounts | str:
    """Sweep every dispatch of `model` compiled with `flags`; return the counts, or the
    compiler's error when the model does not compile."""
    error = dump_benchmarks(model, target, flags, folder)
    if error:
        return error
    counts = SweepCounts()
    for benchmark in sorted((folder / "dumps").glob("*_benchmark.mlir")):
        with tempfile.TemporaryDirectory() as scratch:
            sweep_benchmark(benchmark, target, candidates, counts, Path(scratch))
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path, help="the model as MLIR (iree-import-onnx's output)")
    parser.add_argument("--target", default="cpu")
    parser.add_argument("--flag-sets", default="default,dt,im2col", help=", ".join(FLAG_SETS))
    parser.add_argument("--candidates", type=int, default=64)
    parser.add_argument("--work-dir", type=Path, default=None)
    parser.add_argument("--refusals", action="store_true", help="print each refusal's reason")
    args = parser.parse_args(argv)
    names = args.flag_sets.split(",")
    unknown = [name for name in names if name not in FLAG_SETS]
    if unknown or not args.model.is_file():
        what = f"unknown flag set(s) {unknown}" if unknown else f"no model at {args.model}"
        print(f"error: {what}", file=sys.stderr)
        return 2
    target = parse_target(args.target)
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="space_sweep_"))
    faults = 0
    for name in names:
        folder = work_dir / f"{args.model.stem}_{args.target.replace(':', '_')}_{name}"
        result = sweep_model(args.model, target, FLAG_SETS[name], args.candidates, folder)
        if isinstance(result, str):
            print(f"{args.model.stem} {args.target} {name}: the model did not compile: {result}")
            continue
        for fault in result.faults:
            print(f"FAULT {args.model.stem} {name} {fault}")
        for refusal in result.refused if args.refusals else ():
            print(f"REFUSED {args.model.stem} {name} {refusal}")
        faults += len(result.faults)
        print(
            f"{args.model.stem} {args.target} {name}: {result.ok} through every step, "
            f"{len(result.refused)} refused, {len(result.faults)} fault(s)",
            flush=True,
        )
    return 1 if faults else 0


if __name__ == "__main__":
    sys.exit(main())
