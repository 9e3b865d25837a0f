"""`ireetune profile`: generate, compile, verify and profile dispatches across shapes and configs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ireetune.core.arguments import user_path
from ireetune.core.errors import IreetuneError
from ireetune.core.options import add_options, options_from_arguments
from ireetune.core.output_paths import add_force_argument
from ireetune.profiler.operations import ConvLayout, MatmulLayout, OperationKind
from ireetune.profiler.options import Phase, ProfileOptions

# Every dimension flag, its help text, and the operations that take it.
_DIMENSION_FLAGS = {
    "m": "matmul M (rows of the result)",
    "n": "matmul N (columns of the result)",
    "k": "matmul K (reduction)",
    "batch": "batch_matmul batch count; conv2d images",
    "height": "conv2d image height",
    "width": "conv2d image width",
    "channels": "conv2d input channels",
    "filters": "conv2d filters (output channels)",
    "kernel_h": "conv2d kernel height",
    "kernel_w": "conv2d kernel width",
    "stride": "conv2d stride (both directions)",
    "dilation": "conv2d dilation (both directions)",
}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "profile",
        help="generate, compile, verify and profile dispatches over shapes and configurations",
        description=(
            "Sweep operations over shapes, types and configurations. Dimensions take a value "
            "(64), a list (64,128) or an inclusive range start:stop:step (64:1024:128)."
        ),
    )
    parser.add_argument(
        "operations",
        nargs="*",
        default=[],
        help="operations to sweep: matmul, batch_matmul, conv2d, matmul_bias_relu (none with "
        "--problems or --phase run)",
    )
    for name, text in _DIMENSION_FLAGS.items():
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, default=None, help=text)
    parser.add_argument(
        "--dtype", default="f32", help="input element types, comma list of f32, f16, bf16, i8"
    )
    parser.add_argument(
        "--acc", default="", help="accumulator (result) types (default f32, i32 for i8)"
    )
    parser.add_argument(
        "--layout",
        default="",
        help="matmul: nn, nt, tn, tt (default nn); conv2d: nhwc_hwcf, nchw_fchw (default nhwc_hwcf)",
    )
    parser.add_argument(
        "--problems",
        type=user_path,
        help="a CSV or JSON file of problems (shapes from models) (default: none)",
    )
    parser.add_argument(
        "--configs",
        default="default",
        help="default | N (first N of the target's search space) | FILE (.mlir spec or .json knobs); comma list",
    )
    add_options(parser, ProfileOptions)
    parser.add_argument(
        "--output",
        type=user_path,
        help="also write the results as CSV to this file (default: none)",
    )
    add_force_argument(parser)
    parser.add_argument(
        "--format", choices=("blocks", "csv"), default="blocks", help="console output"
    )
    parser.set_defaults(handler=run)


def run(arguments: argparse.Namespace) -> int:
    from ireetune.core.files import write_text_atomically
    from ireetune.core.output_paths import check_new_output, write_output
    from ireetune.core.run_dir import check_output_dir
    from ireetune.profiler.configs import parse_config_request
    from ireetune.profiler.pipeline import run_profile
    from ireetune.profiler.report import render_blocks, render_csv
    from ireetune.profiler.shapes import (
        DIMENSIONS_BY_KIND,
        SweepRequest,
        expand_requests,
        parse_operation_kind,
        read_problem_file,
    )
    from ireetune.report.html_report import try_write_html_report
    from ireetune.report.run_view import PROFILE_RESULTS_NAME

    phase = Phase(arguments.phase)
    check_output_dir(arguments.generated_dir)
    if arguments.output is not None:
        # The problem and config files are inputs; so is every file of the generated tree, which
        # this command writes and the run phase reads back.
        config_files = [
            Path(item.strip())
            for item in arguments.configs.split(",")
            if item.strip() and item.strip() != "default" and not item.strip().isdigit()
        ]
        problem_files = [arguments.problems] if arguments.problems is not None else []
        check_new_output(
            arguments.output,
            arguments.force,
            [*problem_files, *config_files],
            own_folders=[arguments.generated_dir],
        )
    dimensions = {
        name: getattr(arguments, name) for name in _DIMENSION_FLAGS if getattr(arguments, name)
    }
    kinds = [parse_operation_kind(text) for text in arguments.operations]
    # Flags are shared by the operations named: each takes the dimensions and layouts it knows.
    unused = sorted(set(dimensions) - {name for kind in kinds for name in DIMENSIONS_BY_KIND[kind]})
    if kinds and unused:
        raise IreetuneError(
            f"no operation named takes --{', --'.join(u.replace('_', '-') for u in unused)}"
        )
    layouts = _split_layouts(arguments.layout, kinds)
    requests = [
        SweepRequest(
            kind=kind,
            dimensions={
                name: value
                for name, value in dimensions.items()
                if name in DIMENSIONS_BY_KIND[kind]
            },
            dtypes=arguments.dtype,
            accumulators=arguments.acc,
            layouts=layouts[kind],
        )
        for kind in kinds
    ]
    if arguments.problems is not None:
        requests.extend(read_problem_file(arguments.problems))
    if phase is not Phase.RUN and not requests:
        raise IreetuneError(
            "name an operation (matmul, batch_matmul, conv2d, matmul_bias_relu) or --problems"
        )
    operations = expand_requests(requests) if phase is not Phase.RUN else []
    options = options_from_arguments(
        ProfileOptions, arguments, configs=parse_config_request(arguments.configs)
    )
    result = run_profile(operations, options)
    for note in result.manifest.notes:
        sys.stderr.write(f"note: {note}\n")
    if phase is Phase.COMPILE:
        for entry in result.manifest.dispatches:
            reason = f": {entry.reason}" if entry.reason else ""
            sys.stdout.write(f"[{entry.status.value}] {entry.name}{reason}\n")
        sys.stdout.write(f"manifest: {arguments.generated_dir / 'manifest.json'}\n")
        return 0
    provider = (
        f"IREE Codegen ({result.manifest.target}, {options.device or result.manifest.device})"
    )
    if arguments.format == "csv":
        sys.stdout.write(render_csv(result.results))
    else:
        sys.stdout.write(render_blocks(result.results, provider))
    if arguments.output is not None:
        write_output(arguments.output, render_csv(result.results))
        sys.stderr.write(f"Writing performance report to {arguments.output}\n")
    # The results stay beside the manifest, where `ireetune report` finds them.
    write_text_atomically(
        arguments.generated_dir / PROFILE_RESULTS_NAME, render_csv(result.results)
    )
    report_path = try_write_html_report(arguments.generated_dir)
    if report_path is not None:
        sys.stderr.write(f"html report: {report_path}\n")
    return 0


def _split_layouts(text: str, kinds: list[OperationKind]) -> dict[OperationKind, str]:
    """Give each operation the `--layout` values of its family (matmul or convolution layouts)."""
    conv_values = {layout.value for layout in ConvLayout}
    matmul_values = {layout.value for layout in MatmulLayout}
    families = {kind is OperationKind.CONV2D for kind in kinds}
    if len(families) < 2:
        return {kind: text for kind in kinds}
    values = [item.strip().lower() for item in text.split(",") if item.strip()]
    unknown = [value for value in values if value not in conv_values | matmul_values]
    if unknown:
        raise IreetuneError(f"--layout: unknown value '{unknown[0]}'")
    return {
        kind: ",".join(
            value for value in values if (value in conv_values) == (kind is OperationKind.CONV2D)
        )
        for kind in kinds
    }
