"""`ireetune spec`: check, link, show and dump tuning specs."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from ireetune.core.arguments import TARGET_HELP, positive_seconds, user_path
from ireetune.core.output_paths import add_output_arguments

EXIT_PASS = 0
EXIT_FAIL = 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("spec", help="check, link, show and dump tuning specs")
    commands = parser.add_subparsers(dest="spec_command", required=True, parser_class=type(parser))

    check = commands.add_parser("check", help="validate a spec (exit 0 pass, 1 fail, 2 unreadable)")
    check.add_argument("spec", type=user_path, help="the tuning spec (.mlir) to check")
    check.add_argument(
        "--target", default="cpu", help=f"target to load the spec for: {TARGET_HELP}"
    )
    check.set_defaults(handler=run_check)

    link = commands.add_parser("link", help="link specs into one, first input first")
    link.add_argument(
        "specs", type=user_path, nargs="+", help="the specs (.mlir) to link, in order"
    )
    add_output_arguments(link, "the linked spec to write", required=True)
    link.set_defaults(handler=run_link)

    show = commands.add_parser("show", help="list a spec's matchers; with a model, what they cover")
    show.add_argument("spec", type=user_path, help="the tuning spec (.mlir) to list")
    show.add_argument(
        "--model", type=user_path, help="a model .mlir whose dispatches to compare with"
    )
    show.add_argument(
        "--target", default="cpu", help=f"target to dump the model's dispatches for: {TARGET_HELP}"
    )
    show.add_argument(
        "--compile-timeout", type=positive_seconds, default=300.0, help="seconds for the dump"
    )
    show.set_defaults(handler=run_show)

    dump = commands.add_parser("dump", help="print the final linked spec the compiler uses")
    dump.add_argument("model", type=user_path, help="the model .mlir to compile")
    dump.add_argument("--target", required=True, help=f"what to compile for: {TARGET_HELP}")
    dump.add_argument(
        "--spec", type=user_path, help="a tuning spec to add (default: only the compiler's own)"
    )
    dump.add_argument(
        "--with-default-specs", action="store_true", help="add IREE's default specs (ROCm)"
    )
    dump.add_argument(
        "--compile-timeout", type=positive_seconds, default=300.0, help="seconds for the compile"
    )
    dump.set_defaults(handler=run_dump)


def run_check(arguments: argparse.Namespace) -> int:
    from ireetune.spec.apply import resolve_compile_target
    from ireetune.spec.check import check_spec, render_check_report

    report = check_spec(arguments.spec, resolve_compile_target(arguments.target))
    sys.stdout.write(render_check_report(report))
    return EXIT_PASS if report.passed else EXIT_FAIL


def run_link(arguments: argparse.Namespace) -> int:
    from ireetune.core.output_paths import check_new_output
    from ireetune.spec.link import link_spec_files, render_link_result

    check_new_output(arguments.output, arguments.force, arguments.specs)
    result = link_spec_files(arguments.specs, arguments.output)
    sys.stdout.write(render_link_result(result))
    return EXIT_PASS


def run_show(arguments: argparse.Namespace) -> int:
    from iree.compiler import ir

    from ireetune.core.input_files import check_mlir_input
    from ireetune.spec.inspect import list_matchers, render_coverage, render_matchers
    from ireetune.spec.source import read_spec

    if arguments.model is not None:
        # Refuse a bad model before anything is printed.
        check_mlir_input(arguments.model, "model")
    context = ir.Context()
    matchers = list_matchers(read_spec(arguments.spec, context))
    sys.stdout.write(render_matchers(matchers))
    if arguments.model is not None:
        from ireetune.spec.coverage import read_dispatch_roots
        from ireetune.spec.inspect import compute_coverage
        from ireetune.targets import parse_target

        target = parse_target(arguments.target)
        with tempfile.TemporaryDirectory(prefix="ireetune_show_") as folder:
            roots = read_dispatch_roots(
                arguments.model, target, Path(folder), arguments.compile_timeout
            )
        sys.stdout.write(render_coverage(compute_coverage(matchers, roots), matchers))
    return EXIT_PASS


def run_dump(arguments: argparse.Namespace) -> int:
    from ireetune.spec.apply import dump_used_spec, resolve_compile_target

    dumped = dump_used_spec(
        arguments.model,
        resolve_compile_target(arguments.target),
        arguments.spec,
        arguments.with_default_specs,
        arguments.compile_timeout,
    )
    if dumped.note:
        sys.stderr.write(f"ireetune: note: {dumped.note}\n")
    sys.stdout.write(dumped.text)
    return EXIT_PASS
