"""A run folder never runs or writes anything of its own choosing (flows/handoff/folder_trust.py).

For every command that reads a run folder, each tampering (a flag outside the allow-list that
would run a script, a dump flag that writes outside, a path outside, a planted link, a huge
number) ends in exit status 2, one line `ireetune: error: ...`, no traceback, the script never
run and the workspace (the folder and everything beside it) unchanged. The folders are made by
the real product at small sizes; a flag or database the run was tuned with passes when the
command line gives it again.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ireetune.cli import main
from ireetune.flows.model.state import MODEL_RUN_NAME
from tests.commands.test_bad_inputs import _snapshot
from tests.conftest import FAST_RUN_ARGS, MATMUL_MODEL, REPOSITORY

EXAMPLES = REPOSITORY / "examples"
# A flag the flag search never writes, that a user may tune with (`--flags`).
USER_FLAG = "--iree-opt-strip-assertions"
QUICK_MODEL = (
    "--num-candidates", "2", "--candidates-per-dispatch", "1", "--rounds", "2",
    "--max-dispatches", "1", "--no-flag-search", "--no-progress",
)  # fmt: skip
HUGE = 10**18

Edit = Callable[[Any], object]


def _edit_json(path: Path, edit: Edit) -> None:
    document = json.loads(path.read_text())
    edit(document)
    path.write_text(json.dumps(document))


def _the_run(output: Path) -> Path:
    (run_dir,) = [path for path in output.iterdir() if path.is_dir()]
    return run_dir


# --- The folders, made by the product --------------------------------------------------------


@pytest.fixture(scope="module")
def model_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An in-process model run tuned with a user's flag, its last phase (the report) undone:
    `continue` has one phase left to run."""
    output = tmp_path_factory.mktemp("model")
    model = output / "mlp.mlir"
    shutil.copy(EXAMPLES / "mlp.mlir", model)
    arguments = ["tune", str(model), "--output-dir", str(output / "runs"), *QUICK_MODEL]
    assert main([*arguments, "--flags", USER_FLAG]) == 0
    run_dir = _the_run(output / "runs")
    _edit_json(run_dir / MODEL_RUN_NAME, lambda run: run["progress"]["done"].remove("report"))
    return run_dir


@pytest.fixture(scope="module")
def killed_dispatch_run(matmul_benchmark: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dispatch run tuned with a user's flag, as a kill during its checks leaves it (its
    measure stage saved)."""
    output = tmp_path_factory.mktemp("dispatch")
    arguments = [
        "tune-dispatch", str(matmul_benchmark), "--num-candidates", "2", "--output-dir",
        str(output), *FAST_RUN_ARGS, "--no-db", "--no-progress", "--seed", "3", "--flags", USER_FLAG,
    ]  # fmt: skip
    assert main(arguments) == 0
    run_dir = _the_run(output)
    _edit_json(
        run_dir / "results.json",
        lambda run: run.update(
            progress={"done": ["specs", "compile", "measure"]}, outcome="running"
        ),
    )
    (run_dir / "best_spec.mlir").unlink(missing_ok=True)
    return run_dir


@pytest.fixture(scope="module")
def compiled_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dispatch run folder written by `tune-dispatch --stop-after compile`."""
    output = tmp_path_factory.mktemp("compiled")
    model = output / "matmul.mlir"
    model.write_text(MATMUL_MODEL)
    arguments = [
        "tune-dispatch", str(model), "--num-candidates", "2", "--output-dir", str(output / "runs"),
        *FAST_RUN_ARGS, "--stop-after", "compile", "--references", "all", "--no-db", "--no-progress",
    ]  # fmt: skip
    assert main(arguments) == 0
    return _the_run(output / "runs")


@pytest.fixture(scope="module")
def measured_folder(compiled_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The compiled folder after `benchmark-folder`: what `finish` reads."""
    folder = tmp_path_factory.mktemp("measured") / compiled_folder.name
    shutil.copytree(compiled_folder, folder)
    assert main(["benchmark-folder", str(folder)]) == 0
    return folder


@pytest.fixture(scope="module")
def finished_folder(measured_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The measured folder after `finish`: what `replay` reads."""
    folder = tmp_path_factory.mktemp("finished") / measured_folder.name
    shutil.copytree(measured_folder, folder)
    assert main(["finish", str(folder)]) == 0
    return folder


@pytest.fixture(scope="module")
def split_prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A split model run after its compile phase: what `device-step` reads."""
    output = tmp_path_factory.mktemp("split")
    arguments = ["tune", str(EXAMPLES / "mlp.mlir"), "--stop-after", "compile", "--no-db"]
    assert main([*arguments, "--output-dir", str(output), *QUICK_MODEL]) == 0
    return _the_run(output)


@pytest.fixture(scope="module")
def split_measured(split_prepared: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The split run after its device step: what `continue` reads next."""
    folder = tmp_path_factory.mktemp("split_measured") / split_prepared.name
    shutil.copytree(split_prepared, folder)
    assert main(["device-step", str(folder)]) == 0
    return folder


# --- The tamperings --------------------------------------------------------------------------


@dataclass(frozen=True)
class Outside:
    """What lies beside the folder: a script a flag would run, the file it would mark, a folder
    and a file a dump or a link would write into."""

    script: Path
    marker: Path
    folder: Path
    file: Path

    @property
    def linker_flag(self) -> str:
        return f"--iree-llvmcpu-embedded-linker-path={self.script}"

    @property
    def dump_flag(self) -> str:
        return f"--iree-hal-dump-executable-sources-to={self.folder}"


def _make_outside(tmp: Path) -> Outside:
    outside = Outside(tmp / "linker.sh", tmp / "marker", tmp / "elsewhere", tmp / "target.txt")
    outside.script.write_text(f"#!/bin/sh\ntouch {outside.marker}\nexit 1\n")
    outside.script.chmod(outside.script.stat().st_mode | stat.S_IEXEC)
    outside.folder.mkdir()
    outside.file.write_text("a file of the user's\n")
    return outside


Tamper = Callable[[Path, Outside], object]


def _in(relative: str, edit: Callable[[Any, Outside], object]) -> Tamper:
    """Edit the folder's JSON file `relative` ("*/handoff.json": the first dispatch folder's)."""

    def tamper(folder: Path, outside: Outside) -> None:
        path = sorted(folder.glob(relative))[0]
        _edit_json(path, lambda document: edit(document, outside))

    return tamper


def _add(*keys: str, flag: Callable[[Outside], str]) -> Callable[[Any, Outside], object]:
    """Append a flag to the list at document[keys...]."""

    def edit(document: Any, outside: Outside) -> None:
        for key in keys:
            document = document[key]
        document.append(flag(outside))

    return edit


def _set(*keys: str, value: Callable[[Outside], object]) -> Callable[[Any, Outside], object]:
    def edit(document: Any, outside: Outside) -> None:
        *parents, last = keys
        for key in parents:
            document = document[int(key)] if isinstance(document, list) else document[key]
        document[last] = value(outside)

    return edit


def _link(relative: str, to_folder: bool = False) -> Tamper:
    """Plant a link at `relative` (replacing what is there) to the file or folder outside."""

    def tamper(folder: Path, outside: Outside) -> None:
        path = folder / relative
        if path.is_dir():
            shutil.rmtree(path)
        path.unlink(missing_ok=True)
        path.symlink_to(outside.folder if to_folder else outside.file)

    return tamper


def _linker(outside: Outside) -> str:
    return outside.linker_flag


def _dump(outside: Outside) -> str:
    return outside.dump_flag


def _database(outside: Outside) -> str:
    return str(outside.folder / "tuning.sqlite")


def _outside_file(outside: Outside) -> str:
    return str(outside.file)


NOT_ALLOWED = "is not a flag a run folder may carry"
LINK = "is a symbolic link"
AT_MOST = "must be at most"
INSIDE = "must be a path inside the run folder"
DATABASE = "a run folder does not choose the database"


@dataclass(frozen=True)
class Command:
    """A command that reads a folder: its folder fixture, its arguments after the folder, and
    each tampering with a part of the one line it ends in."""

    name: str
    folder: str
    arguments: tuple[str, ...]
    tamperings: dict[str, tuple[Tamper, str]]


COMMANDS = [
    Command(
        "continue-model", "model_run", ("continue", "{run}", "--flags", USER_FLAG),
        {
            "flag": (_in(MODEL_RUN_NAME, _add("options", "extra_flags", flag=_linker)), NOT_ALLOWED),
            "dump": (_in(MODEL_RUN_NAME, _add("options", "extra_flags", flag=_dump)), NOT_ALLOWED),
            "path": (_in(MODEL_RUN_NAME, _set("options", "database_path", value=_database)), DATABASE),
            "link": (_link("report.txt"), LINK),
            "number": (_in(MODEL_RUN_NAME, _set("options", "rounds", value=lambda _: HUGE)), AT_MOST),
        },
    ),
    Command(
        "resume", "killed_dispatch_run", ("resume", "{run}", "--flags", USER_FLAG),
        {
            "flag": (_in("results.json", _add("global_flags", flag=_linker)), NOT_ALLOWED),
            "dump": (_in("run_options.json", _add("options", "extra_flags", flag=_dump)), NOT_ALLOWED),
            "path": (_in("run_options.json", _set("options", "database_path", value=_database)), DATABASE),
            "link": (_link("best_spec.mlir"), LINK),
            "number": (_in("run_options.json", _set("options", "repetitions", value=lambda _: HUGE)), AT_MOST),
        },
    ),
    Command(
        "device-step", "split_prepared", ("device-step", "{run}"),
        {
            "flag": (_in(MODEL_RUN_NAME, _add("options", "extra_flags", flag=_linker)), NOT_ALLOWED),
            "dump": (_in("*/*/handoff.json", _add("global_flags", flag=_dump)), NOT_ALLOWED),
            "path": (_in("device_step.json", _set("inputs", value=_outside_file)), INSIDE),
            "link": (_link("device", to_folder=True), LINK),
            "number": (_in("device_step.json", _set("profile", "rounds", value=lambda _: HUGE)), AT_MOST),
        },
    ),
    Command(
        "continue-split", "split_measured", ("continue", "{run}"),
        {
            "flag": (_in(MODEL_RUN_NAME, _add("options", "extra_flags", flag=_linker)), NOT_ALLOWED),
            "dump": (_in(MODEL_RUN_NAME, _set("options", "flag_sets", value=lambda o: [[o.dump_flag]])), NOT_ALLOWED),
            "path": (_in(MODEL_RUN_NAME, _set("options", "database_path", value=_database)), DATABASE),
            "link": (_link("report.txt"), LINK),
            "number": (_in(MODEL_RUN_NAME, _set("options", "rounds", value=lambda _: HUGE)), AT_MOST),
        },
    ),
    Command(
        "benchmark-folder", "compiled_folder", ("benchmark-folder", "{run}"),
        {
            "flag": (_in("handoff.json", _add("global_flags", flag=_linker)), NOT_ALLOWED),
            "dump": (_in("results.json", _add("global_flags", flag=_dump)), NOT_ALLOWED),
            "path": (_in("handoff.json", _set("candidates", "0", "vmfb", value=_outside_file)), INSIDE),
            "link": (_link("benchmark_results.json"), LINK),
            "number": (_in("handoff.json", _set("repetitions", value=lambda _: HUGE)), AT_MOST),
        },
    ),
    Command(
        "finish", "measured_folder", ("finish", "{run}"),
        {
            "flag": (_in("handoff.json", _add("global_flags", flag=_linker)), NOT_ALLOWED),
            "dump": (_in("results.json", _add("global_flags", flag=_dump)), NOT_ALLOWED),
            "path": (_in("results.json", _set("candidates", "1", "spec_path", value=_outside_file)), INSIDE),
            "link": (_link("verify/reference_1.vmfb"), LINK),
            "number": (_in("handoff.json", _set("confirm_rounds", value=lambda _: HUGE)), AT_MOST),
        },
    ),
    Command(
        "replay", "finished_folder", ("replay", "{run}", "--rounds", "2", "--repetitions", "2"),
        {
            "flag": (_in("results.json", _add("global_flags", flag=_linker)), NOT_ALLOWED),
            "dump": (_in("run_options.json", _add("options", "extra_flags", flag=_dump)), NOT_ALLOWED),
            "path": (_in("results.json", _set("candidates", "1", "binary_path", value=_outside_file)), INSIDE),
            "link": (_link("binaries", to_folder=True), LINK),
            "number": (_in("results.json", _set("candidates", "0", "batch", value=lambda _: HUGE)), AT_MOST),
        },
    ),
]  # fmt: skip
TAMPERINGS = ("flag", "dump", "path", "link", "number")


def _run(arguments: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    status = main(arguments)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    return status, captured.err


def _copy(request: pytest.FixtureRequest, name: str, tmp_path: Path) -> Path:
    source: Path = request.getfixturevalue(name)
    folder = tmp_path / "runs" / source.name
    shutil.copytree(source, folder, symlinks=True)
    return folder


@pytest.mark.parametrize("tampering", TAMPERINGS)
@pytest.mark.parametrize("command", COMMANDS, ids=[command.name for command in COMMANDS])
def test_a_tampered_folder_is_refused_before_anything_runs_or_is_written(
    command: Command,
    tampering: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder = _copy(request, command.folder, tmp_path)
    outside = _make_outside(tmp_path)
    tamper, expected = command.tamperings[tampering]
    tamper(folder, outside)
    before = _snapshot(tmp_path)

    status, error = _run([a.format(run=folder) for a in command.arguments], capsys)

    assert status == 2, error
    assert error.count("\n") == 1 and error.startswith("ireetune: error: "), error
    assert expected in error, error
    assert not outside.marker.exists()
    assert _snapshot(tmp_path) == before


def test_the_flags_a_run_was_tuned_with_pass_when_given_again(
    request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model_run = _copy(request, "model_run", tmp_path / "model")
    status, error = _run(["continue", str(model_run)], capsys)
    assert status == 2
    assert error == (
        f"ireetune: error: {model_run / MODEL_RUN_NAME}: options.extra_flags: '{USER_FLAG}' is "
        "not a flag a run folder may carry (only the flag search's options, see "
        f"`ireetune/targets/*/flags.py`); a run tuned with --flags {USER_FLAG} continues with "
        f"`ireetune continue RUN --flags {USER_FLAG}`\n"
    )
    status, error = _run(["continue", str(model_run), "--flags", USER_FLAG], capsys)
    assert status == 0, error
    assert json.loads((model_run / MODEL_RUN_NAME).read_text())["progress"]["done"][-1] == "report"

    dispatch_run = _copy(request, "killed_dispatch_run", tmp_path / "dispatch")
    status, error = _run(["resume", str(dispatch_run)], capsys)
    assert status == 2 and f"`ireetune continue RUN --flags {USER_FLAG}`" in error, error
    status, error = _run(["resume", str(dispatch_run), "--flags", "--iree-opt-level=O1"], capsys)
    assert status == 2 and "was not tuned with '--iree-opt-level=O1'" in error, error
    status, error = _run(["resume", str(dispatch_run), "--flags", USER_FLAG], capsys)
    assert status == 0, error
    assert (
        json.loads((dispatch_run / "results.json").read_text())["progress"]["done"][-1] == "decide"
    )
    status, error = _run(["replay", str(dispatch_run)], capsys)
    assert status == 2 and f"`ireetune replay RUN --flags {USER_FLAG}`" in error, error


def test_a_database_the_folder_names_is_used_when_given_again(
    request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dispatch_run = _copy(request, "killed_dispatch_run", tmp_path)
    database = tmp_path / "mine.sqlite"
    _edit_json(
        dispatch_run / "run_options.json",
        lambda run: run["options"].update(database_path=str(database), use_database=True),
    )

    status, error = _run(["resume", str(dispatch_run), "--flags", USER_FLAG], capsys)
    assert status == 2 and f"continues with `ireetune continue RUN --db {database}`" in error, error
    assert not database.exists()

    arguments = ["resume", str(dispatch_run), "--flags", USER_FLAG, "--db", str(database)]
    status, error = _run(arguments, capsys)
    assert status == 0, error
    assert database.is_file()


def test_report_writes_into_no_folder_that_holds_a_link(
    request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _copy(request, "finished_folder", tmp_path)
    outside = _make_outside(tmp_path)
    _link("report.html")(folder, outside)
    before = _snapshot(tmp_path)

    status, error = _run(["report", str(folder)], capsys)

    assert status == 2 and error == (
        f"ireetune: error: {folder / 'report.html'} is a symbolic link: a run folder holds its "
        "own files and ireetune neither reads nor writes through a link (replace it with the "
        "file)\n"
    )
    assert _snapshot(tmp_path) == before


def test_a_model_run_compiles_its_own_copy_never_a_model_its_folder_names(
    model_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _copy_folder(model_run, tmp_path)
    stored = json.loads((folder / MODEL_RUN_NAME).read_text())
    # The run's own copy of the model, under the same name as the user's file.
    assert stored["model"]["mlir"] == f"import/{Path(stored['options']['model_path']).name}"
    outside = _make_outside(tmp_path)

    def point_outside(document: Any) -> None:
        document["options"]["model_path"] = str(outside.file)
        document["model"]["source_sha256"] = hashlib.sha256(outside.file.read_bytes()).hexdigest()
        document["model"]["mlir"] = ""
        document["model"]["mlir_sha256"] = document["model"]["source_sha256"]

    _edit_json(folder / MODEL_RUN_NAME, point_outside)
    before = _snapshot(tmp_path)

    status, error = _run(["continue", str(folder), "--flags", USER_FLAG], capsys)

    assert (status, error) == (
        2,
        f"ireetune: error: {folder / MODEL_RUN_NAME}: the run holds no copy of its model (a "
        "folder written before runs kept one): start a new run with "
        f"`ireetune tune {outside.file}`\n",
    )
    assert _snapshot(tmp_path) == before


def _copy_folder(source: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "runs" / source.name
    shutil.copytree(source, folder, symlinks=True)
    return folder
