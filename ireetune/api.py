"""The Python API: tune a dispatch, tune a model, profile a sweep, apply a result; one call each.

Each call takes its command's options as keyword arguments, with the names, defaults and bounds
its options dataclass declares (`TuneOptions`, `ModelTuneOptions`, `ProfileOptions`,
`ApplyOptions`: the command line's parser is generated from the same fields), returns the flow's
typed result, and sends every stage's progress to `on_progress` as `ProgressEvent`s:

    import ireetune

    result = ireetune.tune_dispatch("matmul.mlir", num_candidates=8, on_progress=print)
    print(result.best_spec_path)

A name the options do not have, or a value their bounds refuse, raises `IreetuneError` with one
line naming the call and the option (`tune_dispatch.num_candidates must be at least 1, got 0`).
The command line is a thin layer over the same flows; what it prints is unchanged by a callback.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from ireetune.core.errors import IreetuneError
from ireetune.core.options import check_option_numbers, option_fields
from ireetune.flows.apply import ApplyOptions, ApplyResult
from ireetune.flows.dispatch.options import TuneOptions
from ireetune.flows.model.options import ModelTuneOptions
from ireetune.profiler.options import ProfileOptions
from ireetune.report.progress import ProgressCallback, ProgressEvent, report_progress_to

if typing.TYPE_CHECKING:
    from ireetune.flows.model.tuner import ModelTuneResult
    from ireetune.profiler.operations import Operation
    from ireetune.profiler.pipeline import ProfileResult
    from ireetune.profiler.shapes import SweepRequest
    from ireetune.report.result import TuneResult

__all__ = [
    "ApplyResult",
    "ProgressEvent",
    "apply",
    "profile",
    "tune_dispatch",
    "tune_model",
    "tune_torch_module",
]

OptionsT = TypeVar("OptionsT")
PathText = str | os.PathLike[str]


def tune_dispatch(
    input_path: PathText, *, on_progress: ProgressCallback | None = None, **options: Any
) -> TuneResult:
    """Tune one dispatch (a `*_benchmark.mlir` dump, or a model with static shapes) and write
    its spec; `options` are `TuneOptions` fields (`ireetune tune-dispatch --help`)."""
    from ireetune.commands.shared import check_before_work
    from ireetune.flows.dispatch.tuner import tune_dispatch as run_tune_dispatch

    tune_options = build_options(TuneOptions, "tune_dispatch", input_path=input_path, **options)
    check_before_work(tune_options)
    with report_progress_to(on_progress):
        return run_tune_dispatch(tune_options)


def tune_model(
    model_path: PathText, *, on_progress: ProgressCallback | None = None, **options: Any
) -> ModelTuneResult:
    """Tune a whole model (.mlir or .onnx) into one linked spec and a flags file, on this host;
    `options` are `ModelTuneOptions` fields (`ireetune tune --help`)."""
    from ireetune.commands.shared import check_before_work
    from ireetune.flows.model.tuner import tune_model as run_tune_model

    model_options = build_options(ModelTuneOptions, "tune_model", model_path=model_path, **options)
    check_before_work(model_options)
    with report_progress_to(on_progress):
        return run_tune_model(model_options)


def tune_torch_module(
    module: Any,
    example_inputs: tuple[Any, ...],
    work_dir: PathText,
    *,
    on_progress: ProgressCallback | None = None,
    **options: Any,
) -> ModelTuneResult:
    """Export a torch.nn.Module through iree-turbine into `work_dir` and tune it as `tune_model`
    does (the inputs are random, with the example inputs' shapes and types)."""
    from ireetune.frontend.model_import import export_torch_module

    mlir_path = export_torch_module(module, example_inputs, Path(work_dir))
    return tune_model(mlir_path, on_progress=on_progress, **options)


def profile(
    operations: Sequence[Operation | SweepRequest] = (),
    *,
    on_progress: ProgressCallback | None = None,
    **options: Any,
) -> ProfileResult:
    """Compile, verify and time a sweep of operations (each a profiler operation, or a
    `SweepRequest` of dimension texts as `ireetune profile` takes them); `options` are
    `ProfileOptions` fields, `configs` also as the command's text (`"default"`, `"4"`)."""
    from ireetune.core.run_dir import check_output_dir
    from ireetune.profiler.configs import parse_config_request
    from ireetune.profiler.options import Phase
    from ireetune.profiler.pipeline import run_profile
    from ireetune.profiler.shapes import SweepRequest, expand_requests

    if isinstance(options.get("configs"), str):
        options["configs"] = parse_config_request(options["configs"])
    profile_options = build_options(ProfileOptions, "profile", **options)
    check_output_dir(profile_options.generated_dir)
    # As on the command line, the run phase reads what the generated folder holds.
    chosen: list[Operation] = []
    if profile_options.phase is not Phase.RUN:
        requests = [item for item in operations if isinstance(item, SweepRequest)]
        chosen = [item for item in operations if not isinstance(item, SweepRequest)]
        chosen += expand_requests(requests) if requests else []
    with report_progress_to(on_progress):
        return run_profile(chosen, profile_options)


def apply(
    model: PathText, *, on_progress: ProgressCallback | None = None, **options: Any
) -> ApplyResult:
    """Compile a model with a tuning result (`spec`, `flags_file` or both) into `output` and
    check that every matcher's configuration landed (`result.landed`; the binary is written
    only then); `options` are `ApplyOptions` fields (`ireetune compile --help`)."""
    from ireetune.flows.apply import apply_result

    apply_options = build_options(ApplyOptions, "apply", model=model, **options)
    with report_progress_to(on_progress):
        return apply_result(apply_options)


def build_options(options_class: type[OptionsT], call: str, **values: Any) -> OptionsT:
    """Build `options_class` from a call's keyword arguments, as the command line would from its
    flags: text for a path or an enum's value is taken, a list becomes a tuple, and a name the
    class does not have, or a number its option's bounds refuse, is one `IreetuneError` line."""
    fields = {field.name for field in dataclasses.fields(options_class)}  # type: ignore[arg-type]
    unknown = sorted(set(values) - fields)
    if unknown:
        raise IreetuneError(
            f"{call}: no option named {', '.join(unknown)} ({options_class.__name__} lists them)"
        )
    hints = typing.get_type_hints(options_class)
    converted = {name: _convert(value, hints[name], f"{call}.{name}") for name, value in values.items()}  # fmt: skip
    for field, spec in option_fields(options_class):
        # A text option whose choices are names (`order`: the search strategies).
        value = converted.get(field.name)
        if isinstance(spec.choices, tuple) and value is not None and value not in spec.choices:
            known = ", ".join(spec.choices)
            raise IreetuneError(f"{call}.{field.name}: '{value}' is not one of {known}")
    try:
        options = options_class(**converted)
    except TypeError as error:
        # A required option not given: the dataclass names it.
        raise IreetuneError(f"{call}: {error}") from None
    try:
        check_option_numbers(options, call)
    except ValueError as error:
        raise IreetuneError(str(error)) from None
    return options


def _convert(value: Any, hint: Any, where: str) -> Any:
    """Turn `value` into the field's type where the command line would have (paths, enums,
    tuples); leave anything else for the options' own checks."""
    kinds = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    if isinstance(value, str | os.PathLike) and Path in kinds:
        return Path(value)
    for kind in kinds:
        if isinstance(kind, type) and issubclass(kind, enum.Enum) and isinstance(value, str):
            try:
                return kind(value)
            except ValueError:
                known = ", ".join(str(member.value) for member in kind)
                raise IreetuneError(f"{where}: '{value}' is not one of {known}") from None
    if isinstance(value, list) and typing.get_origin(hint) is tuple:
        return tuple(value)
    return value
