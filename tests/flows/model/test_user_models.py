"""Models as users have them: integer, boolean and bf16 inputs, a module of several functions,
a dynamic batch fixed by `--input`, and a run whose later phase fails after its flag phase
decided.

Each model is built here (onnx.helper graphs, tiny .mlir) and goes through the real `ireetune
tune --target cpu --no-flag-search` with the fast settings, or through the smallest real code
path that covers it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from ireetune.cli import main
from ireetune.core.input_archive import read_input_archive, write_input_archive
from ireetune.database.run_files import dump_record, validate_record
from ireetune.flows.model.options import ModelTuneOptions
from ireetune.flows.model.options_file import ModelOptionsFile, options_of
from ireetune.flows.model.state import MODEL_RUN_NAME
from ireetune.frontend.model_inputs import InputSpec, read_entry_signature
from ireetune.model.prepare import prepare_model_source
from tests.commands.test_bad_inputs import _snapshot, use_workspace_temp_folder
from tests.conftest import TEST_TARGET
from tests.flows.model.test_model_resume import USER_FLAG, after_flags, model  # noqa: F401  (fixtures)

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

FAST = (
    "--target", TEST_TARGET, "--no-flag-search", "--num-candidates", "2",
    "--candidates-per-dispatch", "1", "--rounds", "2", "--no-progress", "--no-db",
    "--no-onnxruntime",
)  # fmt: skip


def _matmul(name: str, m: int, k: int, n: int, lhs: str = "") -> str:
    lhs = lhs or f"tensor<{m}x{k}xf32>"
    return f"""
func.func @{name}(%lhs: {lhs}, %rhs: tensor<{k}x{n}xf32>) -> tensor<{m}x{n}xf32> {{
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<{m}x{n}xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  %r = linalg.matmul ins(%lhs, %rhs : {lhs}, tensor<{k}x{n}xf32>)
                     outs(%init : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  return %r : tensor<{m}x{n}xf32>
}}
"""


# Two functions: @small's matmul is not @big's; a run must profile, time and tune one of them.
TWO_FUNCTIONS = _matmul("small", 16, 32, 16) + _matmul("big", 64, 96, 128)

# A dynamic batch: the matmul's M is the first input's first size.
DYNAMIC_BATCH = """
func.func @main(%lhs: tensor<?x96xf32>, %rhs: tensor<96x128xf32>) -> tensor<?x128xf32> {
  %zero = arith.constant 0.0 : f32
  %c0 = arith.constant 0 : index
  %m = tensor.dim %lhs, %c0 : tensor<?x96xf32>
  %empty = tensor.empty(%m) : tensor<?x128xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<?x128xf32>) -> tensor<?x128xf32>
  %r = linalg.matmul ins(%lhs, %rhs : tensor<?x96xf32>, tensor<96x128xf32>)
                     outs(%init : tensor<?x128xf32>) -> tensor<?x128xf32>
  return %r : tensor<?x128xf32>
}
"""


def _tune(model_path: Path, output: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ireetune.cli", "tune", str(model_path), "--output-dir",
         str(output), *FAST, *extra],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip


def _report(output: Path) -> dict[str, object]:
    (run_dir,) = output.iterdir()
    report: dict[str, object] = json.loads((run_dir / "report.json").read_text())
    return report


def _integer_model(path: Path) -> None:
    """An ONNX model of the inputs the importer spells si8, ui8, si64, i1 and bf16: a
    MatMulInteger, a QLinearMatMul, a Gather from a table of 3 rows, a Where and a bf16 MatMul."""
    rng = np.random.default_rng(0)
    bf16_weights = helper.make_tensor(
        "wb", TensorProto.BFLOAT16, [16, 8],
        rng.standard_normal((16, 8)).astype(ml_dtypes.bfloat16).tobytes(), raw=True,
    )  # fmt: skip
    nodes = [
        helper.make_node("MatMulInteger", ["a", "wi"], ["mi"]),
        helper.make_node("QLinearMatMul", ["q", "s", "zp", "wq", "s", "zp", "s", "zp"], ["qo"]),
        helper.make_node("Gather", ["table", "idx"], ["g"], axis=0),
        helper.make_node("Where", ["cond", "g", "zeros"], ["w"]),
        helper.make_node("MatMul", ["hb", "wb"], ["ho"]),
    ]
    value = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes, "users",
        [value("a", TensorProto.INT8, [8, 16]), value("q", TensorProto.UINT8, [8, 16]),
         value("idx", TensorProto.INT64, [4]), value("cond", TensorProto.BOOL, [4, 16]),
         value("hb", TensorProto.BFLOAT16, [4, 16])],
        [value("mi", TensorProto.INT32, [8, 8]), value("qo", TensorProto.UINT8, [8, 8]),
         value("w", TensorProto.FLOAT, [4, 16]), value("ho", TensorProto.BFLOAT16, [4, 8])],
        [numpy_helper.from_array(rng.integers(-128, 128, (16, 8)).astype(np.int8), "wi"),
         numpy_helper.from_array(rng.integers(0, 256, (16, 8)).astype(np.uint8), "wq"),
         numpy_helper.from_array(np.array(0.05, np.float32), "s"),
         numpy_helper.from_array(np.array(128, np.uint8), "zp"),
         numpy_helper.from_array(rng.standard_normal((3, 16)).astype(np.float32), "table"),
         numpy_helper.from_array(np.zeros((4, 16), np.float32), "zeros"), bf16_weights],
    )  # fmt: skip
    model_proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model_proto.ir_version = 8
    onnx.save(model_proto, str(path))


def test_integer_boolean_and_bf16_inputs_are_made_and_fed(tmp_path: Path) -> None:
    model_path = tmp_path / "users.onnx"
    _integer_model(model_path)

    completed = _tune(model_path, tmp_path / "runs")

    assert completed.returncode == 0, completed.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    inputs = read_input_archive(run_dir / "inputs.npz")
    assert [(str(a.dtype), a.shape) for a in inputs] == [
        ("int8", (8, 16)), ("uint8", (8, 16)), ("int64", (4,)), ("bool", (4, 16)),
        ("bfloat16", (4, 16)),
    ]  # fmt: skip
    # The gather's indices stay within its table's 3 rows; 8-bit operands take their range.
    assert inputs[2].min() >= 0 and inputs[2].max() < 3
    assert inputs[0].min() < -64 and inputs[1].max() > 192
    problems = " ".join(str(d["problem"]) for d in _report(tmp_path / "runs")["dispatches"])  # type: ignore[attr-defined]
    assert "matmul_8x8x16_i8_i8_i32" in problems and "bf16" in problems


def test_an_input_spelled_as_the_importer_spells_it_is_taken(tmp_path: Path) -> None:
    model_path = tmp_path / "users.onnx"
    _integer_model(model_path)
    from ireetune.frontend.model_import import import_model

    mlir_path = import_model(model_path, tmp_path / "import")
    given = ["8x16xsi8=3", "8x16xui8", "4xsi64", "4x16xi1=1", "4x16xbf16"]

    _, function, specs = prepare_model_source(mlir_path, "", given, tmp_path / "work")

    assert function == "users"
    assert [(s.element_type, s.value, s.index_bound) for s in specs] == [
        ("si8", "3", 0), ("ui8", "", 0), ("si64", "", 3), ("i1", "1", 0), ("bf16", "", 0),
    ]  # fmt: skip


def test_bf16_inputs_keep_their_type_through_the_inputs_archive(tmp_path: Path) -> None:
    values = np.arange(6, dtype=np.float32).reshape(2, 3).astype(ml_dtypes.bfloat16)
    write_input_archive(tmp_path / "inputs.npz", [values, np.array([True, False])])

    read = read_input_archive(tmp_path / "inputs.npz")

    assert [a.dtype for a in read] == [np.dtype(ml_dtypes.bfloat16), np.dtype(bool)]
    assert read[0].tolist() == values.tolist()


def test_function_names_the_one_function_profiled_timed_and_tuned(tmp_path: Path) -> None:
    model_path = tmp_path / "two.mlir"
    model_path.write_text(TWO_FUNCTIONS)

    completed = _tune(model_path, tmp_path / "runs", "--function", "big")

    assert completed.returncode == 0, completed.stderr
    report = _report(tmp_path / "runs")
    dispatches = report["dispatches"]
    assert [(d["name"], d["problem"]) for d in dispatches] == [  # type: ignore[attr-defined]
        ("big_dispatch_0", "matmul_64x128x96_f32_f32_f32")
    ]
    (run_dir,) = (tmp_path / "runs").iterdir()
    state = json.loads((run_dir / "model_run.json").read_text())
    assert (state["options"]["function"], state["model"]["function"]) == ("big", "big")


@pytest.mark.parametrize(
    ("model_text", "arguments", "expected"),
    [
        (
            TWO_FUNCTIONS,
            (),
            "ireetune: error: the model has 2 public functions (@small, @big): name the one to "
            "tune with --function\n",
        ),
        (
            TWO_FUNCTIONS,
            ("--function", "medium"),
            "ireetune: error: --function medium: the model has no public function of that name "
            "(it has @small, @big)\n",
        ),
        (
            DYNAMIC_BATCH,
            ("--input", "8x95xf32", "--input", "96x128xf32"),
            "ireetune: error: --input 1 is 8x95xf32; the model's @main takes ?x96xf32 there\n",
        ),
        (
            DYNAMIC_BATCH,
            (),
            "ireetune: error: the model has dynamic shapes (argument '%lhs' of @main is "
            "?x96xf32); ireetune tunes static shapes: give the sizes to tune for with --input, "
            "once per input (e.g. --input 1x96xf32)\n",
        ),
        (
            TWO_FUNCTIONS + "func.func @count(%n: i32) -> i32 {\n  return %n : i32\n}\n",
            ("--function", "count"),
            "ireetune: error: cannot make inputs for argument '%n: i32' of @count: ireetune "
            "makes tensor inputs only\n",
        ),
    ],
    ids=[
        "several-functions",
        "unknown-function",
        "input-unlike-the-signature",
        "dynamic",
        "not-a-tensor",
    ],  # fmt: skip
)
def test_a_model_the_run_cannot_take_is_refused_in_one_line(
    model_text: str,
    arguments: tuple[str, ...],
    expected: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    use_workspace_temp_folder(tmp_path, monkeypatch)
    model_path = tmp_path / "model.mlir"
    model_path.write_text(model_text)
    before = _snapshot(tmp_path)

    status = main(
        ["tune", str(model_path), "--output-dir", str(tmp_path / "runs"), *FAST, *arguments]
    )

    assert (status, capsys.readouterr().err) == (2, expected)
    assert _snapshot(tmp_path) == before


def test_a_dynamic_batch_is_fixed_by_the_input_given(tmp_path: Path) -> None:
    model_path = tmp_path / "dynamic.mlir"
    model_path.write_text(DYNAMIC_BATCH)

    completed = _tune(
        model_path, tmp_path / "runs", "--input", "32x96xf32", "--input", "96x128xf32"
    )

    assert completed.returncode == 0, completed.stderr
    dispatches = _report(tmp_path / "runs")["dispatches"]
    assert [d["problem"] for d in dispatches] == ["matmul_32x128x96_f32_f32_f32"]  # type: ignore[attr-defined]


def options_from_json(data: dict[str, Any], jobs: int | None) -> ModelTuneOptions:
    """Read the run's options back as model_run.json holds them (`jobs`, when given, replaces the
    run's)."""
    stored = validate_record(Path(MODEL_RUN_NAME), ModelOptionsFile, data)
    return options_of(stored, jobs or stored.jobs, stored.database_path)


def test_the_split_flow_keeps_the_function_in_its_run_file() -> None:
    options = ModelTuneOptions(model_path=Path("two.mlir"), function="big")

    assert options_from_json(dump_record(ModelTuneOptions, options), jobs=None).function == "big"


def test_the_flag_phase_keeps_tuned_flags_the_moment_it_decides(
    after_flags: Path,  # noqa: F811
) -> None:
    # Killed once the flag phase was saved, before any later phase ran: the flags are there.
    assert (after_flags / "tuned_flags.txt").read_text().splitlines() == [USER_FLAG]


def test_an_onnx_dynamic_batch_is_fixed_by_the_input_given(tmp_path: Path) -> None:
    from ireetune.frontend.dispatches import dump_dispatches
    from ireetune.frontend.model_import import import_model
    from ireetune.model.profile import describe_dispatches
    from ireetune.targets import parse_target

    weights = numpy_helper.from_array(np.ones((32, 16), np.float32), "w")
    value = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
        "batch",
        [value("x", TensorProto.FLOAT, ["batch", 32])],
        [value("y", TensorProto.FLOAT, ["batch", 16])],
        [weights],
    )
    model_proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model_proto.ir_version = 8
    onnx.save(model_proto, str(tmp_path / "batch.onnx"))
    mlir_path = import_model(tmp_path / "batch.onnx", tmp_path / "import")

    source, function, specs = prepare_model_source(mlir_path, "", ["8x32xf32"], tmp_path / "work")

    assert (source.parent, function, [s.shape for s in specs]) == (
        tmp_path / "work",
        "batch",
        [(8, 32)],
    )
    target = parse_target(TEST_TARGET)
    dumped = dump_dispatches(source, target, tmp_path / "dumps", timeout_s=120)
    problems = [p.problem for p in describe_dispatches(dumped, {}, {}, target)]
    assert any(problem.startswith("matmul_8x16x32_f32") for problem in problems), problems


def test_the_split_flag_phase_keeps_tuned_flags_the_moment_it_decides(tmp_path: Path) -> None:
    from tests.flows.model.test_split_flags import NO_EFFECT, _prepare

    # A set without a binary of its own is decided on the compile host; the run then waits for
    # the device to profile the model, and the flags are already there.
    run_dir = _prepare(tmp_path / "runs", "--try-flags", " ".join(NO_EFFECT), "--flags", USER_FLAG)

    assert json.loads((run_dir / MODEL_RUN_NAME).read_text())["split"]["flags"]["decided"]
    assert (run_dir / "tuned_flags.txt").read_text().splitlines() == [USER_FLAG]


def test_saved_bf16_and_boolean_outputs_are_compared(tmp_path: Path) -> None:
    from ireetune.model.outputs import outputs_match

    bf16 = np.linspace(-2, 2, 8, dtype=np.float32).astype(ml_dtypes.bfloat16)
    flags = np.array([True, False, True])
    # As a worker saves them: bf16 reads back as raw 2-byte values.
    np.savez(tmp_path / "outputs.npz", bf16, flags)
    with np.load(tmp_path / "outputs.npz") as archive:
        saved = [archive["arr_0"], archive["arr_1"]]

    assert outputs_match(saved, [bf16, flags]) == (True, "")
    assert outputs_match(saved, [bf16 * 8, flags]) == (False, "output 0: 8 of 8 elements differ")
    assert outputs_match(saved, [bf16, ~flags]) == (False, "output 1: 3 of 3 elements differ")


def test_a_quoted_function_name_is_read_as_the_function() -> None:
    # PyTorch's ONNX exports name their one function `@"torch-jit-export"` once imported.
    text = (
        'func.func @"torch-jit-export"(%arg0: !torch.vtensor<[4,10],f32>) -> '
        "!torch.vtensor<[4,3],f32> attributes {torch.onnx_meta.ir_version = 8 : si64} {\n}\n"
    )
    assert read_entry_signature(text) == ("torch-jit-export", [InputSpec((4, 10), "f32")])
