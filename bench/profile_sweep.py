"""Sweep f16 matmuls over M with default and tuned configurations against the vendor library.

On a GPU host the measurement is the issue 6 benchmark: M in 64..8192 (powers of two), IREE's
default configuration, the first N configurations of the target's search space, and cuBLAS
through torch. Compiling needs the IREE compiler and measuring needs only the runtime, so the two
phases can run on different machines (see docs/profiler.md):

    python bench/profile_sweep.py --target cuda:sm_80 --phase compile --generated-dir sweep
    python bench/profile_sweep.py --phase run --generated-dir sweep --peak-gflops 989000  # on the GPU
    python bench/profile_sweep.py --target cpu --m 64:256:64 --n 128 --k 128 --configs 2  # CPU check

It prints a Markdown table (with the date and device) ready for docs/benchmarks.md and writes
every dispatch's row to `--output` as CSV.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
from pathlib import Path

from ireetune.core.errors import IreetuneError
from ireetune.profiler.configs import parse_config_request
from ireetune.profiler.operations import OperationKind
from ireetune.profiler.pipeline import Phase, ProfileOptions, run_profile
from ireetune.profiler.report import DispatchResult, render_csv
from ireetune.profiler.shapes import SweepRequest, expand_sweep
from ireetune.profiler.vendor import import_torch

DEFAULT_M = ",".join(str(1 << power) for power in range(6, 14))  # 64 .. 8192


def describe_device(target: str) -> str:
    """Name the machine the numbers come from."""
    torch = import_torch()
    if not target.startswith("cpu") and torch is not None and torch.cuda.is_available():
        return str(torch.cuda.get_device_name(0))
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _format_ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def render_markdown(results: tuple[DispatchResult, ...], target: str, device: str) -> str:
    """One row per operation: default, best other configuration, vendor, and the ratios."""
    by_operation: dict[str, list[DispatchResult]] = {}
    for result in results:
        by_operation.setdefault(result.operation, []).append(result)
    lines = [
        f"Measured {datetime.date.today().isoformat()} on {device} (target {target}), dispatch-level median.",
        "",
        "| problem | default ms | best tuned ms (config) | tuned/default | vendor ms | vendor/IREE best |",
        "|---|---|---|---|---|---|",
    ]
    for operation, rows in by_operation.items():
        default = next((r for r in rows if r.configuration == "default"), None)
        tuned = [
            r
            for r in rows
            if r.configuration != "default"
            and r.runtime_ms is not None
            and r.verification != "FAILED"
        ]
        best = min(tuned, key=lambda r: r.runtime_ms or float("inf"), default=None)
        default_ms = default.runtime_ms if default is not None else None
        best_ms = best.runtime_ms if best is not None else None
        speedup = f"{default_ms / best_ms:.2f}x" if default_ms and best_ms else "n/a"
        fastest = min((ms for ms in (default_ms, best_ms) if ms), default=None)
        vendor_ms = rows[0].vendor_ms
        vendor_ratio = (
            f"{vendor_ms / fastest:.2f}x"
            if vendor_ms and fastest
            else f"n/a ({rows[0].vendor_note})"
        )
        best_text = f"{_format_ms(best_ms)} ({best.configuration})" if best is not None else "n/a"
        lines.append(
            f"| {operation} | {_format_ms(default_ms)} | {best_text} | {speedup} | "
            f"{_format_ms(vendor_ms)} | {vendor_ratio} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="cuda:sm_80")
    parser.add_argument("--device", default=None, help="runtime device (default: the target's)")
    parser.add_argument("--m", default=DEFAULT_M)
    parser.add_argument("--n", default="4096")
    parser.add_argument("--k", default="4096")
    parser.add_argument("--layout", default="nt", help="nn, nt, tn or tt (default nt: mmt)")
    parser.add_argument("--configs", default="default,8")
    parser.add_argument("--phase", choices=[p.value for p in Phase], default="all")
    parser.add_argument("--generated-dir", type=Path, default=Path("profile_sweep"))
    parser.add_argument("--output", type=Path, default=None, help="CSV of every dispatch")
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--peak-gflops", type=float, default=None)
    parser.add_argument("--no-verify", action="store_true")
    arguments = parser.parse_args(argv)
    try:
        phase = Phase(arguments.phase)
        operations = []
        if phase is not Phase.RUN:
            operations = expand_sweep(
                SweepRequest(
                    OperationKind.MATMUL,
                    {"m": arguments.m, "n": arguments.n, "k": arguments.k},
                    "f16",
                    "f32",
                    arguments.layout,
                )
            )
        options = ProfileOptions(
            generated_dir=arguments.generated_dir,
            target=arguments.target,
            configs=parse_config_request(arguments.configs),
            phase=phase,
            verify=not arguments.no_verify,
            device=arguments.device,
            repetitions=arguments.repetitions,
            peak_gflops=arguments.peak_gflops,
            show_progress=False,
        )
        result = run_profile(operations, options)
    except IreetuneError as error:
        sys.stderr.write(f"profile_sweep: error: {error}\n")
        return 2
    if phase is Phase.COMPILE:
        compiled = sum(1 for e in result.manifest.dispatches if e.status.value == "compiled")
        sys.stdout.write(
            f"compiled {compiled} of {len(result.manifest.dispatches)} dispatches into {arguments.generated_dir}\n"
        )
        return 0
    if arguments.output is not None:
        arguments.output.write_text(render_csv(result.results))
    target = result.manifest.target
    sys.stdout.write(render_markdown(result.results, target, describe_device(target)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
