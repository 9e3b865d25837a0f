"""Turn a model file (MLIR, ONNX) or a torch module into MLIR that iree-compile accepts."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ireetune.core.errors import IreetuneError
from ireetune.core.input_files import check_input_file
from ireetune.core.tools import find_tool, first_error_line, path_argument, run_tool
from ireetune.core.worker_protocol import PARAMETER_SCOPE
from ireetune.frontend.onnx_groups import count_grouped_convolutions, split_grouped_convolutions
from ireetune.frontend.onnx_space_to_depth import count_space_to_depth, space_to_depth_convolutions

# What a run whose import split the grouped convolutions says of its result (no word "spec":
# the report takes a note that speaks of specs as the reason none was kept).
TUNED_IMPORT = (
    "what the run tunes, and the report's apply: line compiles, is the run folder's import"
)

# ONNX models older than this opset are upgraded before import; iree-import-onnx handles 17.
ONNX_OPSET = 17


def import_model(
    model_path: Path,
    work_dir: Path,
    parameters_path: Path | None = None,
    split_groups: bool = False,
    notes: list[str] | None = None,
    space_to_depth: bool = True,
) -> Path:
    """Return an MLIR file for the model: the file itself, or an import of an ONNX model.

    With `parameters_path`, an ONNX model's weights go into that IREE parameter archive (.irpa)
    instead of the MLIR: every binary compiled from it is then small, and loads the weights
    from the archive at run time (model/worker.py). With `split_groups` (the rewritten import),
    an ONNX model's grouped convolutions are split per group first (frontend/onnx_groups.py)
    and, with `space_to_depth`, its strided convolutions of few input channels become a
    space-to-depth and a stride-1 convolution (frontend/onnx_space_to_depth.py); `notes` hears
    of both.
    """
    check_input_file(model_path, "model file")
    suffix = model_path.suffix.lower()
    if suffix in (".mlir", ".mlirbc"):
        if split_groups and notes is not None:
            notes.append("--split-grouped-convs applies to ONNX models only: the MLIR is as given")
        return model_path
    if suffix == ".onnx":
        rewrites = (split_groups, split_groups and space_to_depth)
        return _import_onnx(model_path, work_dir, parameters_path, rewrites, notes)
    raise IreetuneError(f"unknown model format '{suffix}': give a .mlir or .onnx file")


def count_rewrites(model_path: Path) -> tuple[int, int]:
    """Return how many grouped convolutions and how many strided convolutions of few input
    channels the rewritten import of an ONNX model would rewrite (none for another format, or
    a file onnx cannot read: its import says why)."""
    if model_path.suffix.lower() != ".onnx":
        return 0, 0
    try:
        import onnx

        # The weights' shapes are in the graph: external weights need not be read.
        model = onnx.load(str(model_path), load_external_data=False)
        return count_grouped_convolutions(model), count_space_to_depth(model)
    except Exception:  # No onnx, or a damaged file: the import itself refuses it in one line.
        return 0, 0


def describe_rewrites(grouped: int, strided: int) -> str:
    """Say what the rewritten import changes, as the run's notes put it."""
    parts = [f"{grouped} grouped convolution(s) split per group"] if grouped else []
    if strided:
        parts.append(f"{strided} strided convolution(s) of few input channels as space-to-depth")
    return " and ".join(parts) or "no convolution rewritten"


def _import_onnx(
    model_path: Path,
    work_dir: Path,
    parameters_path: Path | None,
    rewrites: tuple[bool, bool] = (False, False),
    notes: list[str] | None = None,
) -> Path:
    try:
        import onnx
        from onnx import version_converter
    except ImportError as error:
        raise IreetuneError(
            "importing ONNX models needs the onnx package: pip install onnx"
        ) from error
    try:
        model = onnx.load(str(model_path))
    except Exception as error:  # onnx raises several unrelated types for damaged files.
        raise IreetuneError(f"cannot read {model_path} as ONNX: {error}") from error
    opset = max(
        (entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx")),
        default=0,
    )
    work_dir.mkdir(parents=True, exist_ok=True)
    source = model_path
    if opset < ONNX_OPSET:
        try:
            model = version_converter.convert_version(model, ONNX_OPSET)
        except Exception as error:  # The converter raises plain exceptions for unsupported ops.
            raise IreetuneError(
                f"cannot upgrade {model_path} from opset {opset} to {ONNX_OPSET}: {error}"
            ) from error
        source = work_dir / f"{model_path.stem}_opset{ONNX_OPSET}.onnx"
    split_groups, space_to_depth = rewrites
    if split_groups:
        try:
            split = split_grouped_convolutions(model)
        except Exception as error:  # onnx's helpers raise several unrelated types on odd graphs.
            raise IreetuneError(
                f"cannot split the grouped convolutions of {model_path.name}: {error}"
            ) from error
        try:
            strided = space_to_depth_convolutions(model) if space_to_depth else 0
        except Exception as error:  # Shape inference too raises several types on odd graphs.
            raise IreetuneError(
                f"cannot rewrite the strided convolutions of {model_path.name}: {error}"
            ) from error
        if split or strided:
            source = work_dir / f"{model_path.stem}_groups_split.onnx"
        if notes is not None:
            notes.append(
                f"{describe_rewrites(split, strided)} at import (--split-grouped-convs): "
                f"{TUNED_IMPORT}"
                if split or strided
                else "--split-grouped-convs: the model has no grouped convolution to split"
            )
    if source != model_path:
        # One copy of the model as changed (upgraded, split or both) is what the importer reads.
        try:
            onnx.save(model, str(source))
        except (OSError, ValueError) as error:  # A model over protobuf's 2 GiB, say.
            raise IreetuneError(f"cannot write {source.name}: {error}") from error
    output = work_dir / f"{model_path.stem}.mlir"
    externalize = (
        ["--externalize-params", f"--save-params-to={parameters_path}",
         f"--params-scope={PARAMETER_SCOPE}"]
        if parameters_path is not None
        else []
    )  # fmt: skip
    result = run_tool(
        [
            find_tool("iree-import-onnx"),
            path_argument(source),
            *externalize,
            "-o",
            path_argument(output),
        ],  # fmt: skip
        timeout_s=600,
    )
    if result.returncode != 0:
        raise IreetuneError(
            f"iree-import-onnx failed on {model_path}: {describe_import_failure(result.stderr)}"
        )
    return output


# A line of protobuf text (`name: "W"`, `dims: 8`, `raw_data: "..."`, `type {`, `}`): what the
# importer prints of a tensor or node it cannot import, after its message.
_PROTO_LINE = re.compile(r"^\s*(?:\w+: .*|\w+ \{|\})$")
_PROTO_FIELD = re.compile(r'^\s*(\w+): "?(.*?)"?$')
# The fields a TensorProto keeps its values in, when not in raw_data.
_VALUE_FIELDS = ("float_data", "int32_data", "int64_data", "double_data", "uint64_data")


def describe_import_failure(stderr: str) -> str:
    """Say in one line why iree-import-onnx failed: the exception its traceback ends with (the
    importer's own message, or the ONNX checker's with the node it names), and for a tensor the
    importer prints whole, which tensor it is and how its values are stored.

    The importer's message for a tensor it cannot read ends with the tensor itself, one field a
    line, so the last line alone says only `name: "W"`:

        onnx_importer.OnnxImportError: Unhandled ONNX TensorProto data: dims: 8
        dims: 16
        data_type: 10
        int32_data: 15360
        name: "W"
    """
    lines = stderr.splitlines()
    starts = [number for number, line in enumerate(lines) if line.startswith("Traceback (")]
    if not starts:
        return first_error_line(stderr)
    # The exception is the first line after the last traceback's frames that is not indented.
    tail = lines[starts[-1] + 1 :]
    header = next((n for n, line in enumerate(tail) if line and not line[0].isspace()), None)
    if header is None:
        return first_error_line(stderr)
    kind, _, message = tail[header].partition(": ")
    rest = [line for line in tail[header + 1 :] if line.strip()]
    proto = [line for line in rest if _PROTO_LINE.match(line)]
    if proto and len(proto) == len(rest):
        # The message ends with the printed proto: its first field is on the message's line.
        message = re.sub(r":\s*\w+: .*$", "", message)
        fields: dict[str, str] = {}
        for line in proto:
            found = _PROTO_FIELD.match(line)
            if found:
                fields.setdefault(found.group(1), found.group(2))
        message += _describe_tensor_fields(fields)
    else:
        message = " ".join([message.strip(), *(line.strip() for line in rest)])
    return f"{kind.rsplit('.', 1)[-1]}: {message}"[:400]


def _describe_tensor_fields(fields: dict[str, str]) -> str:
    """Name the tensor the importer printed, its type and where its values are stored."""
    parts = []
    if "name" in fields:
        parts.append(f"tensor '{fields['name']}'")
    if fields.get("data_type", "").isdigit():
        import onnx

        try:
            parts.append(onnx.TensorProto.DataType.Name(int(fields["data_type"])))
        except ValueError:
            parts.append(f"data_type {fields['data_type']}")
    stored = [name for name in _VALUE_FIELDS if name in fields]
    if stored:
        parts.append(
            f"values in {stored[0]}: the importer reads this type only from raw_data "
            "(onnx.numpy_helper.from_array writes it)"
        )
    return f" ({', '.join(parts)})" if parts else ""


def export_torch_module(module: Any, example_inputs: tuple[Any, ...], work_dir: Path) -> Path:
    """Export a torch.nn.Module with example inputs to MLIR through iree-turbine."""
    try:
        from iree.turbine import aot
    except ImportError as error:
        raise IreetuneError(
            "tuning a torch module needs iree-turbine (pip install iree-turbine torch); see docs/model_tuning.md"
        ) from error
    work_dir.mkdir(parents=True, exist_ok=True)
    output = work_dir / "torch_module.mlir"
    exported = aot.export(module, *example_inputs)
    exported.save_mlir(str(output))
    return output
