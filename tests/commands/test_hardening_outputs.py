"""Hardening, round three (issue 37, parts 2, 3, 4 and 7, and part 6's locked database).

- Outputs are regular files, and a command never replaces what it reads (`core/output_paths.py`;
  read-only `db` actions open the file read-only).
- File names are never options: every path on a tool's command line is absolute
  (`tools.path_argument`).
- Numbers are bounded before any work: every numeric option of every command, found from the
  parser itself, refuses a huge value, NaN and infinity; a profile range is refused from its
  length before it is expanded.
- Nothing is left behind: each run's private temp folder (`core/scratch.py`) takes what the compiler
  and the runtime write there, and the next run removes the folder of a run that was SIGKILLed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from ireetune.cli import build_parser, main
from ireetune.compile.driver import CompileRequest, build_arguments
from ireetune.core.errors import IreetuneError
from ireetune.core.scratch import OWNER_NAME, SCRATCH_PREFIX, describe_owner, remove_stale_scratch
from ireetune.database import schema
from ireetune.database.store import StoredResult, TuningDatabase
from tests.commands.test_bad_inputs import _snapshot, use_workspace_temp_folder
from tests.conftest import MATMUL_MODEL

SPEC = (
    "module attributes {transform.with_named_sequence} {\n"
    "  transform.named_sequence @__kernel_config(%arg0: !transform.any_op {transform.consumed})"
    " -> !transform.any_op attributes {iree_codegen.tuning_spec_entrypoint} {\n"
    "    transform.yield %arg0 : !transform.any_op\n  }\n}\n"
)
PROFILE = ("profile", "matmul", "--m", "16", "--n", "16", "--k", "16", "--no-progress")
# A small, fast dispatch run: one candidate, few timings, no database.
QUICK_TUNE = (
    "--num-candidates", "1", "--repetitions", "2", "--confirm-rounds", "1",
    "--min-repetition-time", "0.001", "--no-db", "--no-progress",
)  # fmt: skip


def _one_line(status: int, capsys: pytest.CaptureFixture[str]) -> str:
    """Require exit status 2 and one `ireetune: error:` line; return it."""
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert (status, len(lines)) == (2, 1), captured.err
    assert lines[0].startswith("ireetune: error: "), captured.err
    assert "Traceback" not in captured.err + captured.out
    return lines[0]


@pytest.fixture(scope="module")
def profiler_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real profile tree (compiled only), which `report` reads."""
    tree = tmp_path_factory.mktemp("profiled") / "generated"
    assert main([*PROFILE, "--generated-dir", str(tree), "--phase", "compile"]) == 0
    return tree


@pytest.fixture()
def workspace(
    tmp_path: Path, profiler_run: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Path]:
    """The inputs every output command reads, in a workspace whose temp folder is its own."""
    use_workspace_temp_folder(tmp_path, monkeypatch)
    (tmp_path / "model.mlir").write_text(MATMUL_MODEL)
    (tmp_path / "flags.txt").write_text("--iree-opt-level=O2\n")
    (tmp_path / "spec.mlir").write_text(SPEC)
    export = tmp_path / "export.json"
    export.write_text(json.dumps({"ireetune_results": []}))
    assert main(["db", "--db", str(tmp_path / "db.sqlite"), "import", str(export)]) == 0
    tree = tmp_path / "tree"
    shutil.copytree(profiler_run, tree)
    return {
        "tmp": tmp_path,
        "model": tmp_path / "model.mlir",
        "flags": tmp_path / "flags.txt",
        "spec": tmp_path / "spec.mlir",
        "db": tmp_path / "db.sqlite",
        "export": export,
        "tree": tree,
        "gen": tmp_path / "generated",
        "out": tmp_path / "out",
    }


# Every command that writes a file the user names; `{out}` is that file.
OUTPUT_COMMANDS = {
    "compile": (
        "compile", "{model}", "--target", "cpu", "--flags-file", "{flags}", "-o", "{out}",
        "--force",
    ),
    "spec-link": ("spec", "link", "{spec}", "-o", "{out}", "--force"),
    "db-export": ("db", "--db", "{db}", "export", "--format", "csv", "-o", "{out}", "--force"),
    "db-report": ("db", "--db", "{db}", "report", "-o", "{out}", "--force"),
    "report": ("report", "{tree}", "-o", "{out}", "--force"),
    "profile": (*PROFILE, "--generated-dir", "{gen}", "--output", "{out}", "--force"),
}  # fmt: skip


@pytest.fixture()
def open_fifo_reader() -> Iterator[Callable[[Path], None]]:
    """Open FIFOs for reading without blocking, so that a writer that opens one (the defect)
    does not hang the test but replaces it, which the test sees."""
    handles: list[int] = []

    def open_reader(path: Path) -> None:
        handles.append(os.open(path, os.O_RDONLY | os.O_NONBLOCK))

    yield open_reader
    for handle in handles:
        os.close(handle)


def _make_special(kind: str, path: Path, open_reader: Callable[[Path], None]) -> object:
    """Make a file that is not a regular one at `path`; return what keeps it alive."""
    if kind == "fifo":
        os.mkfifo(path)
        open_reader(path)
        return None
    if kind == "socket":
        if len(str(path)) >= 100:
            pytest.skip("a socket path this long does not fit sockaddr_un")
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
        return server
    if kind == "device":
        try:
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("making a device node needs root")
        return None
    if kind == "folder":
        path.mkdir()
        return None
    assert kind == "link-to-device"
    path.symlink_to("/dev/null")
    return None


@pytest.mark.parametrize("kind", ["fifo", "socket", "device", "folder", "link-to-device"])
@pytest.mark.parametrize("command", sorted(OUTPUT_COMMANDS))
def test_an_output_that_is_not_a_regular_file_is_refused_even_with_force(
    command: str,
    kind: str,
    workspace: dict[str, Path],
    open_fifo_reader: Callable[[Path], None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    keep_alive = _make_special(kind, workspace["out"], open_fifo_reader)
    arguments = [a.format(**workspace) for a in OUTPUT_COMMANDS[command]]
    capsys.readouterr()
    before = _snapshot(workspace["tmp"])

    line = _one_line(main(arguments), capsys)

    what = {"fifo": "a FIFO", "socket": "a socket", "folder": "a folder"}.get(
        kind, "a character device"
    )
    assert line == (
        f"ireetune: error: cannot write {workspace['out']}: it is {what}, not a regular file"
    )
    assert _snapshot(workspace["tmp"]) == before
    del keep_alive


@pytest.mark.parametrize("name", ["manifest.json", "results.csv", "new.csv"])
def test_profile_output_inside_the_tree_it_writes_is_refused(
    name: str, workspace: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    output = workspace["gen"] / name
    before = _snapshot(workspace["tmp"])

    status = main(
        [*PROFILE, "--generated-dir", str(workspace["gen"]), "--output", str(output), "--force"]
    )

    assert _one_line(status, capsys) == (
        f"ireetune: error: cannot write {output}: it is a file of {workspace['gen']}, which this "
        "command reads; name a file outside it"
    )
    assert _snapshot(workspace["tmp"]) == before


@pytest.mark.parametrize(
    "action", [["list"], ["show", "matmul"], ["export"], ["report"]], ids=lambda a: a[0]
)
def test_a_read_only_db_command_on_an_empty_file_changes_nothing(
    action: list[str], workspace: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    empty = workspace["tmp"] / "empty.sqlite"
    empty.write_bytes(b"")
    before = _snapshot(workspace["tmp"])

    status = main(["db", "--db", str(empty), *action])

    assert _one_line(status, capsys) == (
        f"ireetune: error: {empty} is an empty file, not an ireetune database"
    )
    assert _snapshot(workspace["tmp"]) == before


@pytest.mark.parametrize(
    ("action", "expected_status"),
    [(["list"], 0), (["show", "matmul"], 2), (["export", "--format", "csv"], 0), (["report"], 0)],
    ids=["list", "show", "export", "report"],
)
def test_a_read_only_db_command_leaves_a_database_byte_for_byte(
    action: list[str],
    expected_status: int,
    workspace: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = _snapshot(workspace["tmp"])

    status = main(["db", "--db", str(workspace["db"]), *action])

    assert status == expected_status, capsys.readouterr().err
    assert _snapshot(workspace["tmp"]) == before


def _hold_exclusive_lock(path: Path) -> sqlite3.Connection:
    """Lock a database the way another process holding it exclusively does."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("UPDATE meta SET value = value")
    return holder


@pytest.mark.parametrize(
    "arguments",
    [
        ("db", "--db", "{db}", "list"),
        ("db", "--db", "{db}", "import", "{tmp}/export.json"),
        ("tune-dispatch", "{model}", "--db", "{db}", "--output-dir", "{tmp}/runs"),
    ],
    ids=["db-list", "db-import", "tune-dispatch"],
)
def test_a_locked_database_is_said_to_be_locked(
    arguments: tuple[str, ...],
    workspace: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(schema, "BUSY_TIMEOUT_MS", 100)
    holder = _hold_exclusive_lock(workspace["db"])
    try:
        status = main([a.format(**workspace) for a in arguments])
    finally:
        holder.close()

    assert _one_line(status, capsys) == (
        f"ireetune: error: the database {workspace['db']} is locked (busy) by another process; "
        "try again when it is done"
    )


def test_a_database_locked_while_a_command_writes_it_is_one_line(
    workspace: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(schema, "BUSY_TIMEOUT_MS", 100)
    holders: list[sqlite3.Connection] = []
    import_results = TuningDatabase.import_results

    def lock_then_import(database: TuningDatabase, results: Sequence[StoredResult]) -> int:
        # Another process starts writing after this one opened the file.
        holder = sqlite3.connect(workspace["db"], isolation_level=None)
        holders.append(holder)
        holder.execute("BEGIN EXCLUSIVE")
        return import_results(database, results)

    monkeypatch.setattr(TuningDatabase, "import_results", lock_then_import)
    try:
        status = main(["db", "--db", str(workspace["db"]), "import", str(workspace["export"])])
    finally:
        for holder in holders:
            holder.close()

    assert _one_line(status, capsys) == (
        "ireetune: error: the tuning database is locked (busy) by another process; try again "
        "when it is done"
    )
    assert len(holders) == 1


# --- File names are never options ------------------------------------------------------------


def test_every_path_on_a_compile_command_line_is_absolute() -> None:
    request = CompileRequest(
        source_path=Path("@model.mlir"),
        output_path=Path("-model.vmfb"),
        target_flags=("--iree-hal-target-device=local",),
    )

    arguments = build_arguments(request, "iree-compile")

    assert arguments == [
        "iree-compile",
        str(Path.cwd() / "@model.mlir"),
        "--iree-hal-target-device=local",
        "-o",
        str(Path.cwd() / "-model.vmfb"),
    ]


@pytest.mark.parametrize("name", ["@model.mlir", "-model.mlir"])
def test_a_model_named_like_an_option_compiles(
    name: str, workspace: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(workspace["tmp"])
    Path(name).write_text(MATMUL_MODEL)
    arguments = ["compile", "--target", "cpu", "--flags-file", "flags.txt", "-o", "m.vmfb"]

    assert main([*arguments, "--", name]) == 0

    assert Path("m.vmfb").stat().st_size > 0


@pytest.mark.parametrize("name", ["@model.mlir", "-model.mlir"])
def test_a_model_named_like_an_option_is_tuned(
    name: str, workspace: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(workspace["tmp"])
    Path(name).write_text(MATMUL_MODEL)

    status = main(["tune-dispatch", *QUICK_TUNE, "--output-dir", "runs", "--", name])

    assert status == 0
    assert [path.name for path in Path("runs").glob("*/results.json")] == ["results.json"]


@pytest.mark.parametrize("name", ["@model.mlir", "-model.mlir"])
def test_a_spec_shown_against_a_model_named_like_an_option(
    name: str,
    workspace: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(workspace["tmp"])
    Path(name).write_text(MATMUL_MODEL)

    status = main(["spec", "show", "spec.mlir", f"--model={name}"])

    captured = capsys.readouterr()
    assert (status, captured.err) == (0, "")


@pytest.mark.parametrize("name", ["@model.onnx", "-model.onnx"])
def test_an_onnx_model_named_like_an_option_is_imported(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    onnx = pytest.importorskip("onnx")
    from ireetune.frontend.model_import import import_model

    monkeypatch.chdir(tmp_path)
    lhs = onnx.helper.make_tensor_value_info("lhs", onnx.TensorProto.FLOAT, [4, 8])
    rhs = onnx.helper.make_tensor_value_info("rhs", onnx.TensorProto.FLOAT, [8, 4])
    result = onnx.helper.make_tensor_value_info("result", onnx.TensorProto.FLOAT, [4, 4])
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("MatMul", ["lhs", "rhs"], ["result"])],
        "matmul",
        [lhs, rhs],
        [result],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    onnx.save(model, name)

    imported = import_model(Path(name), Path("imported"))

    assert (imported.name, 'torch.operator "onnx.MatMul"' in imported.read_text()) == (
        f"{Path(name).stem}.mlir",
        True,
    )


# --- Numbers are bounded before any work ------------------------------------------------------


def _numeric_options() -> Iterator[tuple[tuple[str, ...], str, bool]]:
    """Yield (command words, flag, takes an integer) for every numeric option of every command,
    read from the parser itself: a new option is covered the moment it is declared."""
    parsers: list[tuple[tuple[str, ...], argparse.ArgumentParser]] = [((), build_parser())]
    while parsers:
        words, parser = parsers.pop()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers.extend(((*words, name), sub) for name, sub in action.choices.items())
                continue
            if not action.option_strings or not callable(action.type) or action.choices:
                continue
            try:
                value = action.type("1")
            except (argparse.ArgumentTypeError, ValueError, TypeError, IreetuneError):
                continue
            if isinstance(value, int | float) and not isinstance(value, bool):
                yield words, action.option_strings[-1], isinstance(value, int)


NUMERIC_OPTIONS = sorted(set(_numeric_options()))


def test_the_numeric_options_are_found() -> None:
    found = {(words, flag) for words, flag, _ in NUMERIC_OPTIONS}
    assert {
        (("compile",), "--compile-timeout"),
        (("tune-dispatch",), "--benchmark-timeout"),
        (("tune",), "--flag-threshold"),
        (("profile",), "--peak-gflops"),
        (("model", "train"), "--seed"),
    } <= found
    assert len(found) >= 30


@pytest.mark.parametrize("value", ["huge", "nan", "inf", "-inf"])
@pytest.mark.parametrize(
    ("words", "flag", "integer"),
    NUMERIC_OPTIONS,
    ids=[" ".join((*words, flag)) for words, flag, _ in NUMERIC_OPTIONS],
)
def test_every_numeric_option_refuses_huge_and_non_finite_values(
    words: tuple[str, ...],
    flag: str,
    integer: bool,
    value: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = ("1" + "0" * 30 if integer else "1e30") if value == "huge" else value

    line = _one_line(main([*words, f"{flag}={text}"]), capsys)

    assert f"argument {flag}" in line


def _limit_memory() -> None:
    # Far below what expanding a billion sizes takes (tens of GB), far above the command's need.
    limit = 4 * 1024**3
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


@pytest.mark.parametrize("dimension", ["8:1000000000:1", "1,8:1000000000:1", "8:1000000000:1,16"])
def test_a_profile_range_is_bounded_before_it_expands(dimension: str, tmp_path: Path) -> None:
    # In a child whose memory is limited: the defect was expanding the range first.
    completed = subprocess.run(
        [
            sys.executable, "-m", "ireetune.cli", "profile", "matmul", f"--m={dimension}",
            "--generated-dir", str(tmp_path / "gen"),
        ],
        capture_output=True, text=True, check=False, timeout=120, preexec_fn=_limit_memory,
    )  # fmt: skip

    assert (completed.returncode, completed.stderr) == (
        2,
        f"ireetune: error: --m: '{dimension}' names over 100000 sizes; narrow the ranges\n",
    )
    assert not (tmp_path / "gen").exists()


@pytest.mark.parametrize(("flag", "operation"), [("--m", "matmul"), ("--stride", "conv2d")])
def test_a_profile_size_past_the_runtimes_sizes_is_one_line(
    flag: str, operation: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arguments = ["profile", operation, f"{flag}=100000000000000000000"]

    status = main([*arguments, "--generated-dir", str(tmp_path / "g"), "--phase", "compile"])

    assert _one_line(status, capsys) == (
        f"ireetune: error: {flag}: sizes must be at most 2147483647 (got '100000000000000000000')"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_problem_file_sweep_is_bounded_as_a_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    problems = tmp_path / "problems.csv"
    rows = ["matmul,1:400:1,1:100:1,8"] * 3
    problems.write_text("op,m,n,k\n" + "\n".join(rows) + "\n")

    # The configs are refused after the sweep is expanded: a sweep bounded only after its
    # expansion reaches them.
    status = main(
        [
            "profile", "--problems", str(problems), "--generated-dir", str(tmp_path / "g"),
            "--configs", str(tmp_path / "missing.json"),
        ]
    )  # fmt: skip

    assert _one_line(status, capsys) == (
        "ireetune: error: the sweep has over 100000 operations; narrow the ranges"
    )


# --- Nothing left behind ----------------------------------------------------------------------


def test_a_run_with_a_system_linked_library_leaves_nothing_in_the_temp_folder(
    workspace: dict[str, Path],
) -> None:
    temp = Path(tempfile.gettempdir())
    arguments = [
        "tune-dispatch", str(workspace["model"]), *QUICK_TUNE,
        "--output-dir", str(workspace["tmp"] / "runs"),
        "--flags=--iree-llvmcpu-link-embedded=false",
    ]  # fmt: skip

    assert main(arguments) == 0

    assert sorted(path.name for path in temp.iterdir()) == []


def _scratch_folder(parent: Path, owner: str | None) -> Path:
    folder = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=parent))
    (folder / "left.o").write_text("what a run left")
    if owner is not None:
        (folder / OWNER_NAME).write_text(owner)
    return folder


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_the_scratch_of_dead_runs_is_removed_and_of_live_runs_kept(tmp_path: Path) -> None:
    own_pid = os.getpid()
    dead = _scratch_folder(tmp_path, describe_owner(_dead_pid()))
    alive = _scratch_folder(tmp_path, describe_owner(own_pid))
    # This process's id with another start time: the id was reused, its run is gone.
    reused = _scratch_folder(tmp_path, f"{own_pid} 1\n")
    being_made = _scratch_folder(tmp_path, None)
    garbled = _scratch_folder(tmp_path, "not an owner")
    someone_elses = tmp_path / "other_tool_1234"
    someone_elses.mkdir()

    removed = remove_stale_scratch(tmp_path)

    assert sorted(removed) == sorted([dead, reused])
    assert sorted(tmp_path.iterdir()) == sorted([alive, being_made, garbled, someone_elses])


def test_every_command_removes_the_scratch_of_dead_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    temp = use_workspace_temp_folder(tmp_path, monkeypatch)
    dead = _scratch_folder(temp, describe_owner(_dead_pid()))
    alive = _scratch_folder(temp, describe_owner(os.getpid()))

    _one_line(main(["db", "--db", str(tmp_path / "missing.sqlite"), "list"]), capsys)

    assert (dead.exists(), sorted(temp.iterdir())) == (False, [alive])


def test_a_sigkilled_runs_scratch_is_removed_by_the_next_run(
    workspace: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    temp = Path(tempfile.gettempdir())
    run = subprocess.Popen(
        [
            sys.executable, "-m", "ireetune.cli", "tune-dispatch", str(workspace["model"]),
            *QUICK_TUNE, "--num-candidates", "8", "--output-dir", str(workspace["tmp"] / "runs"),
        ],
        env={**os.environ, "TMPDIR": str(temp)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    # Killed once the run has put something in its scratch folder (the dispatch it loaded).
    while not any(path.is_file() for path in temp.rglob("*") if path.name != OWNER_NAME):
        assert run.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    run.send_signal(signal.SIGKILL)
    run.wait()
    assert list(temp.iterdir()) != []

    _one_line(main(["db", "--db", str(workspace["tmp"] / "missing.sqlite"), "list"]), capsys)

    assert list(temp.iterdir()) == []
