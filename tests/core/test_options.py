"""Options declared once: the parser is generated from the option dataclasses' fields."""

from __future__ import annotations

import argparse
import enum
import subprocess
import sys
from dataclasses import dataclass, fields
from pathlib import Path

import pytest

from ireetune.cli import build_parser
from ireetune.core.arguments import positive_int
from ireetune.core.options import add_options, option, option_fields, options_from_arguments
from ireetune.executor import ExecutorKind, RaySettings
from ireetune.flows.dispatch.options import References, StopAfter, TuneOptions
from ireetune.flows.model.options import ModelTuneOptions
from ireetune.model.select import MODEL_RULE
from ireetune.profiler.options import Phase, ProfileOptions


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True)
class ToyOptions:
    path: Path = option(flag="path", type=Path, help="the input")
    count: int = option(3, flag="--count", type=positive_int, help="how many")
    colour: Colour = option(Colour.RED, flag="--colour", choices=Colour, help="which colour")
    names: tuple[str, ...] = option((), flag="--name", action="append", help="repeatable")
    fast: bool = option(False, flag="--fast", action="store_true", help="go fast")
    use_cache: bool = option(True, flag="--no-cache", action="store_false", help="no cache")
    online: bool | None = option(None, flag="--online", action="boolean_optional", help="on?")
    # Not an option: the caller passes it.
    secret: int = 0


def _toy_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="toy")
    add_options(parser, ToyOptions)
    return parser


def test_every_option_field_becomes_one_argument_with_its_flag_help_and_default() -> None:
    actions = {
        action.dest: action
        for action in _toy_parser()._actions
        if not isinstance(action, argparse._HelpAction)
    }
    described = {
        dest: (tuple(action.option_strings), action.help, action.default)
        for dest, action in actions.items()
    }
    assert described == {
        "path": ((), "the input", None),
        "count": (("--count",), "how many", 3),
        "colour": (("--colour",), "which colour", "red"),
        "names": (("--name",), "repeatable", []),
        "fast": (("--fast",), "go fast", False),
        "use_cache": (("--no-cache",), "no cache", True),
        "online": (("--online", "--no-online"), "on?", None),
    }
    assert actions["colour"].choices == ("red", "blue")
    assert actions["path"].metavar == "path" and actions["count"].metavar == "COUNT"


def test_defaults_round_trip_into_the_dataclass() -> None:
    arguments = _toy_parser().parse_args(["in.txt"])
    assert options_from_arguments(ToyOptions, arguments, secret=7) == ToyOptions(
        path=Path("in.txt"), secret=7
    )


def test_given_values_round_trip_into_the_dataclass() -> None:
    words = ["in.txt", "--count", "9", "--colour", "blue", "--name", "a", "--name", "b"]
    words += ["--fast", "--no-cache", "--no-online"]
    arguments = _toy_parser().parse_args(words)
    assert options_from_arguments(ToyOptions, arguments) == ToyOptions(
        path=Path("in.txt"), count=9, colour=Colour.BLUE, names=("a", "b"), fast=True,
        use_cache=False, online=False,
    )  # fmt: skip


def test_an_option_field_is_not_also_given_by_the_caller() -> None:
    arguments = _toy_parser().parse_args(["in.txt"])
    with pytest.raises(AssertionError) as excinfo:
        options_from_arguments(ToyOptions, arguments, count=4)
    assert "count is an option" in str(excinfo.value)


def _command_parser(command: str) -> argparse.ArgumentParser:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    command_parser: argparse.ArgumentParser = subparsers.choices[command]
    return command_parser


@pytest.mark.parametrize(
    ("command", "options_class"),
    [("tune-dispatch", TuneOptions), ("tune", ModelTuneOptions), ("profile", ProfileOptions)],
)
def test_each_option_field_is_on_its_command_with_its_help(
    command: str, options_class: type
) -> None:
    helps = {action.dest: action.help for action in _command_parser(command)._actions}
    declared = {field.name: spec.help for field, spec in option_fields(options_class)}
    assert {name: helps.get(name) for name in declared} == declared


def test_command_line_defaults_are_the_api_defaults() -> None:
    """`ireetune tune-dispatch x` and `TuneOptions(x)` are the same run (and so for the others)."""
    parser = build_parser()
    tune_dispatch = options_from_arguments(
        TuneOptions, parser.parse_args(["tune-dispatch", "x.mlir"]),
        executor=ExecutorKind.LOCAL, ray=RaySettings(),
    )  # fmt: skip
    assert tune_dispatch == TuneOptions(input_path=Path("x.mlir"))
    tune = options_from_arguments(
        ModelTuneOptions, parser.parse_args(["tune", "m.mlir"]),
        executor=ExecutorKind.LOCAL, ray=RaySettings(),
    )  # fmt: skip
    assert tune == ModelTuneOptions(model_path=Path("m.mlir"))
    assert tune.flag_threshold == MODEL_RULE.threshold
    profile = options_from_arguments(ProfileOptions, parser.parse_args(["profile", "matmul"]))
    assert profile == ProfileOptions()


def test_tune_dispatch_arguments_become_tune_options() -> None:
    words = [
        "tune-dispatch", "d.mlir", "--target", "cuda:sm_80", "--num-candidates", "7",
        "--dispatch", "2", "--output-dir", "out", "--jobs", "3", "--seed", "11",
        "--devices", "cuda://0,cuda://1", "--repetitions", "4", "--compile-timeout", "30",
        "--confirm-rounds", "0", "--min-repetition-time", "0.1", "--pipeline", "TileAndFuse",
        "--stop-after", "compile", "--references", "all", "--order", "random", "--no-online",
        "--progress", "--db", "t.sqlite", "--no-db", "--retune", "--benchmark-timeout", "20",
        "--overlap", "--screen-fraction", "0.5", "--prewarm", "2",
        "--flags=--iree-opt-data-tiling", "--search-flags", "--time-budget", "90",
    ]  # fmt: skip
    arguments = build_parser().parse_args(words)
    options = options_from_arguments(
        TuneOptions, arguments, executor=ExecutorKind.LOCAL, ray=RaySettings()
    )
    assert options == TuneOptions(
        input_path=Path("d.mlir"), target="cuda:sm_80", num_candidates=7, dispatch="2",
        output_dir=Path("out"), jobs=3, seed=11, devices=("cuda://0", "cuda://1"),
        repetitions=4, compile_timeout_s=30.0, confirm_rounds=0, min_repetition_s=0.1,
        pipelines=("TileAndFuse",), stop_after=StopAfter.COMPILE, references=References.ALL,
        order="random", online=False, show_progress=True,
        database_path=Path("t.sqlite"), use_database=False, retune=True,
        min_benchmark_timeout_s=20.0, overlap=True, screen_fraction=0.5, prewarm=2,
        extra_flags=("--iree-opt-data-tiling",), search_flags=True, time_budget_s=90.0,
    )  # fmt: skip
    # Every option field was given a value other than its default.
    defaults = TuneOptions(input_path=Path("d.mlir"))
    unchanged = [
        field.name
        for field, _ in option_fields(TuneOptions)
        if field.name != "input_path"
        and getattr(options, field.name) == getattr(defaults, field.name)
    ]
    assert unchanged == []


def test_model_and_profile_arguments_become_their_options() -> None:
    parser = build_parser()
    words = [
        "tune", "m.onnx", "--input", "1x4xf32", "--coverage", "0.5", "--no-flag-search",
        "--try-flags=--iree-opt-data-tiling", "--try-flags=--iree-opt-level=O3",
        "--flag-threshold", "1.05", "--time-budget", "60", "--externalize-weights",
    ]  # fmt: skip
    tune = options_from_arguments(
        ModelTuneOptions, parser.parse_args(words), executor=ExecutorKind.RAY, ray=RaySettings()
    )
    assert tune == ModelTuneOptions(
        model_path=Path("m.onnx"), inputs=("1x4xf32",), coverage=0.5, search_flags=False,
        flag_sets=(("--iree-opt-data-tiling",), ("--iree-opt-level=O3",)), flag_threshold=1.05,
        time_budget_s=60.0, externalize_weights=True, executor=ExecutorKind.RAY,
    )  # fmt: skip
    words = ["profile", "--phase", "run", "--dispatches", "mm_.*,conv", "--no-verify"]
    profile = options_from_arguments(ProfileOptions, parser.parse_args(words))
    assert profile == ProfileOptions(
        phase=Phase.RUN, dispatch_patterns=("mm_.*", "conv"), verify=False
    )


def test_option_dataclasses_keep_their_non_option_fields() -> None:
    """The fields only the API sets stay out of the parser."""
    non_options = {
        options_class.__name__: [
            field.name
            for field in fields(options_class)
            if field.name not in {f.name for f, _ in option_fields(options_class)}
        ]
        for options_class in (TuneOptions, ModelTuneOptions, ProfileOptions)
    }
    assert non_options == {
        "TuneOptions": [
            "hopeless_factor", "verify_top", "confirm_top", "confirm_above", "model_level_rounds",
            "threshold", "decide_on_dispatch_benchmark",
            "executor", "ray",
        ],
        "ModelTuneOptions": ["executor", "ray"],
        "ProfileOptions": ["configs", "min_repetition_s", "benchmark_timeout_s"],
    }  # fmt: skip


def test_building_the_parser_imports_neither_the_compiler_nor_numpy() -> None:
    """The option dataclasses are imported by every command's parser, the runtime-only device
    host's included (docs/gpu.md), and by every start of the command line."""
    code = (
        "import sys; from ireetune.cli import build_parser; build_parser(); "
        "print(sorted(n for n in ('iree.compiler', 'numpy', 'z3', 'rich', 'onnx') "
        "if n in sys.modules))"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert completed.stdout == "[]\n"


def test_a_stage_takes_its_options_from_the_command_s_same_named_fields() -> None:
    from ireetune.core.options import options_from
    from ireetune.profiler.build import BuildOptions
    from ireetune.profiler.measure import MeasureOptions
    from ireetune.profiler.options import ProfileOptions

    profile = ProfileOptions(
        target="cuda:sm_80", generated_dir=Path("sweep"), seed=5, jobs=3, samples=17,
        benchmark_timeout_s=9.0, compile_timeout_s=33.0, repetitions=4,
    )  # fmt: skip
    assert options_from(BuildOptions, profile) == BuildOptions(
        generated_dir=Path("sweep"), target="cuda:sm_80", jobs=3, seed=5, compile_timeout_s=33.0
    )
    assert options_from(MeasureOptions, profile, timeout_s=profile.benchmark_timeout_s) == (
        MeasureOptions(
            generated_dir=Path("sweep"), repetitions=4, timeout_s=9.0, samples=17, seed=5
        )
    )
