"""Measure how much of a model's dispatch time ireetune can tune on a target, by op family.

Compiles the model once with per-dispatch benchmark dumps, times each dispatch benchmark (median
of 3, in-process), multiplies by its launch count, and classifies each dispatch by the family of
its root op and whether the target has a space for it (`Target.refusal`). Prints a table and a
JSON line for docs/benchmarks.md. CPU dispatch benchmarks run on uninitialised buffers, so the
shares are indicative, not exact.

    python bench/tunable_share.py /tmp/resnet50_real/light_resnet50_real.mlir --target cpu
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import platform
import statistics
import tempfile
from pathlib import Path

from iree.compiler import ir

from ireetune.benchmark.runner import BenchmarkJob, BenchmarkSession, BenchmarkStatus
from ireetune.compile.driver import CompileStatus, build_request
from ireetune.compile.pool import CompileBatch, CompileJob
from ireetune.core.errors import IreetuneError
from ireetune.core.target import target_refusal
from ireetune.executor import LocalExecutor
from ireetune.frontend.dispatches import (
    CONFIGURED_PROGRAM,
    dump_dispatches,
    parse_module,
    read_mlir_file,
)
from ireetune.model.hot import count_dispatch_invocations
from ireetune.problem.root_op import find_root_op, parse_problem
from ireetune.targets import parse_target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--target", default="cpu")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    target = parse_target(args.target)
    with tempfile.TemporaryDirectory(prefix="ireetune_share_") as scratch:
        folder = Path(scratch)
        dumped = dump_dispatches(args.model, target, folder / "dispatches", timeout_s=1800)
        counts = count_dispatch_invocations(folder / "dispatches" / CONFIGURED_PROGRAM)
        jobs = [
            CompileJob(
                candidate_id=d.index,
                request=build_request(
                    target,
                    d.path,
                    folder / f"{d.index}.vmfb",
                    phase_flags=("--compile-from=executable-sources",),
                    reproducer_path=folder / f"{d.index}_reproducer.mlir",
                ),
                log_path=folder / f"{d.index}.log",
            )
            for d in dumped
        ]
        compiled = {
            o.candidate_id
            for o in LocalExecutor().compile(CompileBatch(jobs, args.jobs, 600))
            if o.status is CompileStatus.COMPILED
        }
        times: dict[int, float] = {}
        session = BenchmarkSession(
            [BenchmarkJob(i, folder / f"{i}.vmfb") for i in sorted(compiled)],
            target.runtime_device,
            repetitions=3,
            batch=0,
            timeout_s=300,
            min_repetition_s=0.02,
        )
        for outcome in LocalExecutor().run_benchmarks(session):
            if outcome.status is BenchmarkStatus.MEASURED:
                times[outcome.candidate_id] = statistics.median(outcome.times_ms)
        rows = []
        for dispatch in dumped:
            context = ir.Context()
            module = parse_module(read_mlir_file(dispatch.path), context, dispatch.path)
            try:
                with context:
                    problem = parse_problem(find_root_op(module))
                family, label = problem.family, problem.signature
                refusal = target_refusal(target, problem)
            except IreetuneError as error:
                family, label, refusal = "none", dispatch.name, str(error)
            total_ms = times.get(dispatch.index, 0.0) * counts.get(dispatch.name, 1)
            rows.append((dispatch.name, family, label, refusal, total_ms))
    total = sum(row[4] for row in rows) or 1.0
    by_family: dict[str, float] = collections.defaultdict(float)
    tunable = 0.0
    for _name, family, label, refusal, ms in sorted(rows, key=lambda r: -r[4]):
        by_family[family] += ms
        tunable += ms if refusal is None else 0.0
        status = "tunable" if refusal is None else f"NOT: {refusal[:70]}"
        print(f"{ms / total:6.1%}  {family:18s} {label[:60]:60s} {status}")
    summary = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="minutes"),
        "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores",
        "load_average": os.getloadavg()[0],
        "model": args.model.name,
        "target": target.name,
        "dispatches": len(rows),
        "tunable_share": tunable / total,
        "family_share": {family: ms / total for family, ms in sorted(by_family.items())},
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
