"""Turn a model file (MLIR, ONNX) or a torch module into MLIR that iree-compile accepts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ireetune.errors import IreetuneError
from ireetune.input_files import check_input_file
from ireetune.tools import find_tool, first_error_line, path_argument, run_tool

# ONNX models older than this opset are upgraded before import; iree-import-onnx handles 17.
ONNX_OPSET = 17


# The scope an externalized ONNX model's weights are named in (`#stream.parameter.named<"model"::
# "name">`); the runtime's parameter provider is created under the same scope.
PARAMETER_SCOPE = "model"


def import_model(model_path: Path, work_dir: Path, parameters_path: Path | None = None) -> Path:
    """Return an MLIR file for the model: the file itself, or an import of an ONNX model.

    With `parameters_path`, an ONNX model's weights go into that IREE parameter archive (.irpa)
    instead of the MLIR: every binary compiled from it is then small, and loads the weights
    from the archive at run time (model/worker.py).
    """
    check_input_file(model_path, "model file")
    if not model_path.is_file():
        raise IreetuneError(f"model file not found: {model_path}")
    suffix = model_path.suffix.lower()
    if suffix in (".mlir", ".mlirbc"):
        return model_path
    if suffix == ".onnx":
        return _import_onnx(model_path, work_dir, parameters_path)
    raise IreetuneError(f"unknown model format '{suffix}': give a .mlir or .onnx file")


def _import_onnx(model_path: Path, work_dir: Path, parameters_path: Path | None) -> Path:
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
        onnx.save(model, str(source))
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
            f"iree-import-onnx failed on {model_path}: {first_error_line(result.stderr)}"
        )
    return output


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
