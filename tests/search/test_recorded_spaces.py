"""Recorded spaces: the compact format, its checks, and the dataset shipped in data/spaces/."""

from __future__ import annotations

import dataclasses
import gzip
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ireetune.core.candidate import make_knobs
from ireetune.core.errors import IreetuneError
from ireetune.problem.contraction import ContractionProblem
from ireetune.search.recorded import (
    RecordedRow,
    RecordedSpace,
    load_recorded_space,
    load_recorded_spaces,
)
from tests.conftest import REPOSITORY

sys.path.insert(0, str(REPOSITORY / "bench"))

from space_files import (  # noqa: E402
    baseline_time,
    read_run_folder_rows,
    select_leaders,
    write_recorded_space,
)

DATA = REPOSITORY / "data" / "spaces"

PROBLEM = ContractionProblem(
    op_name="linalg.matmul", loop_sizes=(64, 128, 96), batch_dims=(), m_dims=(0,), n_dims=(1,),
    k_dims=(2,), lhs_type="f32", rhs_type="f32", output_type="f32",
    indexing_maps=("(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d2, d1)", "(d0, d1, d2) -> (d0, d1)"),
    lhs_shape=(64, 96), rhs_shape=(96, 128), output_shape=(64, 128),
)  # fmt: skip
FACTS = {
    "cpu": "znver4", "native_vector_bytes": 64, "vector_registers": 32, "l1_bytes": 32768,
    "l2_bytes": 1048576, "threads": 2, "max_vector_bytes": 32768,
}  # fmt: skip


def _knobs(dist_m: int, vec_m: int) -> tuple[tuple[str, int | str], ...]:
    return make_knobs({"dist_m": dist_m, "dist_n": 64, "vec_k": 16, "vec_m": vec_m, "vec_n": 16})


SPACE = RecordedSpace(
    name="matmul_64x128x96_f32",
    target="cpu#abc",
    device="local-task (test cpu, 2 cores)",
    problem=PROBLEM,
    facts=FACTS,
    provenance={"machine": "test", "date": "2026-11-23T15:00:00+00:00", "load_average_before": [1.0, 1.0, 1.0]},
    rows=(
        RecordedRow(_knobs(32, 8), "measured", 1.4, 1.5, 0.8, False, "aaaa"),
        RecordedRow(_knobs(64, 8), "compile-failed", None, None, None, False, ""),
        RecordedRow(_knobs(16, 8), "duplicate", None, None, None, False, "aaaa"),
        RecordedRow(_knobs(16, 4), "not-applied", None, None, None, False, "base"),
        RecordedRow(_knobs(64, 4), "measured", 0.85, 0.9, 1.25, True, "bbbb"),
    ),
    baseline=RecordedRow(_knobs(64, 8), "measured", 1.1, 1.2, 1.0, True, "base"),
    knob_names=("dist_m", "dist_n", "vec_k", "vec_m", "vec_n"),
)  # fmt: skip


def test_a_space_reads_back_exactly_as_written(tmp_path: Path) -> None:
    path = write_recorded_space(SPACE, tmp_path)
    assert path == tmp_path / "matmul_64x128x96_f32.json.gz"
    assert load_recorded_space(path) == SPACE


def test_writing_twice_gives_the_same_bytes(tmp_path: Path) -> None:
    first = write_recorded_space(SPACE, tmp_path / "a").read_bytes()
    second = write_recorded_space(SPACE, tmp_path / "b").read_bytes()
    assert first == second


def test_effective_times_follow_duplicates_and_the_default() -> None:
    # Times are the fastest repetitions; the duplicate runs as row 0's binary; the config that
    # did not apply runs as the default.
    assert SPACE.effective_times() == [1.4, None, 1.4, 1.1, 0.85]


REMEASURED = dataclasses.replace(
    SPACE,
    remeasured={"bbbb": (0.95, 0.9, 1.3), "base": (1.0, 0.98, 0.99)},
    provenance={**SPACE.provenance, "remeasure": {"rounds": 3}},
)


def test_re_measured_rounds_decide_the_times_of_their_binaries() -> None:
    # The fastest repetition of the rounds replaces the first pass for every row of a
    # re-measured binary (measured, and the config that did not apply: the default's); the rest
    # keep their first pass, scaled by the median ratio of the re-measured binaries' times
    # (0.9 / 0.85 and 0.98 / 1.1) to the machine as the re-measurement found it.
    factor = (0.9 / 0.85 + 0.98 / 1.1) / 2
    assert REMEASURED.conditions_factor() == pytest.approx(factor)
    assert REMEASURED.effective_times() == pytest.approx(
        [1.4 * factor, None, 1.4 * factor, 0.98, 0.9]
    )
    assert REMEASURED.effective_times(use_remeasured=False) == [1.4, None, 1.4, 1.1, 0.85]
    assert baseline_time(REMEASURED) == 0.98
    assert baseline_time(REMEASURED, use_remeasured=False) == 1.1


def test_a_re_measured_space_reads_back_exactly_as_written(tmp_path: Path) -> None:
    path = write_recorded_space(REMEASURED, tmp_path)
    assert load_recorded_space(path) == REMEASURED
    assert json.loads(gzip.decompress(path.read_bytes()))["version"] == 2


def test_a_version_1_space_still_reads(tmp_path: Path) -> None:
    path = write_recorded_space(SPACE, tmp_path)
    data = json.loads(gzip.decompress(path.read_bytes()))
    data["version"] = 1
    del data["remeasured"]
    path.write_bytes(gzip.compress(json.dumps(data).encode()))
    assert load_recorded_space(path) == SPACE


def test_re_measured_times_that_are_not_positive_are_refused(tmp_path: Path) -> None:
    path = write_recorded_space(REMEASURED, tmp_path)
    data = json.loads(gzip.decompress(path.read_bytes()))
    data["remeasured"]["bbbb"] = [0.9, -1]
    path.write_bytes(gzip.compress(json.dumps(data).encode()))
    with pytest.raises(IreetuneError) as excinfo:
        load_recorded_space(path)
    assert str(excinfo.value) == (
        f"{path}: remeasured must map binaries to lists of positive times"
    )


def test_leaders_are_the_fastest_distinct_binaries_and_the_default() -> None:
    # By first pass: bbbb 0.85, base 1.1 (the config that did not apply), aaaa 1.4.
    assert select_leaders(SPACE, top=1, near=0.0, most=10) == ["bbbb", "base"]
    assert select_leaders(SPACE, top=1, near=0.3, most=10) == ["bbbb", "base"]
    assert select_leaders(SPACE, top=1, near=0.7, most=10) == ["bbbb", "base", "aaaa"]
    assert select_leaders(SPACE, top=3, near=0.0, most=1) == ["bbbb", "base"]
    assert select_leaders(SPACE, top=1, near=0.0, most=0) == ["base"]
    assert SPACE.conditions_factor() == 1.0


def test_another_format_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "other.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"format": "something else"}).encode()))
    with pytest.raises(IreetuneError) as excinfo:
        load_recorded_space(path)
    assert str(excinfo.value) == f"{path} is not a recorded space (ireetune-recorded-space)"


def _set_first_row_knobs(data: dict[str, Any]) -> None:
    data["rows"][0][0] = [1, 2]


def _cut_first_row(data: dict[str, Any]) -> None:
    data["rows"][0] = data["rows"][0][:5]


def _set_baseline(data: dict[str, Any]) -> None:
    data["baseline"] = [1, 2]


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (_set_first_row_knobs, "a row's knobs must list 5 values"),
        (_cut_first_row, "a row must be a list of 7 values"),
        (_set_baseline, "baseline must be an object or null"),
    ],
    ids=["row-knobs", "row-columns", "baseline"],
)
def test_a_damaged_recorded_space_is_refused_in_one_line(
    damage: Callable[[dict[str, Any]], None], message: str, tmp_path: Path
) -> None:
    path = write_recorded_space(SPACE, tmp_path)
    data = json.loads(gzip.decompress(path.read_bytes()))
    damage(data)
    path.write_bytes(gzip.compress(json.dumps(data).encode()))
    with pytest.raises(IreetuneError) as excinfo:
        load_recorded_space(path)
    assert str(excinfo.value) == f"{path}: {message}"


def test_a_truncated_file_is_refused(tmp_path: Path) -> None:
    path = write_recorded_space(SPACE, tmp_path)
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(IreetuneError) as excinfo:
        load_recorded_space(path)
    assert str(excinfo.value).startswith(f"cannot read recorded space {path}: ")


def test_run_folder_rows_come_from_results_json(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    candidates = [
        {"candidate_id": 1, "knobs": dict(_knobs(32, 8)), "status": "verified", "min_ms": 1.4,
         "median_ms": 1.5, "speedup": 0.8, "confirmed": True, "binary_hash": "aaaa" * 16},
        {"candidate_id": 0, "knobs": dict(_knobs(64, 8)), "status": "measured", "min_ms": 1.1,
         "median_ms": 1.2, "speedup": 1.0, "confirmed": True, "binary_hash": "base" * 16},
        {"candidate_id": 2, "knobs": dict(_knobs(64, 4)), "status": "compile-failed", "min_ms": None,
         "median_ms": None, "speedup": None, "confirmed": False, "binary_hash": ""},
    ]  # fmt: skip
    (run_dir / "results.json").write_text(
        json.dumps({"timing_basis": "real-input", "candidates": candidates})
    )
    baseline, rows, info = read_run_folder_rows(run_dir)
    assert baseline == RecordedRow(_knobs(64, 8), "measured", 1.1, 1.2, 1.0, True, "base" * 4)
    assert rows == (
        RecordedRow(_knobs(32, 8), "verified", 1.4, 1.5, 0.8, True, "aaaa" * 4),
        RecordedRow(_knobs(64, 4), "compile-failed", None, None, None, False, ""),
    )
    assert info == {"timing_basis": "real-input"}


def test_a_damaged_results_json_is_refused_in_one_line(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    candidate = {"candidate_id": "x", "knobs": dict(_knobs(32, 8)), "status": "verified"}
    (run_dir / "results.json").write_text(json.dumps({"candidates": [candidate]}))
    with pytest.raises(IreetuneError) as excinfo:
        read_run_folder_rows(run_dir)
    assert str(excinfo.value) == (
        f'{run_dir / "results.json"}: candidates[0].candidate_id must be an integer, got "x"'
    )
    candidate.update(candidate_id=1, knobs=None)
    (run_dir / "results.json").write_text(json.dumps({"candidates": [candidate]}))
    with pytest.raises(IreetuneError) as excinfo:
        read_run_folder_rows(run_dir)
    assert (
        str(excinfo.value) == f"{run_dir / 'results.json'}: candidates[0].knobs must be an object"
    )


def test_the_shipped_cpu_dataset_is_large_enough_and_says_where_it_comes_from() -> None:
    spaces = load_recorded_spaces(DATA / "cpu")
    assert len(spaces) >= 8
    kinds = {type(space.problem).__name__ for space in spaces}
    assert kinds == {"ContractionProblem", "ConvolutionProblem"}
    for space in spaces:
        measured = [t for t in space.effective_times() if t is not None]
        assert len(space.rows) >= 200, space.name
        assert len(measured) >= 100, space.name
        assert {
            "machine",
            "date",
            "compiler_version",
            "load_average_before",
            "timing_basis",
        } <= set(space.provenance), space.name
        if space.remeasured:
            remeasure = space.provenance["remeasure"]
            assert isinstance(remeasure, dict), space.name
            assert {"date", "rounds", "load_average_before", "selection", "statistic"} <= set(
                remeasure
            ), space.name
            assert space.baseline is not None and space.baseline.binary in space.remeasured
