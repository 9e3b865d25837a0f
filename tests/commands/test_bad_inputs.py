"""Every bad input, across every command, ends in one clear line and exit status 2.

Each case runs through the real entry point (`ireetune.cli.main`, in process for speed) and must
end with exit status 2, exactly one line on stderr starting `ireetune: error:`, no traceback, and
no file it was given (or any other file of its workspace) changed. Cases are grouped by command;
the `expected` text is part of the one line.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ireetune.cli import main
from ireetune.database.store import config_key, problem_key
from ireetune.flows.dispatch.options import References
from ireetune.flows.handoff.manifest import MANIFEST_NAME, RESULTS_NAME, hash_manifest
from tests.conftest import ARGMAX_MODEL, MATMUL_MODEL, compile_matmul_for_device_host
from tests.database.test_database import INFO as DATABASE_INFO
from tests.database.test_database import PROBLEM as DATABASE_PROBLEM
from tests.database.test_hardening_database import write_newer_schema_file, write_wal_foreign_file

DYNAMIC_MODEL = """
func.func @main(%lhs: tensor<?x96xf32>, %rhs: tensor<96x128xf32>) -> tensor<?x128xf32> {
  %c0 = arith.constant 0 : index
  %rows = tensor.dim %lhs, %c0 : tensor<?x96xf32>
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty(%rows) : tensor<?x128xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<?x128xf32>) -> tensor<?x128xf32>
  %r = linalg.matmul ins(%lhs, %rhs : tensor<?x96xf32>, tensor<96x128xf32>)
                     outs(%init : tensor<?x128xf32>) -> tensor<?x128xf32>
  return %r : tensor<?x128xf32>
}
"""

# A complete exported row, valid in every field but one: the speedup is text (issue 11 item 2's
# reproduction).
STRING_SPEEDUP_ROW = {
    "key": {
        "compiler_version": "3.13.0",
        "target": "cpu",
        "device": "local-task",
        "problem": problem_key(DATABASE_PROBLEM),
        "signature": DATABASE_PROBLEM.signature,
    },
    "config": config_key((("vec_m", 8),)),
    "compilation_info": DATABASE_INFO,
    "status": "verified",
    "reason": "",
    "times_ms": [1.0, 1.0],
    "median_ms": 1.0,
    "min_ms": 1.0,
    "max_ms": 1.0,
    "spread": 0.0,
    "baseline_ms": 2.0,
    "speedup": "fast",
    "session": "elsewhere",
    "written_at": "2026-11-23T00:00:00+00:00",
}

# A place no user can write, root included (sysfs refuses new entries).
UNWRITABLE = "/sys/ireetune_bad_input"

ManifestEdit = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Case:
    """One bad input: the arguments ({names} are workspace paths) and a part of the one line."""

    name: str
    arguments: tuple[str, ...]
    expected: str
    # For `{folder}` cases: how to damage the copy of a compiled run folder's manifest (an edit
    # of its JSON, or a whole new text).
    edit_manifest: ManifestEdit | None = None
    manifest_text: str | None = None
    # Any other change to that copy (given the folder and the workspace), such as a symlink.
    setup: Callable[[Path, Path], object] | None = None
    # Cases where the command is allowed to create new files (never to change existing ones).
    creates_files: bool = False
    # Commands that print progress before they find the fault: the error must be the last line.
    progress_before: bool = False
    marks: tuple[Any, ...] = field(default_factory=tuple)


def _set(path: str, value: object) -> ManifestEdit:
    """Edit one field of the manifest: `a.b.0.c` walks objects and lists."""

    def edit(manifest: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = manifest
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return edit


def _delete(name: str) -> ManifestEdit:
    def edit(manifest: dict[str, Any]) -> None:
        del manifest[name]

    return edit


def _edit_tree(tmp: Path, edit: Callable[[dict[str, Any]], object]) -> None:
    """Edit the first dispatch record of the workspace's compiled profiler tree."""
    manifest_path = tmp / "tree" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    edit(manifest["dispatches"][0])
    manifest_path.write_text(json.dumps(manifest))


def _replace_with_link(path: Path, target: Path) -> None:
    shutil.rmtree(path)
    path.symlink_to(target)


def _duplicate_first_candidate(manifest: dict[str, Any]) -> None:
    manifest["candidates"].append(dict(manifest["candidates"][0]))


# 100,000 levels of nesting: the standard parser ends in a RecursionError on it.
DEEP_JSON = "[" * 100_000 + "]" * 100_000


def _write(relative: str, text: str) -> Callable[[Path, Path], object]:
    """Replace a file of the run folder with `text`."""
    return lambda folder, _: (folder / relative).write_text(text)


def _edit_results(edit: Callable[[dict[str, Any]], object]) -> Callable[[Path, Path], object]:
    """Edit the run folder's results.json (the run's own record)."""

    def setup(folder: Path, _: Path) -> None:
        path = folder / "results.json"
        document = json.loads(path.read_text())
        edit(document)
        path.write_text(json.dumps(document))

    return setup


def _benchmark_results(**fields: object) -> Callable[[Path, Path], object]:
    """Write a benchmark_results.json of this folder's manifest, valid but for `fields`."""

    def setup(folder: Path, _: Path) -> None:
        payload = {
            "devices": ["local-task"],
            "campaign": {
                "baselines": [
                    {"device": "local-task", "batch": 1, "before_ms": [1.0], "after_ms": [1.0],
                     "confirmed_ms": [], "drift": 0.0}
                ],
                "candidates": [],
                "seconds": 1.0,
            },
            "contenders": [],
            "verification": {"verdicts": {}},
            "manifest_sha256": hash_manifest(folder),
            **fields,
        }  # fmt: skip
        (folder / RESULTS_NAME).write_text(json.dumps(payload))

    return setup


def _link_binaries_out(folder: Path, tmp: Path) -> None:
    """Move the folder's binaries out and leave a link to them (replay must not follow it)."""
    shutil.copytree(folder / "binaries", tmp / "elsewhere_binaries")
    _replace_with_link(folder / "binaries", tmp / "elsewhere_binaries")


def _link_spec_out(folder: Path, tmp: Path) -> None:
    (folder / "specs" / "linked.mlir").symlink_to(tmp / "spec.mlir")
    _edit_results(lambda run: run["candidates"][1].update(spec_path="specs/linked.mlir"))(
        folder, tmp
    )


def _oversize(relative: str) -> Callable[[Path, Path], object]:
    """Make a file of the folder larger than any run folder's file may be (sparse: no disk)."""

    def setup(folder: Path, _: Path) -> None:
        with (folder / relative).open("r+b") as handle:
            handle.truncate(65 * 2**20)

    return setup


def _matmul_model(m: int, n: int, k: int, element_type: str) -> str:
    """A model of one matmul whose result is its third argument."""
    lhs, rhs, out = (f"tensor<{a}x{b}x{element_type}>" for a, b in ((m, k), (k, n), (m, n)))
    return (
        f"func.func @main(%lhs: {lhs}, %rhs: {rhs}, %init: {out}) -> {out} {{\n"
        f"  %r = linalg.matmul ins(%lhs, %rhs : {lhs}, {rhs}) outs(%init : {out}) -> {out}\n"
        f"  return %r : {out}\n}}\n"
    )


def _write_model(name: str, text: str) -> Callable[[Path, Path], object]:
    return lambda _, tmp: (tmp / name).write_text(text)


def _make_symlink_loop(_: Path, tmp: Path) -> None:
    (tmp / "loop.mlir").symlink_to(tmp / "loop_back.mlir")
    (tmp / "loop_back.mlir").symlink_to(tmp / "loop.mlir")


TUNE_DISPATCH = ("tune-dispatch", "{model}", "--output-dir", "{runs}")
TUNE = ("tune", "{model}", "--output-dir", "{runs}", "--no-db")
PROFILE = ("profile", "matmul", "--m", "64", "--n", "64", "--k", "64", "--generated-dir", "{gen}")

CASES = [
    # The command line itself.
    Case("no-command", (), "the following arguments are required: command"),
    Case("unknown-command", ("frobnicate",), "invalid choice: 'frobnicate'"),
    Case("unknown-global-flag", ("--frobnicate", "finish", "{tmp}"), "unrecognized arguments"),
    Case("missing-positional", ("tune-dispatch",), "the following arguments are required: input"),
    Case("unknown-flag", (*TUNE_DISPATCH, "--frobnicate"), "unrecognized arguments: --frobnicate"),
    # tune-dispatch: inputs.
    Case("missing-input", ("tune-dispatch", "{tmp}/missing.mlir"), "input file not found"),
    Case("folder-as-input", ("tune-dispatch", "{adir}"), "input file is a directory"),
    Case("garbage-mlir", ("tune-dispatch", "{garbage}"), "cannot parse"),
    Case("binary-input", ("tune-dispatch", "{binary}"), "cannot read"),
    Case("no-root-op", ("tune-dispatch", "{no_root}"), "no root op found"),
    Case("argmax", ("tune-dispatch", "{argmax}"), "is not supported yet"),
    Case("dynamic-shapes", ("tune-dispatch", "{dynamic}"), "has dynamic shapes (@main argument 0"),
    Case("dispatch-out-of-range", (*TUNE_DISPATCH, "--dispatch", "7"), "dispatch index 7"),
    Case("dispatch-no-match", (*TUNE_DISPATCH, "--dispatch", "conv"), "no single dispatch matches"),
    # tune-dispatch: targets.
    Case("target-unknown", (*TUNE_DISPATCH, "--target", "tpu"), "unknown target 'tpu'"),
    Case("target-cuda-unknown-arch", (*TUNE_DISPATCH, "--target", "cuda:sm_99"), "sm_99"),
    Case("target-rocm-unknown-arch", (*TUNE_DISPATCH, "--target", "rocm:gfx000"), "gfx000"),
    Case("target-cuda-no-arch", (*TUNE_DISPATCH, "--target", "cuda"), "cuda"),
    Case(
        "pipeline-on-cpu",
        (*TUNE_DISPATCH, "--pipeline", "TileAndFuse"),
        "--pipeline applies to GPU targets",
    ),
    # tune-dispatch: numbers.
    Case("candidates-zero", (*TUNE_DISPATCH, "--num-candidates", "0"), "must be at least 1, got 0"),
    Case("candidates-negative", (*TUNE_DISPATCH, "--num-candidates", "-3"), "at least 1, got -3"),
    Case(
        "candidates-word", (*TUNE_DISPATCH, "--num-candidates", "many"), "'many' is not an integer"
    ),
    Case("candidates-fraction", (*TUNE_DISPATCH, "--num-candidates", "1.5"), "not an integer"),
    Case("jobs-zero", (*TUNE_DISPATCH, "--jobs", "0"), "argument --jobs: must be at least 1"),
    Case("repetitions-zero", (*TUNE_DISPATCH, "--repetitions", "0"), "--repetitions: must be"),
    Case(
        "compile-timeout-negative",
        (*TUNE_DISPATCH, "--compile-timeout", "-1"),
        "argument --compile-timeout: must be more than 0 seconds, got -1",
    ),
    Case("compile-timeout-zero", (*TUNE_DISPATCH, "--compile-timeout", "0"), "more than 0 seconds"),
    Case("compile-timeout-word", (*TUNE_DISPATCH, "--compile-timeout", "abc"), "'abc' is not a"),
    Case(
        "compile-timeout-inf",
        (*TUNE_DISPATCH, "--compile-timeout", "inf"),
        "must be a finite number",
    ),
    Case(
        "min-repetition-negative",
        (*TUNE_DISPATCH, "--min-repetition-time", "-1"),
        "argument --min-repetition-time: must be at least 0 seconds, got -1",
    ),
    Case(
        "min-repetition-nan",
        (*TUNE_DISPATCH, "--min-repetition-time", "nan"),
        "must be a finite number",
    ),
    Case("benchmark-timeout-zero", (*TUNE_DISPATCH, "--benchmark-timeout", "0"), "more than 0"),
    Case("confirm-rounds-negative", (*TUNE_DISPATCH, "--confirm-rounds", "-1"), "at least 0"),
    Case("seed-negative", (*TUNE_DISPATCH, "--seed", "-1"), "--seed: must be between 0 and"),
    Case("seed-huge", (*TUNE_DISPATCH, "--seed", str(2**40)), "--seed: must be between 0 and"),
    Case("order-unknown", (*TUNE_DISPATCH, "--order", "best"), "invalid choice: 'best'"),
    Case("pipeline-unknown", (*TUNE_DISPATCH, "--pipeline", "Foo"), "invalid choice: 'Foo'"),
    Case("stop-after-unknown", (*TUNE_DISPATCH, "--stop-after", "benchmark"), "invalid choice"),
    Case("time-budget-zero", (*TUNE_DISPATCH, "--time-budget", "0"), "more than 0 seconds"),
    Case(
        "time-budget-split",
        (*TUNE_DISPATCH, "--stop-after", "compile", "--time-budget", "60"),
        "--time-budget does not apply with --stop-after compile",
    ),
    Case(
        "time-budget-flag-search",
        (*TUNE_DISPATCH, "--search-flags", "--time-budget", "60"),
        "--time-budget does not apply with --search-flags yet",
    ),
    Case(
        "time-budget-spent-before-measuring",
        (*TUNE_DISPATCH, "--no-db", "--time-budget", "0.001"),
        "the time budget of 0.001 s was spent before any candidate was measured",
    ),
    # tune-dispatch: outputs and the database, refused before any work.
    Case(
        "output-dir-under-a-file",
        ("tune-dispatch", "{model}", "--output-dir", "{afile}/runs"),
        "is a file, not a folder",
    ),
    Case(
        "output-dir-is-a-file",
        ("tune-dispatch", "{model}", "--output-dir", "{afile}"),
        "is a file, not a folder",
    ),
    Case(
        "output-dir-unwritable",
        ("tune-dispatch", "{model}", "--output-dir", UNWRITABLE + "/runs"),
        "is not writable",
    ),
    Case(
        "db-in-unwritable-folder",
        (*TUNE_DISPATCH, "--db", UNWRITABLE + "/tuning.sqlite"),
        "cannot use the database",
    ),
    Case("db-is-a-folder", (*TUNE_DISPATCH, "--db", "{adir}"), "it is not a file"),
    Case("db-under-a-file", (*TUNE_DISPATCH, "--db", "{afile}/db.sqlite"), "not a folder"),
    Case("db-text-file", (*TUNE_DISPATCH, "--db", "{afile}"), "is not an ireetune database"),
    Case("db-foreign-sqlite", (*TUNE_DISPATCH, "--db", "{foreign}"), "SQLite file of another"),
    Case(
        "db-foreign-sqlite-with-our-table-names",
        (*TUNE_DISPATCH, "--db", "{lookalike}"),
        "lookalike.sqlite",
    ),
    # tune (whole model).
    Case("tune-missing-model", ("tune", "{tmp}/missing.mlir"), "not found"),
    Case("tune-unknown-format", ("tune", "{afile}"), "unknown model format"),
    Case("tune-garbage-onnx", ("tune", "{bad_onnx}", "--no-db"), "onnx"),
    Case("tune-coverage-zero", (*TUNE, "--coverage", "0"), "more than 0 and at most 1"),
    Case("tune-coverage-above-one", (*TUNE, "--coverage", "1.5"), "more than 0 and at most 1"),
    Case("tune-max-dispatches-zero", (*TUNE, "--max-dispatches", "0"), "at least 1"),
    Case("tune-time-budget-negative", (*TUNE, "--time-budget", "-5"), "more than 0 seconds"),
    Case("tune-rounds-zero", (*TUNE, "--rounds", "0"), "at least 1"),
    Case("tune-flag-threshold-nan", (*TUNE, "--flag-threshold", "nan"), "finite number"),
    Case("tune-flag-threshold-negative", (*TUNE, "--flag-threshold", "-1"), "at least 0"),
    Case("tune-output-under-a-file", ("tune", "{model}", "--output-dir", "{afile}/x"), "a file"),
    Case(
        "tune-dynamic-shapes",
        ("tune", "{dynamic}", "--output-dir", "{runs}", "--no-db"),
        "the model has dynamic shapes",
    ),
    Case(
        "tune-bad-input-spec",
        (*TUNE, "--input", "64x96xfoo"),
        "bad --input '64x96xfoo'",
    ),
    # benchmark-folder: the folder is untrusted data.
    Case("device-step-missing", ("device-step", "{tmp}/missing"), "run folder not found"),
    Case("device-step-not-a-run", ("device-step", "{adir}"), "has no device_step.json"),
    Case("continue-missing", ("continue", "{tmp}/missing"), "run folder not found"),
    Case("continue-not-a-run", ("continue", "{adir}"), "is not a model run folder"),
    Case(
        "tune-split-time-budget",
        (*TUNE, "--stop-after", "compile", "--time-budget", "60"),
        "--time-budget does not apply with --stop-after compile",
    ),
    Case(
        "tune-externalize-without-split",
        (*TUNE, "--externalize-weights"),
        "--externalize-weights applies only with --stop-after compile",
    ),
    Case("folder-missing", ("benchmark-folder", "{tmp}/missing"), "run folder not found"),
    Case("folder-is-a-file", ("benchmark-folder", "{afile}"), "is a file"),
    Case("folder-without-manifest", ("benchmark-folder", "{adir}"), "has no handoff.json"),
    Case(
        "folder-manifest-not-json",
        ("benchmark-folder", "{folder}"),
        "cannot read",
        manifest_text='{"format": "ireetune-benchmark-folder/1", ',
    ),
    Case(
        "folder-wrong-format",
        ("benchmark-folder", "{folder}"),
        "is not a ireetune-benchmark-folder/1 manifest",
        _set("format", "other/2"),
    ),
    Case(
        "folder-escaping-candidate-id",
        ("benchmark-folder", "{folder}"),
        'candidates[0].candidate_id must be an integer, got "/../../x/ESCAPED"',
        _set("candidates.0.candidate_id", "/../../x/ESCAPED"),
    ),
    Case(
        "folder-boolean-candidate-id",
        ("benchmark-folder", "{folder}"),
        "candidate_id must be an integer, got true",
        _set("candidates.0.candidate_id", True),
    ),
    Case(
        "folder-absolute-vmfb",
        ("benchmark-folder", "{folder}"),
        'candidates[0].vmfb must be a path inside the run folder, got "/bin/true"',
        _set("candidates.0.vmfb", "/bin/true"),
    ),
    Case(
        "folder-dotdot-vmfb",
        ("benchmark-folder", "{folder}"),
        "baseline.vmfb must be a path inside the run folder",
        _set("baseline.vmfb", "binaries/../../escaped.vmfb"),
    ),
    Case(
        "folder-dotdot-reference",
        ("benchmark-folder", "{folder}"),
        "reference_vmfb must be a path inside the run folder",
        _set("candidates.0.reference_vmfb", "../../../etc/passwd"),
    ),
    # A folder's links are refused by name, before anything is read through them
    # (flows/handoff/folder_trust.py).
    Case(
        "folder-symlink-out",
        ("benchmark-folder", "{folder}"),
        "outside.vmfb is a symbolic link",
        _set("candidates.0.vmfb", "outside.vmfb"),
        setup=lambda folder, tmp: (folder / "outside.vmfb").symlink_to(tmp / "outside.vmfb"),
    ),
    Case(
        "folder-results-link-out",
        ("benchmark-folder", "{folder}"),
        "benchmark_results.json is a symbolic link",
        setup=lambda folder, tmp: (folder / RESULTS_NAME).symlink_to(tmp / "afile.txt"),
    ),
    Case(
        "folder-verify-link-out",
        ("benchmark-folder", "{folder}"),
        "verify is a symbolic link",
        setup=lambda folder, tmp: _replace_with_link(folder / "verify", tmp / "adir"),
    ),
    Case(
        "folder-output-link-out",
        ("benchmark-folder", "{folder}"),
        "output_0.npy is a symbolic link",
        setup=lambda folder, tmp: (folder / "verify" / "output_0.npy").symlink_to(
            tmp / "afile.txt"
        ),
    ),
    Case(
        "folder-repetitions-text",
        ("benchmark-folder", "{folder}"),
        'repetitions must be an integer, got "5"',
        _set("repetitions", "5"),
    ),
    Case(
        "folder-repetitions-zero",
        ("benchmark-folder", "{folder}"),
        "repetitions must be at least 1, got 0",
        _set("repetitions", 0),
    ),
    Case(
        "folder-baseline-id",
        ("benchmark-folder", "{folder}"),
        "baseline.candidate_id must be 0, got 3",
        _set("baseline.candidate_id", 3),
    ),
    Case(
        "folder-duplicate-ids",
        ("benchmark-folder", "{folder}"),
        "must be a new id of at least 1",
        _duplicate_first_candidate,
    ),
    Case(
        "folder-missing-devices",
        ("benchmark-folder", "{folder}"),
        "devices is missing",
        _delete("devices"),
    ),
    Case(
        "folder-bad-shapes",
        ("benchmark-folder", "{folder}"),
        'verify.input_shapes[0][0] must be an integer, got "64"',
        _set("verify.input_shapes", [["64", 96]]),
    ),
    Case(
        "folder-candidates-not-a-list",
        ("benchmark-folder", "{folder}"),
        "candidates must be an array",
        _set("candidates", {"0": "x"}),
    ),
    Case(
        "folder-negative-timeout",
        ("benchmark-folder", "{folder}"),
        "benchmark_timeout_s must be more than 0, got -1",
        _set("benchmark_timeout_s", -1),
    ),
    Case(
        "folder-no-device-measured",
        ("benchmark-folder", "{folder}", "--devices", "nowhere://0"),
        "no device could be measured (nowhere://0",
        progress_before=True,
    ),
    # finish.
    Case("finish-missing-folder", ("finish", "{tmp}/missing"), "run folder not found"),
    Case("finish-without-manifest", ("finish", "{adir}"), "has no handoff.json"),
    Case("finish-not-benchmarked", ("finish", "{folder}"), "has no benchmark_results.json"),
    Case(
        "finish-results-of-another-manifest",
        ("finish", "{measured_elsewhere}"),
        "was measured from another handoff.json",
    ),
    # compile and spec.
    Case(
        "compile-missing-model",
        ("compile", "{tmp}/missing.mlir", "--target", "cpu", "--spec", "{spec}", "-o", "{tmp}/o"),
        "missing.mlir",
    ),
    Case(
        "compile-unknown-target",
        ("compile", "{model}", "--target", "tpu", "--spec", "{spec}", "-o", "{tmp}/o.vmfb"),
        "unknown target 'tpu'",
    ),
    Case(
        "compile-timeout-zero",
        ("compile", "{model}", "--target", "cpu", "--spec", "{spec}", "-o", "{tmp}/o.vmfb")
        + ("--compile-timeout", "0"),
        "more than 0 seconds",
    ),
    Case(
        "compile-output-under-a-file",
        ("compile", "{model}", "--target", "cpu", "--spec", "{spec}", "-o", "{afile}/o.vmfb"),
        "is a file, not a folder",
    ),
    Case(
        "compile-output-unwritable",
        ("compile", "{model}", "--target", "cpu", "--spec", "{spec}", "-o", UNWRITABLE + ".vmfb"),
        "is not writable",
    ),
    Case(
        "compile-garbage-spec",
        ("compile", "{model}", "--target", "cpu", "--spec", "{garbage}", "-o", "{tmp}/o.vmfb"),
        "garbage.mlir",
    ),
    Case("spec-no-subcommand", ("spec",), "the following arguments are required"),
    Case("spec-check-missing", ("spec", "check", "{tmp}/missing.mlir"), "missing.mlir"),
    # (Text that does not parse is a spec that fails its check: `spec check` says so with exit 1.)
    Case("spec-check-folder", ("spec", "check", "{adir}"), "is a directory"),
    Case("spec-check-binary", ("spec", "check", "{binary}"), "cannot read"),
    Case("spec-link-binary", ("spec", "link", "{binary}", "-o", "{tmp}/o.mlir"), "cannot read"),
    Case("spec-check-bad-target", ("spec", "check", "{spec}", "--target", "tpu"), "unknown target"),
    Case("spec-link-missing", ("spec", "link", "{tmp}/none.mlir", "-o", "{tmp}/o.mlir"), "none"),
    Case(
        "spec-link-output-under-a-file",
        ("spec", "link", "{spec}", "-o", "{afile}/linked.mlir"),
        "is a file, not a folder",
    ),
    Case("spec-show-garbage", ("spec", "show", "{garbage}"), "garbage.mlir"),
    Case(
        "spec-show-timeout-negative",
        ("spec", "show", "{spec}", "--compile-timeout", "-1"),
        "more than 0 seconds",
    ),
    Case("spec-dump-bad-target", ("spec", "dump", "{model}", "--target", "tpu"), "unknown target"),
    # profile.
    Case("profile-nothing", ("profile", "--generated-dir", "{gen}"), "name an operation"),
    Case("profile-unknown-op", ("profile", "frob", "--generated-dir", "{gen}"), "frob"),
    Case("profile-bad-size", (*PROFILE[:3], "abc", *PROFILE[4:]), "abc"),
    Case("profile-bad-dtype", (*PROFILE, "--dtype", "f99"), "f99"),
    Case("profile-bad-layout", (*PROFILE, "--layout", "zz"), "zz"),
    Case("profile-foreign-flag", (*PROFILE, "--height", "8"), "no operation named takes --height"),
    Case("profile-repetitions-zero", (*PROFILE, "--repetitions", "0"), "at least 1"),
    Case("profile-samples-zero", (*PROFILE, "--samples", "0"), "at least 1"),
    Case("profile-peak-negative", (*PROFILE, "--peak-gflops", "-1"), "more than 0"),
    Case("profile-missing-problems", ("profile", "--problems", "{tmp}/none.csv"), "none.csv"),
    Case(
        "profile-run-damaged-tree",
        ("profile", "--phase", "run", "--generated-dir", "{tree}"),
        "manifest.json: dispatches[0].operation is missing",
        setup=lambda _, tmp: _edit_tree(tmp, lambda entry: entry.pop("operation")),
    ),
    Case(
        "profile-run-escaping-name",
        ("profile", "--phase", "run", "--generated-dir", "{tree}"),
        'dispatches[0].name is not a plain file name, got "../../ESCAPED"',
        setup=lambda _, tmp: _edit_tree(tmp, lambda entry: entry.update(name="../../ESCAPED")),
    ),
    Case(
        "profile-run-absolute-binary",
        ("profile", "--phase", "run", "--generated-dir", "{tree}"),
        'dispatches[0].profile_vmfb must be a path inside the run folder, got "/bin/true"',
        setup=lambda _, tmp: _edit_tree(tmp, lambda entry: entry.update(profile_vmfb="/bin/true")),
    ),
    Case(
        "profile-run-without-tree",
        ("profile", "--phase", "run", "--generated-dir", "{adir}"),
        "run the compile phase first",
    ),
    Case(
        "profile-generated-under-a-file",
        (
            "profile",
            "matmul",
            "--m",
            "64",
            "--n",
            "64",
            "--k",
            "64",
            "--generated-dir",
            "{afile}/g",
        ),
        "is a file, not a folder",
    ),
    Case(
        "profile-output-unwritable",
        (*PROFILE, "--output", UNWRITABLE + ".csv"),
        "is not writable",
    ),
    # db (parsing and refusals).
    Case("db-no-subcommand", ("db",), "the following arguments are required"),
    Case("db-list-missing", ("db", "--db", "{tmp}/none.sqlite", "list"), "no database at"),
    Case("db-show-text-file", ("db", "--db", "{afile}", "show", "x"), "not an ireetune database"),
    Case(
        "db-import-missing",
        ("db", "--db", "{tmp}/db.sqlite", "import", "{tmp}/no.json"),
        "no.json",
    ),
    Case(
        "db-export-into-missing-folder",
        ("db", "--db", "{empty_db}", "export", "--format", "csv", "-o", "{tmp}/nodir/x.csv"),
        "nodir",
    ),
    Case(
        "db-import-string-speedup",
        ("db", "--db", "{empty_db}", "import", "{bad_rows}"),
        "speedup",
    ),
    # untrusted: every JSON file of a run folder through one reading path (size, depth, field
    # types, paths confined to the folder); the global flags a folder may carry (issue 22).
    Case(
        "folder-manifest-deep",
        ("benchmark-folder", "{folder}"),
        "handoff.json nests deeper than 32 levels",
        manifest_text='{"format": "ireetune-benchmark-folder/1", "x": ' + DEEP_JSON + "}",
    ),
    Case(
        "finish-manifest-deep",
        ("finish", "{folder}"),
        "handoff.json nests deeper than 32 levels",
        manifest_text=DEEP_JSON,
    ),
    Case(
        "finish-results-deep",
        ("finish", "{folder}"),
        "results.json nests deeper than 32 levels",
        setup=_write("results.json", DEEP_JSON),
    ),
    Case(
        "finish-benchmark-results-deep",
        ("finish", "{folder}"),
        "benchmark_results.json nests deeper than 32 levels",
        setup=_write(RESULTS_NAME, DEEP_JSON),
    ),
    Case(
        "folder-deferred-benchmark-results-deep",
        ("benchmark-folder", "{folder}"),
        "benchmark_results.json nests deeper than 32 levels: not a file ireetune wrote (remove it",
        _set("references_deferred", True),
        setup=_write(RESULTS_NAME, DEEP_JSON),
    ),
    Case(
        "replay-results-deep",
        ("replay", "{folder}", "--candidate", "1"),
        "results.json nests deeper than 32 levels",
        setup=_write("results.json", DEEP_JSON),
    ),
    Case(
        "report-results-deep",
        ("report", "{folder}", "-o", "{tmp}/report.html"),
        "results.json nests deeper than 32 levels",
        setup=_write("results.json", DEEP_JSON),
    ),
    Case(
        "report-results-oversized",
        ("report", "{folder}", "-o", "{tmp}/report.html"),
        "results.json is 68157440 bytes, more than the 67108864",
        setup=_oversize("results.json"),
    ),
    Case(
        "profile-run-deep-tree",
        ("profile", "--phase", "run", "--generated-dir", "{tree}"),
        "manifest.json nests deeper than 32 levels",
        setup=lambda _, tmp: (tmp / "tree" / "manifest.json").write_text(DEEP_JSON),
    ),
    Case(
        "folder-huge-input-shapes",
        ("benchmark-folder", "{folder}"),
        "verify.input_shapes asks for 1000000012288 input elements",
        _set("verify.input_shapes.0", [1_000_000, 1_000_000]),
    ),
    Case(
        "folder-shapes-without-types",
        ("benchmark-folder", "{folder}"),
        "verify.input_types names 2 inputs but input_shapes 3",
        lambda manifest: manifest["verify"]["input_shapes"].append([4]),
    ),
    Case(
        "finish-absolute-spec-path",
        ("finish", "{folder}"),
        'candidates[1].spec_path must be a path inside the run folder, got "/etc/hostname"',
        setup=_edit_results(lambda run: run["candidates"][1].update(spec_path="/etc/hostname")),
    ),
    Case(
        "finish-spec-path-link-out",
        ("finish", "{folder}"),
        "specs/linked.mlir is a symbolic link",
        setup=_link_spec_out,
    ),
    Case(
        "finish-results-bad-status",
        ("finish", "{folder}"),
        "candidates[0].status must be 'generated', 'compiled', 'compile-failed'",
        setup=_edit_results(lambda run: run["candidates"][0].update(status="bogus")),
    ),
    Case(
        "finish-results-text-id",
        ("finish", "{folder}"),
        'candidates[1].candidate_id must be an integer, got "1"',
        setup=_edit_results(lambda run: run["candidates"][1].update(candidate_id="1")),
    ),
    Case(
        "finish-results-no-baseline",
        ("finish", "{folder}"),
        "candidates must hold candidate 0 and no id twice",
        setup=_edit_results(lambda run: run["candidates"].pop(0)),
    ),
    Case(
        "finish-benchmark-campaign-not-object",
        ("finish", "{folder}"),
        'benchmark_results.json: campaign.baselines must be an array, got "x"',
        setup=_benchmark_results(campaign={"baselines": "x", "candidates": [], "seconds": 1.0}),
    ),
    Case(
        "finish-benchmark-verdict-of-no-candidate",
        ("finish", "{folder}"),
        "verification.verdicts names candidate 99, not in this run",
        setup=_benchmark_results(verification={"verdicts": {"99": {"status": "verified"}}}),
    ),
    Case(
        "finish-benchmark-verdict-key-not-id",
        ("finish", "{folder}"),
        "verification.verdicts has a key that is not a candidate id: 'x'",
        setup=_benchmark_results(verification={"verdicts": {"x": {"status": "verified"}}}),
    ),
    Case(
        "finish-benchmark-zero-repetitions",
        ("finish", "{folder}"),
        "verification.real_input_timings.repetitions must be at least 1, got 0",
        setup=_benchmark_results(
            verification={"real_input_timings": {"repetitions": 0, "times_ms": {"0": [1.0]}}}
        ),
    ),
    Case(
        "finish-keep-linker-artifacts",
        ("finish", "{folder}"),
        "'--iree-llvmcpu-keep-linker-artifacts' is not a flag a run folder may carry",
        _set("global_flags", ["--iree-llvmcpu-keep-linker-artifacts"]),
    ),
    Case(
        "tune-dispatch-split-foreign-flag",
        (
            *TUNE_DISPATCH,
            "--stop-after",
            "compile",
            "--flags",
            "--iree-llvmcpu-keep-linker-artifacts",
        ),
        "'--iree-llvmcpu-keep-linker-artifacts' is not a flag a run folder may carry",
    ),
    Case(
        "replay-binaries-link-out",
        ("replay", "{folder}", "--candidate", "1"),
        "binaries is a symbolic link",
        setup=_link_binaries_out,
    ),
    Case(
        "replay-unlisted-binaries-link-out",
        ("replay", "{folder}", "--candidate", "1"),
        "binaries is a symbolic link",
        setup=lambda folder, tmp: (
            _link_binaries_out(folder, tmp),
            _edit_results(lambda run: [c.update(binary_path="") for c in run["candidates"]])(
                folder, tmp
            ),
        ),
    ),
    Case(
        "replay-bad-timing-basis",
        ("replay", "{folder}", "--candidate", "1"),
        "results.json: timing_basis must be 'dispatch', 'real-input' or 'model', got \"bogus\"",
        setup=_edit_results(lambda run: run.update(timing_basis="bogus")),
    ),
    Case(
        "replay-boolean-winner",
        ("replay", "{folder}"),
        "decision.winner must be an integer, got true",
        setup=_edit_results(lambda run: run.update(decision={"winner": True})),
    ),
    # database: every command that takes --db checks it before any work, and a refused file gets
    # nothing written into or beside it (no -wal/-shm file, no new database).
    Case(
        "database-tune-text-file",
        (*TUNE[:-1], "--no-flag-search", "--num-candidates", "2", "--db", "{afile}"),
        "afile.txt is not an ireetune database (file is not a database)",
    ),
    Case(
        "database-tune-newer-schema",
        (*TUNE[:-1], "--no-flag-search", "--num-candidates", "2", "--db", "{tmp}/newer.sqlite"),
        "newer.sqlite has database schema",
        setup=lambda folder, tmp: write_newer_schema_file(tmp / "newer.sqlite"),
    ),
    Case(
        "database-tune-newer-schema-wal",
        (*TUNE[:-1], "--no-flag-search", "--num-candidates", "2", "--db", "{tmp}/newer.sqlite"),
        "a newer ireetune wrote it",
        setup=lambda folder, tmp: write_newer_schema_file(tmp / "newer.sqlite", wal=True),
    ),
    Case(
        "database-tune-dispatch-newer-schema-wal",
        (*TUNE_DISPATCH, "--num-candidates", "2", "--db", "{tmp}/newer.sqlite"),
        "a newer ireetune wrote it",
        setup=lambda folder, tmp: write_newer_schema_file(tmp / "newer.sqlite", wal=True),
    ),
    Case(
        "database-tune-dispatch-foreign-wal",
        (*TUNE_DISPATCH, "--num-candidates", "2", "--db", "{tmp}/wal.sqlite"),
        "wal.sqlite is an SQLite file of another program (tables: customers)",
        setup=lambda folder, tmp: write_wal_foreign_file(tmp / "wal.sqlite"),
    ),
    Case(
        "database-db-list-newer-schema-wal",
        ("db", "--db", "{tmp}/newer.sqlite", "list"),
        "a newer ireetune wrote it",
        setup=lambda folder, tmp: write_newer_schema_file(tmp / "newer.sqlite", wal=True),
    ),
    Case(
        "database-db-import-foreign-wal-source",
        ("db", "--db", "{tmp}/new.sqlite", "import", "{tmp}/wal.sqlite"),
        "wal.sqlite is an SQLite file of another program",
        setup=lambda folder, tmp: write_wal_foreign_file(tmp / "wal.sqlite"),
    ),
    Case(
        "database-db-import-bad-rows-into-a-new-database",
        ("db", "--db", "{tmp}/new.sqlite", "import", "{bad_rows}"),
        "bad_rows.json: row 0: speedup",
    ),
    # overwrite (issue 22, defect 3): an existing output needs --force; an input, never.
    Case(
        "db-export-over-its-database",
        ("db", "--db", "{empty_db}", "export", "--format", "json", "-o", "{empty_db}", "--force"),
        "it is the input",
    ),
    Case(
        "db-export-over-an-existing-file",
        ("db", "--db", "{empty_db}", "export", "--format", "csv", "-o", "{afile}"),
        "afile.txt exists; pass --force to replace it",
    ),
    Case(
        "db-report-over-its-database",
        ("db", "--db", "{empty_db}", "report", "-o", "{empty_db}", "--force"),
        "it is the input",
    ),
    Case(
        "db-report-over-an-existing-file",
        ("db", "--db", "{empty_db}", "report", "-o", "{afile}"),
        "exists; pass --force",
    ),
    Case(
        "report-over-a-file-of-the-run",
        ("report", "{folder}", "-o", "{folder}/results.json", "--force"),
        "which this command reads",
    ),
    Case(
        "report-over-an-existing-file",
        ("report", "{folder}", "-o", "{afile}"),
        "exists; pass --force",
    ),
    Case(
        "spec-link-over-its-input",
        ("spec", "link", "{spec}", "-o", "{spec}", "--force"),
        "it is the input",
    ),
    Case(
        "spec-link-over-an-existing-file",
        ("spec", "link", "{spec}", "-o", "{afile}"),
        "exists; pass --force",
    ),
    Case(
        "compile-over-its-model",
        ("compile", "{model}", "--target", "cpu", "--spec", "{spec}", "-o", "{model}", "--force"),
        "it is the input",
    ),
    Case(
        "compile-over-its-model-through-a-link",
        (
            "compile",
            "{model}",
            "--target",
            "cpu",
            "--spec",
            "{spec}",
            "-o",
            "{tmp}/link.vmfb",
            "--force",
        ),
        "it is the input",
        setup=lambda _, tmp: (tmp / "link.vmfb").symlink_to(tmp / "model.mlir"),
    ),
    Case(
        "compile-over-its-spec-another-spelling",
        (
            "compile",
            "{model}",
            "--target",
            "cpu",
            "--spec",
            "{spec}",
            "-o",
            "{adir}/../spec.mlir",
            "--force",
        ),
        "it is the input",
    ),
    Case(
        "compile-over-an-existing-file",
        ("compile", "{model}", "--target", "cpu", "--spec", "{spec}", "-o", "{afile}"),
        "exists; pass --force",
    ),
    Case(
        "profile-output-over-its-configs",
        (*PROFILE, "--configs", "{spec}", "--output", "{spec}", "--force"),
        "it is the input",
    ),
    Case(
        "profile-output-over-a-file-of-its-tree",
        (
            "profile",
            "--phase",
            "run",
            "--generated-dir",
            "{tree}",
            "--output",
            "{tree}/manifest.json",
            "--force",
        ),
        "which this command reads",
    ),
    Case(
        "profile-output-over-an-existing-file",
        (*PROFILE, "--output", "{afile}"),
        "exists; pass --force",
    ),
    # inputs (issue 22): element types and sizes no input can be made for, refused before any
    # run folder exists; binary and empty files, symlink loops, empty device names, huge counts.
    Case(
        "tune-dispatch-i4-matmul",
        ("tune-dispatch", "{tmp}/i4.mlir", "--output-dir", "{runs}"),
        "element type i4, which ireetune cannot make inputs for",
        setup=_write_model("i4.mlir", _matmul_model(64, 128, 96, "i4")),
    ),
    Case(
        "tune-dispatch-search-flags-i4-matmul",
        ("tune-dispatch", "{tmp}/i4.mlir", "--output-dir", "{runs}", "--search-flags", "--no-db"),
        "element type i4, which ireetune cannot make inputs for",
        setup=_write_model("i4.mlir", _matmul_model(64, 128, 96, "i4")),
    ),
    Case(
        "tune-dispatch-f8-matmul",
        ("tune-dispatch", "{tmp}/f8.mlir", "--output-dir", "{runs}"),
        "element type f8E4M3FNUZ, which ireetune cannot make inputs for",
        setup=_write_model("f8.mlir", _matmul_model(64, 128, 96, "f8E4M3FNUZ")),
    ),
    Case(
        "tune-dispatch-huge-matmul",
        ("tune-dispatch", "{tmp}/huge.mlir", "--output-dir", "{runs}"),
        "the dispatch's inputs take 7,451 GiB, more than ireetune makes inputs for",
        setup=_write_model("huge.mlir", _matmul_model(10**6, 10**6, 10**6, "f32")),
    ),
    Case(
        "tune-i4-model",
        ("tune", "{tmp}/i4.mlir", "--output-dir", "{runs}", "--no-db"),
        "element type i4",
        setup=_write_model("i4.mlir", _matmul_model(64, 128, 96, "i4")),
    ),
    Case(
        "tune-huge-model",
        ("tune", "{tmp}/huge.mlir", "--output-dir", "{runs}", "--no-db"),
        "the model's inputs take 11,176 GiB",
        setup=_write_model("huge.mlir", _matmul_model(10**6, 10**6, 10**6, "f32")),
    ),
    Case(
        "tune-huge-input",
        (*TUNE, "--input", "99999999999x99999999999xf32", "--input", "96x128xf32"),
        "the --input values take",
    ),
    Case(
        "tune-input-zero-rows",
        (*TUNE, "--input", "0x64xf32", "--input", "96x128xf32"),
        "--input 1 is 0x64xf32; the model's @main takes 64x96xf32 there",
    ),
    Case(
        "tune-input-other-type",
        (*TUNE, "--input", "64x96xf32", "--input", "96x128xf16"),
        "--input 2 is 96x128xf16; the model's @main takes 96x128xf32 there",
    ),
    Case(
        "profile-huge-matmul",
        (*PROFILE[:2], "--m", "1000000", "--n", "1000000", "--k", "1000000", *PROFILE[-2:]),
        "inputs take 7,451 GiB",
    ),
    Case("tune-binary-model", (*TUNE[:1], "{binary}", *TUNE[2:]), "binary.mlir"),
    Case(
        "compile-binary-model",
        ("compile", "{binary}", "--target", "cpu", "--spec", "{spec}", "-o", "{tmp}/o.vmfb"),
        "is not UTF-8 text",
    ),
    Case(
        "spec-dump-binary-model",
        ("spec", "dump", "{binary}", "--target", "cpu", "--spec", "{spec}"),
        "is not UTF-8 text",
    ),
    Case(
        "spec-show-binary-model",
        ("spec", "show", "{spec}", "--model", "{binary}"),
        "is not UTF-8 text",
    ),
    Case(
        "tune-dispatch-empty-model",
        ("tune-dispatch", "{tmp}/empty.mlir"),
        "input file is empty",
        setup=_write_model("empty.mlir", ""),
    ),
    Case(
        "tune-empty-model",
        (*TUNE[:1], "{tmp}/empty.mlir", *TUNE[2:]),
        "model file is empty",
        setup=_write_model("empty.mlir", ""),
    ),
    Case(
        "compile-empty-model",
        ("compile", "{tmp}/empty.mlir", "--target", "cpu", "--spec", "{spec}", "-o", "{tmp}/o"),
        "model is empty",
        setup=_write_model("empty.mlir", ""),
    ),
    Case(
        "spec-dump-empty-model",
        ("spec", "dump", "{tmp}/empty.mlir", "--target", "cpu", "--spec", "{spec}"),
        "model is empty",
        setup=_write_model("empty.mlir", ""),
    ),
    Case(
        "spec-show-empty-model",
        ("spec", "show", "{spec}", "--model", "{tmp}/empty.mlir"),
        "model is empty",
        setup=_write_model("empty.mlir", ""),
    ),
    Case(
        "tune-dispatch-symlink-loop",
        ("tune-dispatch", "{tmp}/loop.mlir"),
        "input file is a symlink loop",
        setup=_make_symlink_loop,
    ),
    Case(
        "tune-symlink-loop",
        (*TUNE[:1], "{tmp}/loop.mlir", *TUNE[2:]),
        "model file is a symlink loop",
        setup=_make_symlink_loop,
    ),
    Case(
        "compile-symlink-loop",
        ("compile", "{tmp}/loop.mlir", "--target", "cpu", "--spec", "{spec}", "-o", "{tmp}/o"),
        "model is a symlink loop",
        setup=_make_symlink_loop,
    ),
    Case(
        "compile-spec-symlink-loop",
        ("compile", "{model}", "--target", "cpu", "--spec", "{tmp}/loop.mlir", "-o", "{tmp}/o"),
        "is a symlink loop",
        setup=_make_symlink_loop,
    ),
    Case(
        "compile-flags-file-symlink-loop",
        (
            "compile",
            "{model}",
            "--target",
            "cpu",
            "--flags-file",
            "{tmp}/loop.mlir",
            "-o",
            "{tmp}/o",
        ),
        "flags file is a symlink loop",
        setup=_make_symlink_loop,
    ),
    Case(
        "spec-dump-spec-symlink-loop",
        ("spec", "dump", "{model}", "--target", "cpu", "--spec", "{tmp}/loop.mlir"),
        "spec is a symlink loop",
        setup=_make_symlink_loop,
    ),
    Case(
        "spec-show-model-symlink-loop",
        ("spec", "show", "{spec}", "--model", "{tmp}/loop.mlir"),
        "model is a symlink loop",
        setup=_make_symlink_loop,
    ),
    Case(
        "spec-check-symlink-loop",
        ("spec", "check", "{tmp}/loop.mlir"),
        "is a symlink loop",
        setup=_make_symlink_loop,
    ),
    *(
        Case(
            f"{command}-run-folder-symlink-loop",
            (command, "{tmp}/loop.mlir"),
            "run folder is a symlink loop",
            setup=_make_symlink_loop,
        )
        for command in (
            "replay",
            "report",
            "finish",
            "benchmark-folder",
            "continue",
            "device-step",
        )
    ),  # fmt: skip
    Case(
        "tune-dispatch-newline-in-name",
        ("tune-dispatch", "{tmp}/two\nlines.mlir"),
        "input file not found",
    ),
    Case("tune-dispatch-no-devices", (*TUNE_DISPATCH, "--devices", ",,,"), "empty device name"),
    Case("tune-no-devices", (*TUNE, "--devices", "local-task,,"), "empty device name"),
    Case(
        "benchmark-folder-no-devices",
        ("benchmark-folder", "{folder}", "--devices", ",,,"),
        "empty device name",
    ),
    Case(
        "device-step-no-devices",
        ("device-step", "{folder}", "--devices", ","),
        "empty device name",
    ),
    Case(
        "tune-dispatch-endless-candidates",
        (*TUNE_DISPATCH, "--num-candidates", "999999999999"),
        "argument --num-candidates: must be at most 100000, got 999999999999",
    ),
    Case(
        "tune-endless-candidates",
        (*TUNE, "--num-candidates", "999999999999"),
        "argument --num-candidates: must be at most 100000",
    ),
    Case(
        "tune-endless-candidates-per-dispatch",
        (*TUNE, "--candidates-per-dispatch", "100001"),
        "argument --candidates-per-dispatch: must be at most 100000",
    ),
    Case(
        "tune-endless-dispatches",
        (*TUNE, "--max-dispatches", "100001"),
        "argument --max-dispatches: must be at most 100000",
    ),
    Case(
        "tune-dispatch-endless-repetitions",
        (*TUNE_DISPATCH, "--repetitions", "100001"),
        "argument --repetitions: must be at most 100000",
    ),
    Case(
        "tune-dispatch-endless-confirm-rounds",
        (*TUNE_DISPATCH, "--confirm-rounds", "100001"),
        "argument --confirm-rounds: must be at most 100000",
    ),
    Case(
        "profile-endless-repetitions",
        (*PROFILE, "--repetitions", "100001"),
        "argument --repetitions: must be at most 100000",
    ),
    Case(
        "replay-endless-rounds",
        ("replay", "{folder}", "--rounds", "100001"),
        "argument --rounds: must be at most 100000",
    ),
    # z3cpu: a CPU name LLVM does not know (it would only warn and compile for a generic CPU).
    Case("target-cpu-unknown-name", (*TUNE_DISPATCH, "--target", "cpu:zen4"), "unknown CPU 'zen4'"),
    Case(
        "tune-target-cpu-unknown-name", (*TUNE, "--target", "cpu:Haswell"), "unknown CPU 'Haswell'"
    ),
    # typed: a file of another format version is refused in one line naming both versions; every
    # field of the profiler's manifest is checked against its model.
    Case(
        "typed-handoff-of-another-version",
        ("benchmark-folder", "{folder}"),
        "handoff.json has format ireetune-benchmark-folder/2, written by another ireetune; this "
        "one reads ireetune-benchmark-folder/1",
        _set("format", "ireetune-benchmark-folder/2"),
    ),
    Case(
        "typed-results-of-another-version",
        ("replay", "{folder}"),
        "results.json has format ireetune-dispatch-run/2, written by another ireetune; this one "
        "reads ireetune-dispatch-run/1",
        setup=_edit_results(lambda run: run.update(format="ireetune-dispatch-run/2")),
    ),
    Case(
        "typed-benchmark-results-of-another-version",
        ("finish", "{folder}"),
        "benchmark_results.json has format ireetune-benchmark-results/2, written by another "
        "ireetune; this one reads ireetune-benchmark-results/1",
        setup=_benchmark_results(format="ireetune-benchmark-results/2"),
    ),
    Case(
        "typed-benchmark-results-of-another-file",
        ("finish", "{folder}"),
        "benchmark_results.json is not a ireetune-benchmark-results/1 file",
        setup=_benchmark_results(format="ireetune-dispatch-run/1"),
    ),
    Case(
        "typed-profile-manifest-of-another-version",
        ("profile", "--phase", "run", "--generated-dir", "{tree}"),
        "manifest.json has version 2; expected 1",
        setup=lambda _, tmp: (tmp / "tree" / "manifest.json").write_text(
            (tmp / "tree" / "manifest.json").read_text().replace('"version": 1', '"version": 2')
        ),
    ),
    Case(
        "typed-profile-matmul-with-a-batch",
        ("profile", "--phase", "run", "--generated-dir", "{tree}"),
        "dispatches[0].operation.matmul must give batch for batch_matmul, and only for it",
        setup=lambda _, tmp: _edit_tree(tmp, lambda entry: entry["operation"].update(batch=4)),
    ),
    Case(
        "typed-profile-dimension-text",
        ("profile", "--phase", "run", "--generated-dir", "{tree}"),
        'dispatches[0].operation.matmul.m must be an integer, got "64"',
        setup=lambda _, tmp: _edit_tree(tmp, lambda entry: entry["operation"].update(m="64")),
    ),
    # vkspace (issue 24): Vulkan target names and pipelines.
    Case(
        "target-vulkan-unknown-name",
        (*TUNE_DISPATCH, "--target", "vulkan:apple"),
        "unknown Vulkan target 'apple'; IREE 3.13 knows: valhall",
    ),
    Case(
        "target-vulkan-cuda-pipeline",
        (*TUNE_DISPATCH, "--target", "vulkan:valhall4", "--pipeline", "TileAndFuse"),
        "unknown pipeline 'TileAndFuse' for vulkan; choose from BaseVectorize",
    ),
    Case(
        "compile-vulkan-unknown-name",
        (
            "compile",
            "{model}",
            "--target",
            "vulkan:sm_90",
            "--spec",
            "{spec}",
            "-o",
            "{tmp}/o.vmfb",
        ),
        "unknown Vulkan target 'sm_90'",
    ),
    # vkdevice (issue 24): Vulkan devices.
    Case(
        "devices-vulkan-by-index",
        (*TUNE_DISPATCH, "--target", "vulkan", "--devices", "vulkan,vulkan://1"),
        "'vulkan://1' names no device: IREE opens Vulkan devices as vulkan or vulkan://GPU-<uuid>",
    ),
    # resume (issue 23.3): a run continued from its folder at a stage.
    Case(
        "finish-checks-cut-short",
        ("finish", "{folder}"),
        "the output checks did not complete (saved after the measure stage): run `ireetune measure",
        setup=_benchmark_results(stage="measure"),
    ),
    Case(
        "finish-benchmark-results-of-an-unknown-stage",
        ("finish", "{folder}"),
        "benchmark_results.json: stage must be",
        setup=_benchmark_results(stage="decide"),
    ),
    Case("resume-missing-folder", ("resume", "{tmp}/missing"), "run folder not found"),
    Case(
        "resume-without-options",
        ("resume", "{adir}"),
        "has no run_options.json: not a tune-dispatch run folder of this version",
    ),
    Case(
        "resume-options-of-another-version",
        ("resume", "{folder}"),
        "run_options.json has format ireetune-dispatch-options/2, written by another ireetune; "
        "this one reads ireetune-dispatch-options/1",
        setup=lambda folder, _: (folder / "run_options.json").write_text(
            (folder / "run_options.json").read_text().replace("options/1", "options/2")
        ),
    ),
    Case(
        "resume-options-field-of-another-type",
        ("resume", "{folder}"),
        "run_options.json: options.num_candidates: Input should be a valid integer",
        setup=lambda folder, _: (folder / "run_options.json").write_text(
            re.sub(
                r'"num_candidates": \d+',
                '"num_candidates": "5"',
                (folder / "run_options.json").read_text(),
            )
        ),
    ),
    Case("resume-stopped-after-compiling", ("resume", "{folder}"), "stopped after compiling"),
    Case(
        "resume-finished",
        ("resume", "{folder}"),
        "is finished (improved): nothing to resume",
        setup=_edit_results(lambda run: run.update(outcome="improved")),
    ),
    Case(
        "resume-before-specs",
        ("resume", "{folder}"),
        "was stopped before its specs were saved (last stage saved: none)",
        setup=_edit_results(lambda run: run.pop("progress")),
    ),
    Case(
        "resume-in-online-rounds",
        ("resume", "{folder}"),
        "was stopped in the online search's rounds",
        setup=_edit_results(lambda run: run.update(progress={"done": ["specs", "pick_round"]})),
    ),
    Case(
        "resume-progress-not-a-record",
        ("resume", "{folder}"),
        "results.json: progress.pause.round_trip must be at least 1, got 0",
        setup=_edit_results(
            lambda run: run.update(progress={"done": ["specs"], "pause": {"round_trip": 0}})
        ),
    ),
]


@pytest.fixture(scope="module")
def compiled_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run folder written by `tune-dispatch --stop-after compile` (the crafted cases'
    starting point)."""
    return compile_matmul_for_device_host(
        tmp_path_factory.mktemp("compiled"), num_candidates=2, repetitions=2,
        min_repetition_s=0.002, confirm_rounds=1, confirm_top=1, references=References.ALL,
    )  # fmt: skip


@pytest.fixture(scope="module")
def profiler_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real tree written by `profile --phase compile` (the crafted profiler cases' start)."""
    tree = tmp_path_factory.mktemp("profiler") / "generated"
    arguments = [*PROFILE[:-1], str(tree), "--phase", "compile", "--no-progress"]
    assert main(arguments) == 0
    return tree


def _prepare_workspace(
    tmp: Path, compiled: Path, tree: Path, matmul_benchmark: Path
) -> dict[str, Path]:
    """Write every file the cases name; return their placeholders."""
    (tmp / "model.mlir").write_text(MATMUL_MODEL)
    (tmp / "garbage.mlir").write_text("this is not MLIR {")
    (tmp / "binary.mlir").write_bytes(b"\xff\xfe\x00\x81 not text")
    (tmp / "dynamic.mlir").write_text(DYNAMIC_MODEL)
    (tmp / "argmax.mlir").write_text(ARGMAX_MODEL)
    (tmp / "no_root_benchmark.mlir").write_text(
        matmul_benchmark.read_text().replace(", root_op = #iree_codegen.root_op<set = 0>", "")
    )
    (tmp / "bad.onnx").write_bytes(b"\x08\x07 definitely not a protobuf model \xff")
    (tmp / "afile.txt").write_text("just text\n")
    (tmp / "adir").mkdir()
    (tmp / "spec.mlir").write_text(
        "module attributes {transform.with_named_sequence} {\n"
        "  transform.named_sequence @__kernel_config(%arg0: !transform.any_op {transform.consumed})"
        " -> !transform.any_op attributes {iree_codegen.tuning_spec_entrypoint} {\n"
        "    transform.yield %arg0 : !transform.any_op\n  }\n}\n"
    )
    foreign = sqlite3.connect(tmp / "foreign.sqlite")
    foreign.execute("CREATE TABLE other (x)")
    foreign.commit()
    foreign.close()
    lookalike = sqlite3.connect(tmp / "lookalike.sqlite")
    lookalike.execute("CREATE TABLE meta (anything)")
    lookalike.execute("CREATE TABLE results (anything)")
    lookalike.commit()
    lookalike.close()
    (tmp / "bad_rows.json").write_text(json.dumps({"ireetune_results": [STRING_SPEEDUP_ROW]}))
    shutil.copytree(compiled, tmp / "folder")
    (tmp / "outside.vmfb").write_bytes(b"native code from elsewhere")
    shutil.copytree(tree, tmp / "tree")
    shutil.copytree(compiled, tmp / "measured_elsewhere")
    (tmp / "measured_elsewhere" / RESULTS_NAME).write_text(
        json.dumps({"manifest_sha256": "0" * 64, "campaign": {}})
    )
    return {
        "tmp": tmp,
        "runs": tmp / "runs",
        "gen": tmp / "generated",
        "model": tmp / "model.mlir",
        "garbage": tmp / "garbage.mlir",
        "binary": tmp / "binary.mlir",
        "dynamic": tmp / "dynamic.mlir",
        "no_root": tmp / "no_root_benchmark.mlir",
        "bad_onnx": tmp / "bad.onnx",
        "afile": tmp / "afile.txt",
        "adir": tmp / "adir",
        "spec": tmp / "spec.mlir",
        "foreign": tmp / "foreign.sqlite",
        "lookalike": tmp / "lookalike.sqlite",
        "bad_rows": tmp / "bad_rows.json",
        "folder": tmp / "folder",
        "measured_elsewhere": tmp / "measured_elsewhere",
        "tree": tmp / "tree",
        "empty_db": tmp / "empty.sqlite",
    }


def use_workspace_temp_folder(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the temp folder (Python's and the children's `TMPDIR`) into the workspace, so that
    a file a case leaves there changes the workspace's snapshot."""
    temp = workspace / "temp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    return temp


def _snapshot(root: Path) -> dict[str, str]:
    """Map every file, folder and link under `root` to its content hash, "dir" or its target."""
    state = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        if path.is_symlink():
            state[key] = f"link to {os.readlink(path)}"
        elif path.is_file():
            state[key] = hashlib.sha256(path.read_bytes()).hexdigest()
        elif path.is_dir():
            state[key] = "dir"
        else:
            # A device, FIFO or socket: its kind (a write that replaced it changes it).
            state[key] = f"special {stat.S_IFMT(path.lstat().st_mode):o}"
    return state


@pytest.mark.parametrize(
    "case", [pytest.param(case, id=case.name, marks=case.marks) for case in CASES]
)
def test_bad_input_ends_in_one_line_and_changes_nothing(
    case: Case,
    compiled_folder: Path,
    profiler_tree: Path,
    matmul_benchmark: Path,
    argmax_benchmark: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    use_workspace_temp_folder(tmp_path, monkeypatch)
    paths = _prepare_workspace(tmp_path, compiled_folder, profiler_tree, matmul_benchmark)
    paths["argmax"] = argmax_benchmark
    if "{empty_db}" in case.arguments:
        # A real, empty database (made before the snapshot: it must not change either).
        assert (
            main(["db", "--db", str(paths["empty_db"]), "import", str(_empty_export(tmp_path))])
            == 0
        )
    manifest_path = paths["folder"] / MANIFEST_NAME
    if case.manifest_text is not None:
        manifest_path.write_text(case.manifest_text)
    if case.setup is not None:
        case.setup(paths["folder"], tmp_path)
    if case.edit_manifest is not None:
        manifest = json.loads(manifest_path.read_text())
        case.edit_manifest(manifest)
        manifest_path.write_text(json.dumps(manifest))
    if any(UNWRITABLE in argument for argument in case.arguments) and not Path("/sys").is_dir():
        pytest.skip("needs Linux sysfs as an unwritable folder")
    arguments = [a.format(**{k: str(v) for k, v in paths.items()}) for a in case.arguments]
    capsys.readouterr()
    before = _snapshot(tmp_path)

    status = main(arguments)

    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    if case.progress_before:
        lines = [line for line in lines if line.startswith("ireetune:")]
    assert status == 2, captured.err
    assert len(lines) == 1 and captured.err.endswith("\n"), captured.err
    assert lines[0].startswith("ireetune: error: "), captured.err
    assert case.expected in lines[0], lines[0]
    assert "Traceback" not in captured.err + captured.out
    after = _snapshot(tmp_path)
    changed = sorted(key for key in before if after.get(key) != before[key])
    assert changed == []
    if not case.creates_files:
        assert sorted(set(after) - set(before)) == []


def _empty_export(folder: Path) -> Path:
    path = folder / "empty_export.json"
    path.write_text(json.dumps({"ireetune_results": []}))
    return path


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_output_dir_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "model.mlir"
    model.write_text(MATMUL_MODEL)
    read_only = tmp_path / "read_only"
    read_only.mkdir()
    read_only.chmod(0o555)
    try:
        status = main(["tune-dispatch", str(model), "--output-dir", str(read_only / "runs")])
    finally:
        read_only.chmod(0o755)
    assert status == 2
    assert capsys.readouterr().err == (
        f"ireetune: error: cannot write to {read_only / 'runs'}: {read_only} is not writable "
        "(Permission denied)\n"
    )


def test_the_suite_covers_every_command() -> None:
    commands = {case.arguments[0] for case in CASES if case.arguments}
    assert commands >= {
        "tune", "tune-dispatch", "benchmark-folder", "finish", "compile", "spec", "profile", "db",
        "device-step", "continue",
    }  # fmt: skip
    assert len(CASES) >= 60


def test_module_entry_point_gives_the_same_one_line(tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "ireetune.cli", "benchmark-folder", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (completed.returncode, completed.stderr) == (
        2,
        f"ireetune: error: run folder not found: {tmp_path / 'missing'}\n",
    )
