"""Issue 22, defect 3 and the quoting item of defect 6: no silent overwrite, quoted next commands.

The refusals (an existing output without `--force`, an input even with it) are cases of
tests/commands/test_bad_inputs.py; here are the runs that succeed: `--force` replaces an output, and
atomically, and every printed next command survives a path with a space.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
from pathlib import Path

import pytest

from ireetune.cli import main
from ireetune.core.errors import IreetuneError
from ireetune.core.output_paths import check_new_output, write_output
from ireetune.flows.model.state import SplitStage as Phase
from ireetune.flows.model.tuner import SplitStatus, describe_status
from tests.conftest import MATMUL_MODEL


def _make_database(folder: Path) -> Path:
    """Create an empty tuning database (through `db import` of an empty export)."""
    export = folder / "empty_export.json"
    export.write_text(json.dumps({"ireetune_results": []}))
    database = folder / "tuning.sqlite"
    assert main(["db", "--db", str(database), "import", str(export)]) == 0
    return database


def test_force_replaces_an_existing_output_and_never_an_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = _make_database(tmp_path)
    database_bytes = database.read_bytes()
    output = tmp_path / "rows.json"
    output.write_text("the user's own file\n")
    capsys.readouterr()

    refused = main(["db", "--db", str(database), "export", "--format", "json", "-o", str(output)])
    refused_err = capsys.readouterr().err
    replaced = main(
        ["db", "--db", str(database), "export", "--format", "json", "-o", str(output), "--force"]
    )
    # The same export on stdout is what the forced run must have written.
    assert main(["db", "--db", str(database), "export", "--format", "json"]) == 0
    expected = capsys.readouterr().out
    forced_input = main(
        ["db", "--db", str(database), "export", "--format", "json", "-o", str(database), "--force"]
    )
    forced_input_err = capsys.readouterr().err

    assert (refused, replaced, forced_input) == (2, 0, 2)
    assert refused_err == f"ireetune: error: {output} exists; pass --force to replace it\n"
    assert output.read_text() == expected
    assert forced_input_err == (
        f"ireetune: error: cannot write {database}: it is the input {database}; "
        "name another output file\n"
    )
    assert database.read_bytes() == database_bytes
    # The atomic write leaves nothing beside the output.
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "empty_export.json",
        "rows.json",
        "tuning.sqlite",
    ]


def test_force_replaces_a_link_never_its_target(tmp_path: Path) -> None:
    database = _make_database(tmp_path)
    elsewhere = tmp_path / "elsewhere.csv"
    elsewhere.write_text("someone else's file\n")
    link = tmp_path / "rows.csv"
    link.symlink_to(elsewhere)

    status = main(
        ["db", "--db", str(database), "export", "--format", "csv", "-o", str(link), "--force"]
    )

    assert status == 0
    assert elsewhere.read_text() == "someone else's file\n"
    assert not link.is_symlink() and link.read_text().startswith("signature,")


def test_compile_force_replaces_the_vmfb_and_a_failed_compile_keeps_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "matmul.mlir"
    model.write_text(MATMUL_MODEL)
    flags_file = tmp_path / "flags.txt"
    flags_file.write_text("")
    output = tmp_path / "out.vmfb"
    output.write_bytes(b"an older module")
    compile_arguments = ["compile", str(model), "--target", "cpu", "--flags-file", str(flags_file)]

    refused = main([*compile_arguments, "-o", str(output)])
    replaced = main([*compile_arguments, "-o", str(output), "--force"])
    compiled = output.read_bytes()
    model.write_text("this is not MLIR {")
    failed = main([*compile_arguments, "-o", str(output), "--force"])
    errors = capsys.readouterr().err.splitlines()

    assert (refused, replaced, failed) == (2, 0, 2)
    assert errors[0] == f"ireetune: error: {output} exists; pass --force to replace it"
    # A .vmfb is a zip archive holding the module's flatbuffer.
    assert compiled.startswith(b"PK\x03\x04") and b"module.fb" in compiled
    assert output.read_bytes() == compiled
    assert sorted(p.name for p in tmp_path.iterdir()) == ["flags.txt", "matmul.mlir", "out.vmfb"]


def test_report_replaces_its_own_default_page_but_no_file_of_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "matmul.mlir"
    model.write_text(MATMUL_MODEL)
    runs = tmp_path / "runs"
    tune = ["tune-dispatch", str(model), "--output-dir", str(runs), "--num-candidates", "2"]
    assert main([*tune, "--stop-after", "compile", "--no-db", "--no-progress"]) == 0
    (run_dir,) = runs.iterdir()
    run_files = {path.name: path.read_bytes() for path in run_dir.iterdir() if path.is_file()}
    capsys.readouterr()

    # The run's own page is the report's output: drawn again without --force, however named.
    defaults = [main(["report", str(run_dir)]) for _ in range(2)]
    named = main(["report", str(run_dir), "-o", str(run_dir / "report.html")])
    # The reproduction: a file the run holds, refused even with --force.
    forced = main(["report", str(run_dir), "-o", str(run_dir / "results.json"), "--force"])
    forced_err = capsys.readouterr().err

    assert (defaults, named, forced) == ([0, 0], 0, 2)
    assert forced_err == (
        f"ireetune: error: cannot write {run_dir / 'results.json'}: it is a file of {run_dir}, "
        "which this command reads; name a file outside it (or a new one)\n"
    )
    after = {path.name: path.read_bytes() for path in run_dir.iterdir() if path.is_file()}
    assert {name: after[name] for name in run_files} == run_files
    assert sorted(set(after) - set(run_files)) == ["report.html"]


def test_printed_next_commands_quote_a_path_with_spaces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "matmul.mlir"
    model.write_text(MATMUL_MODEL)
    runs = tmp_path / "my runs; rm -rf x"
    tune = ["tune-dispatch", str(model), "--output-dir", str(runs), "--num-candidates", "2"]
    quick = ["--repetitions", "2", "--min-repetition-time", "0.002"]
    assert main([*tune, *quick, "--stop-after", "compile", "--no-db", "--no-progress"]) == 0
    (run_dir,) = runs.iterdir()
    compiled_out = capsys.readouterr().out
    assert main(["benchmark-folder", str(run_dir), "--devices", "local-task"]) == 0
    benchmarked_out = capsys.readouterr().out

    commands = [
        shlex.split(line.split("   (")[0])
        for line in compiled_out.splitlines()
        if line.startswith("  ireetune ")
    ]
    (next_line,) = [line for line in benchmarked_out.splitlines() if line.startswith("next: ")]

    assert commands == [
        ["ireetune", "measure", str(run_dir)],
        ["ireetune", "continue", str(run_dir)],
    ]
    assert shlex.split(next_line.removeprefix("next: ").split("   (")[0]) == [
        "ireetune",
        "continue",
        str(run_dir),
    ]


def test_split_run_status_quotes_its_commands() -> None:
    run_dir = Path("/tmp/a run folder/mlp run")
    status = SplitStatus(run_dir, Phase.AWAITING_DEVICE, 1, "ireetune measure")

    lines = describe_status(status).splitlines()

    assert shlex.split(lines[-1].removeprefix("then, here: ")) == [
        "ireetune",
        "continue",
        str(run_dir),
    ]


def test_a_hard_link_to_an_input_is_the_input(tmp_path: Path) -> None:
    spec = tmp_path / "spec.mlir"
    spec.write_text("module {}\n")
    alias = tmp_path / "alias.mlir"
    alias.hardlink_to(spec)

    with pytest.raises(IreetuneError) as excinfo:
        check_new_output(alias, True, [spec])

    assert str(excinfo.value) == (
        f"cannot write {alias}: it is the input {spec}; name another output file"
    )


def test_write_output_makes_its_folder_and_a_file_of_the_usual_mode(tmp_path: Path) -> None:
    output = tmp_path / "new" / "nested" / "rows.csv"
    previous = os.umask(0o022)
    try:
        write_output(output, "a,b\n")
    finally:
        os.umask(previous)

    assert output.read_text() == "a,b\n"
    assert stat.S_IMODE(output.stat().st_mode) == 0o644
    assert [p.name for p in output.parent.iterdir()] == ["rows.csv"]
