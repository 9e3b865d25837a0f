"""Each bad input ends in one line that says what is wrong with it (issue 37, part 6).

The same harness as tests/commands/test_bad_inputs.py (its Case, workspace and snapshot; exit status 2,
one line starting `ireetune: error:`, no traceback, no file changed), over the classes of
fault a user meets first: a file name that is not UTF-8, a directory or a FIFO where a file is
expected, an ONNX model where MLIR is taken, a candidate the run does not have, a spec that
does not parse, an importer that fails, a `--try-flags` set that is refused, and a problem,
knob or recorded-space file that is too deep or not text. Each class is crossed with every
command it applies to.
"""

from __future__ import annotations

import argparse
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from ireetune.cli import build_parser, main
from ireetune.core.arguments import user_path
from tests.commands.test_bad_inputs import (  # noqa: F401 (the fixtures the workspace is made from)
    DEEP_JSON,
    Case,
    _prepare_workspace,
    _snapshot,
    compiled_folder,
    profiler_tree,
    use_workspace_temp_folder,
)
from tests.conftest import MATMUL_MODEL

# A byte no UTF-8 name holds, as Python hands it over from the command line (surrogateescape).
NOT_UTF8 = os.fsdecode(b"\xff")

# A spec whose second line does not parse.
BAD_SPEC = (
    "module attributes {transform.with_named_sequence} {\n"
    "  transform.named_sequence @__kernel_config( {\n}\n"
)
# A model run kept small, should it start.
TUNE_FEW = ("tune", "{model}", "--output-dir", "{runs}", "--no-db", "--num-candidates", "2")
PROFILE = ("profile", "matmul", "--m", "8", "--n", "8", "--k", "8", "--generated-dir", "{gen}")


def _write_onnx_matmul(path: Path, weights: TensorProto, **attributes: int) -> None:
    element = weights.data_type
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"], name="matmul_0", **attributes)],
        "matmul",
        [helper.make_tensor_value_info("X", element, [4, 8])],
        [helper.make_tensor_value_info("Y", element, [4, 16])],
        [weights],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def _write_inputs(_: Path, tmp: Path) -> None:
    """Write the files this module's cases name, beside the shared workspace's."""
    (tmp / f"{NOT_UTF8}.mlir").write_text(MATMUL_MODEL)
    os.mkfifo(tmp / "fifo.mlir")
    (tmp / "bad_spec.mlir").write_text(BAD_SPEC)
    (tmp / "deep.json").write_text(DEEP_JSON)
    (tmp / "binary.csv").write_bytes(b"\xff\xfe op,m,n,k\n")
    (tmp / "spaces").mkdir()
    (tmp / "spaces" / "deep.json").write_text(DEEP_JSON)
    _write_onnx_matmul(
        tmp / "model.onnx", onnx.numpy_helper.from_array(np.ones((8, 16), np.float32), "W")
    )
    # fp16 weights kept in int32_data, as onnx.helper.make_tensor(raw=False) writes them: the
    # importer reads fp16 only from raw_data.
    _write_onnx_matmul(
        tmp / "inline_fp16.onnx",
        helper.make_tensor("W", TensorProto.FLOAT16, [8, 16], np.ones(128, np.float16)),
    )
    # A node with an attribute its operator does not have: the ONNX checker's message names
    # the attribute, and its context line (the importer's last line) the node.
    _write_onnx_matmul(
        tmp / "bad_attribute.onnx",
        onnx.numpy_helper.from_array(np.ones((8, 16), np.float32), "W"),
        transpose=1,
    )


# Every place a command takes a file, with {X} where the file goes.
FILE_INPUTS = {
    "tune-dispatch": ("tune-dispatch", "{X}", "--output-dir", "{runs}"),
    "tune": ("tune", "{X}", "--output-dir", "{runs}", "--no-db"),
    "compile-model": ("compile", "{X}", "--target", "cpu", "--spec", "{spec}", "-o", "{tmp}/o.vmfb"),
    "compile-spec": ("compile", "{model}", "--target", "cpu", "--spec", "{X}", "-o", "{tmp}/o.vmfb"),
    "compile-flags-file": (
        "compile", "{model}", "--target", "cpu", "--flags-file", "{X}", "-o", "{tmp}/o.vmfb",
    ),
    "spec-check": ("spec", "check", "{X}"),
    "spec-show": ("spec", "show", "{X}"),
    "spec-show-model": ("spec", "show", "{spec}", "--model", "{X}"),
    "spec-link": ("spec", "link", "{X}", "-o", "{tmp}/linked.mlir"),
    "spec-dump-model": ("spec", "dump", "{X}", "--target", "cpu", "--spec", "{spec}"),
    "spec-dump-spec": ("spec", "dump", "{model}", "--target", "cpu", "--spec", "{X}"),
    "profile-problems": ("profile", "--problems", "{X}", "--generated-dir", "{gen}"),
    "profile-configs": (*PROFILE, "--configs", "{X}"),
    "db-import": ("db", "import", "{X}"),
    "tune-input-values": (*TUNE_FEW, "--input", "64x96xf32=@{X}"),
}  # fmt: skip
# The places that take a model as MLIR (an ONNX model there is named, with where it goes).
MLIR_MODEL_INPUTS = ("tune-dispatch", "compile-model", "spec-show-model", "spec-dump-model")
MLIR_SPEC_INPUTS = ("compile-spec", "spec-check", "spec-show", "spec-link", "spec-dump-spec")


def _with(arguments: tuple[str, ...], file: str) -> tuple[str, ...]:
    return tuple(argument.replace("{X}", file) for argument in arguments)


CASES = [
    # A file name that is not UTF-8: refused while parsing, naming the option.
    Case(
        "non-utf8-input",
        ("tune-dispatch", f"{{tmp}}/{NOT_UTF8}.mlir", "--output-dir", "{runs}"),
        "argument input: '",
    ),
    Case(
        "non-utf8-model",
        ("tune", f"{{tmp}}/{NOT_UTF8}.mlir", "--output-dir", "{runs}", "--no-db"),
        "\\xff.mlir' is not a valid UTF-8 name",
    ),
    Case(
        "non-utf8-output-dir",
        ("tune-dispatch", "{model}", "--output-dir", f"{{tmp}}/{NOT_UTF8}runs"),
        "argument --output-dir: '",
    ),
    Case(
        "non-utf8-compile-output",
        ("compile", "{model}", "--target", "cpu", "--spec", "{spec}", "-o", f"{{tmp}}/{NOT_UTF8}"),
        "is not a valid UTF-8 name",
    ),
    Case(
        "non-utf8-profile-output",
        (*PROFILE, "--output", f"{{tmp}}/{NOT_UTF8}.csv"),
        "argument --output: '",
    ),
    # A directory or a FIFO where a file is expected, everywhere a file is taken.
    *(
        Case(f"directory-{name}", _with(arguments, "{adir}"), "is a directory, not a file")
        for name, arguments in FILE_INPUTS.items()
    ),
    *(
        Case(
            f"fifo-{name}",
            _with(arguments, "{tmp}/fifo.mlir"),
            "is not a regular file: ",
        )
        for name, arguments in FILE_INPUTS.items()
    ),
    Case(
        "fifo-recorded-spaces",
        ("model", "train", "--spaces", "{tmp}/fifo.mlir", "--db", "{tmp}/model.sqlite"),
        "fifo.mlir is a FIFO, not a folder",
    ),
    # An ONNX model given where MLIR is taken.
    *(
        Case(
            f"onnx-{name}",
            _with(FILE_INPUTS[name], "{tmp}/model.onnx"),
            "is an ONNX model, not MLIR",
        )
        for name in MLIR_MODEL_INPUTS
    ),
    Case(
        "onnx-names-the-command-that-takes-it",
        _with(FILE_INPUTS["tune-dispatch"], "{tmp}/model.onnx"),
        "this command takes MLIR; `ireetune tune` takes ONNX models",
    ),
    *(
        Case(f"onnx-{name}", _with(FILE_INPUTS[name], "{tmp}/model.onnx"), "is an ONNX model")
        for name in MLIR_SPEC_INPUTS
    ),
    # A candidate the run does not have.
    Case(
        "replay-unknown-candidate",
        ("replay", "{folder}", "--candidate", "99"),
        "candidate 99 is not in the run",
    ),
    # A spec that does not parse: the spec and the parser's first error, never the model.
    Case(
        "spec-dump-unparsable-spec",
        _with(FILE_INPUTS["spec-dump-spec"], "{tmp}/bad_spec.mlir"),
        "bad_spec.mlir:2:",
    ),
    Case(
        "profile-unparsable-spec",
        _with(FILE_INPUTS["profile-configs"], "{tmp}/bad_spec.mlir"),
        "IREE rejects the spec",
    ),
    # The importer's reason, and the tensor it names.
    Case(
        "importer-failure",
        ("tune", "{tmp}/inline_fp16.onnx", "--output-dir", "{runs}", "--no-db"),
        "Unhandled ONNX TensorProto data (tensor 'W', FLOAT16, values in int32_data",
    ),
    Case(
        "importer-checker-failure",
        ("tune", "{tmp}/bad_attribute.onnx", "--output-dir", "{runs}", "--no-db"),
        "Unrecognized attribute: transpose for operator MatMul ==> Context: Bad node spec for "
        "node. Name: matmul_0",
    ),
    # --try-flags named as --try-flags, and checked as --flags is.
    *(
        Case(
            f"try-flags-{name}",
            (*TUNE_FEW, "--try-flags", text),
            f"--try-flags: {expected}",
        )
        for name, text, expected in (
            ("not-a-flag", "iree-opt-data-tiling", "'iree-opt-data-tiling' is not an iree"),
            ("reserved", "--iree-hal-target-device=cuda", "--iree-hal-target-device is set by"),
            ("unbalanced", "'--iree-opt-data-tiling", "cannot split"),
            ("unknown", "--iree-no-such-option", "iree-compile rejects the flags"),
            ("bad-value", "--iree-opt-data-tiling=maybe", "iree-compile rejects the flags"),
        )
    ),
    # Problem, knob and recorded-space files: too deep, or not text.
    Case(
        "problems-deep",
        ("profile", "--problems", "{tmp}/deep.json", "--generated-dir", "{gen}"),
        "deep.json nests deeper than 32 levels",
    ),
    Case(
        "problems-not-text",
        ("profile", "--problems", "{tmp}/binary.csv", "--generated-dir", "{gen}"),
        "binary.csv: it is not UTF-8 text (byte 0xff at offset 0)",
    ),
    Case(
        "knobs-deep",
        (*PROFILE, "--configs", "{tmp}/deep.json"),
        "knob file",
    ),
    Case(
        "recorded-spaces-deep",
        ("model", "train", "--spaces", "{tmp}/spaces", "--db", "{tmp}/model.sqlite"),
        "deep.json nests deeper than 32 levels",
    ),
]


@pytest.fixture
def fifo_unblocked(tmp_path: Path) -> Iterator[Callable[[], None]]:
    """Keep a reader of `fifo.mlir` from hanging the suite: a writer opens it (and closes it at
    once) whenever something opens it for reading; at the end the writer is released."""
    fifo = tmp_path / "fifo.mlir"
    writer = threading.Thread(target=lambda: os.close(os.open(fifo, os.O_WRONLY)), daemon=True)
    started = False

    def start() -> None:
        nonlocal started
        writer.start()
        started = True

    yield start
    if started and writer.is_alive():
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
        writer.join(5)


@pytest.mark.parametrize("case", [pytest.param(case, id=case.name) for case in CASES])
def test_bad_input_says_what_is_wrong_in_one_line(
    case: Case,
    compiled_folder: Path,  # noqa: F811
    profiler_tree: Path,  # noqa: F811
    matmul_benchmark: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    fifo_unblocked: Callable[[], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    use_workspace_temp_folder(tmp_path, monkeypatch)
    paths = _prepare_workspace(tmp_path, compiled_folder, profiler_tree, matmul_benchmark)
    _write_inputs(paths["folder"], tmp_path)
    arguments = [a.format(**{k: str(v) for k, v in paths.items()}) for a in case.arguments]
    capsys.readouterr()
    before = _snapshot(tmp_path)
    fifo_unblocked()

    status = main(arguments)

    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert status == 2, captured.err
    assert len(lines) == 1 and captured.err.endswith("\n"), captured.err
    assert lines[0].startswith("ireetune: error: "), captured.err
    assert case.expected in lines[0], lines[0]
    assert "Traceback" not in captured.err + captured.out
    assert _snapshot(tmp_path) == before


def _arguments() -> Iterator[tuple[tuple[str, ...], argparse.Action]]:
    """Yield every option and positional of every command, with the words that reach its
    parser (`spec`, `link`)."""
    pending: list[tuple[tuple[str, ...], argparse.ArgumentParser]] = [((), build_parser())]
    while pending:
        words, parser = pending.pop()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                # An alias (`model` for `ranker`) is the same parser under its old name.
                names = {choice.dest for choice in action._choices_actions}
                pending.extend(
                    ((*words, name), sub) for name, sub in action.choices.items() if name in names
                )
            else:
                yield words, action


PATH_ARGUMENTS = sorted(
    (
        (words, action.option_strings[-1] if action.option_strings else "", action)
        for words, action in _arguments()
        if action.type is user_path
    ),
    key=lambda found: (found[0], found[1], found[2].dest),
)


def test_every_path_argument_is_parsed_as_a_user_path() -> None:
    """No command takes a path the name check does not see (a new option uses `user_path`)."""
    assert [(words, action.dest) for words, action in _arguments() if action.type is Path] == []
    assert len(PATH_ARGUMENTS) >= 25


@pytest.mark.parametrize(
    ("words", "option", "action"),
    [
        pytest.param(*found, id=" ".join((*found[0], found[1] or found[2].dest)))
        for found in PATH_ARGUMENTS
    ],
)
def test_a_name_that_is_not_utf8_is_refused_by_every_path_argument(
    words: tuple[str, ...],
    option: str,
    action: argparse.Action,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = str(tmp_path / f"model{NOT_UTF8}.mlir")
    arguments = [*words, option, name] if option else [*words, name]

    status = main(arguments)

    assert (status, capsys.readouterr().err) == (
        2,
        f"ireetune: error: {' '.join(words)}: argument {argparse._get_action_name(action)}: "
        f"'{tmp_path}/model\\xff.mlir' is not a valid UTF-8 name (ireetune records file names "
        "in UTF-8; rename it)\n",
    )
    assert list(tmp_path.iterdir()) == []


def test_a_current_folder_that_is_not_utf8_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "model.mlir"
    model.write_text(MATMUL_MODEL)
    folder = tmp_path / f"here{NOT_UTF8}"
    folder.mkdir()
    monkeypatch.chdir(folder)

    status = main(["tune-dispatch", str(model)])

    assert (status, capsys.readouterr().err) == (
        2,
        f"ireetune: error: tune-dispatch: argument --output-dir: the current folder "
        f"{tmp_path}/here\\xff is not a valid UTF-8 name: give 'ireetune_runs' as an absolute "
        "path, or run from another folder\n",
    )
    assert list(folder.iterdir()) == []


def test_the_api_refuses_names_that_are_not_utf8_before_any_work(tmp_path: Path) -> None:
    from ireetune.core.errors import IreetuneError
    from ireetune.flows.dispatch.tuner import TuneOptions, tune_dispatch

    model = tmp_path / "model.mlir"
    model.write_text(MATMUL_MODEL)
    outputs = tmp_path / f"runs{NOT_UTF8}"
    with pytest.raises(IreetuneError) as excinfo:
        tune_dispatch(TuneOptions(input_path=model, output_dir=outputs, use_database=False))
    assert str(excinfo.value) == (
        f"output folder name is not valid UTF-8: {tmp_path}/runs\\xff (ireetune records file "
        "names in UTF-8; rename it)"
    )
    with pytest.raises(IreetuneError) as excinfo:
        tune_dispatch(
            TuneOptions(input_path=outputs / "model.mlir", output_dir=tmp_path, use_database=False)
        )
    assert str(excinfo.value).startswith("input file name is not valid UTF-8: ")
    assert sorted(tmp_path.iterdir()) == [model]


def test_mlir_bytecode_is_read_as_the_text_it_holds(tmp_path: Path) -> None:
    """MLIR bytecode (which `tune` takes as .mlirbc) is no binary file to refuse."""
    import io

    from iree.compiler import ir

    from ireetune.frontend.dispatches import read_mlir_file

    with ir.Context():
        module = ir.Module.parse(MATMUL_MODEL)
        bytecode = io.BytesIO()
        module.operation.write_bytecode(bytecode)
        text = str(module)
    path = tmp_path / "model.mlirbc"
    path.write_bytes(bytecode.getvalue())
    assert read_mlir_file(path) == text
