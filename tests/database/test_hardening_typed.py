"""Files that cross a boundary: one typed model per file, its version, and its codecs in step.

Each file a run folder holds is described once (a pydantic model in database/run_files.py or beside the
file's reader); these tests keep the dataclasses and the models describing the same fields, and
check that a file of the old layout is read while one of another version is refused in one line.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from ireetune.core.candidate import make_knobs
from ireetune.core.records import (
    RESULTS_FORMAT,
    CandidateRecord,
    CandidateStatus,
    record_to_json,
    write_results,
)
from ireetune.database.run_files import (
    CandidateRecordFile,
    DispatchRunFile,
    RunFileError,
    check_format,
    read_model_file,
    validate_record,
)
from ireetune.database.store import StoredResult
from ireetune.database.validate import ResultRow
from ireetune.decision.stats import Basis
from ireetune.flows.handoff.finish import record_from_json
from ireetune.report.run_view import read_model_run

RECORDS = [
    CandidateRecord(0, None, CandidateStatus.MEASURED, times_ms=(2.0, 2.1), median_ms=2.05),
    CandidateRecord(
        1, make_knobs({"vec_m": 8, "pipeline": "mmt4d"}), CandidateStatus.VERIFIED,
        heuristic_score=0.5, spec_path="specs/candidate_1.mlir", times_ms=(1.0, 1.1),
        median_ms=1.05, speedup=1.95, speedup_low=1.8, speedup_high=2.1, basis="dispatch",
        confirmed=True, rounds_ms=((1.0, 1.1), (1.2,)), outputs_match=True, verdict="winner",
        timing="device", batch=4,
    ),
]  # fmt: skip


def test_the_record_model_and_the_record_name_the_same_fields() -> None:
    assert {f.name for f in dataclasses.fields(CandidateRecordFile)} == {
        f.name for f in dataclasses.fields(CandidateRecord)
    }


def test_a_record_comes_back_from_its_json_form_unchanged() -> None:
    for record in RECORDS:
        stored = validate_record(Path("results.json"), CandidateRecordFile, record_to_json(record))
        assert record_from_json(stored) == record


def test_the_import_row_model_names_the_stored_result_fields() -> None:
    stored = {f.name for f in dataclasses.fields(StoredResult)} - {"key"}
    key = {"compiler_version", "target", "device", "problem", "signature"}
    assert set(ResultRow.model_fields) == stored | key


def test_results_json_carries_its_format_and_an_unversioned_one_still_reads(
    tmp_path: Path,
) -> None:
    path = tmp_path / "results.json"
    write_results(path, {"timing_basis": "dispatch"}, RECORDS)
    document = json.loads(path.read_text())
    assert document["format"] == RESULTS_FORMAT == "ireetune-dispatch-run/1"
    # As the code before format versions wrote it: no format field, the same layout.
    del document["format"]
    path.write_text(json.dumps(document))
    run = read_model_file(path, DispatchRunFile, tmp_path)
    assert (run.timing_basis, [record_from_json(c) for c in run.candidates]) == (
        Basis.DISPATCH,
        RECORDS,
    )


def test_a_results_json_of_another_version_is_refused_naming_both(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    write_results(path, {}, RECORDS)
    path.write_text(path.read_text().replace(RESULTS_FORMAT, "ireetune-dispatch-run/7"))
    with pytest.raises(RunFileError) as excinfo:
        read_model_file(path, DispatchRunFile, tmp_path)
    assert str(excinfo.value) == (
        f"{path} has format ireetune-dispatch-run/7, written by another ireetune; this one "
        "reads ireetune-dispatch-run/1: write the folder again with this ireetune"
    )


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ({"format": "ireetune-x/1"}, ""),
        ({}, ""),
        ({"format": "ireetune-x/0"}, "f has format ireetune-x/0, written by another ireetune"),
        ({"format": "ireetune-y/1"}, "f is not a ireetune-x/1 file"),
        ({"format": 1}, "f is not a ireetune-x/1 file"),
        ([], "f is not a ireetune-x/1 file"),
    ],
)
def test_the_format_check(document: object, expected: str) -> None:
    if not expected:
        check_format(Path("f"), document, "ireetune-x/1", "file", unversioned=True)
        return
    with pytest.raises(RunFileError) as excinfo:
        check_format(Path("f"), document, "ireetune-x/1", "file", unversioned=True)
    assert str(excinfo.value).startswith(expected)


def test_a_file_without_a_format_is_refused_once_its_layout_is_past_version_1() -> None:
    with pytest.raises(RunFileError) as excinfo:
        check_format(Path("f"), {}, "ireetune-x/2", "file", unversioned=True)
    assert str(excinfo.value) == (
        "f has no format version (written before version 2); this ireetune reads "
        "ireetune-x/2: write the folder again with this ireetune"
    )


def test_a_model_run_of_another_version_is_refused_and_an_unversioned_one_reads(
    tmp_path: Path,
) -> None:
    report = {"model": "mlp.mlir", "target": "cpu", "dispatches": [], "notes": []}
    (tmp_path / "report.json").write_text(json.dumps(report))
    assert read_model_run(tmp_path).dispatches == ()
    (tmp_path / "report.json").write_text(
        json.dumps({**report, "format": "ireetune-model-report/2"})
    )
    with pytest.raises(RunFileError) as excinfo:
        read_model_run(tmp_path)
    assert str(excinfo.value) == (
        f"{tmp_path / 'report.json'} has format ireetune-model-report/2, written by another "
        "ireetune; this one reads ireetune-model-report/1: write the folder again with this "
        "ireetune"
    )
