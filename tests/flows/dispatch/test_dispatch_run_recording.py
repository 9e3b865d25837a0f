"""What a dispatch run records beyond its folder hangs off its stages as callbacks
(flows/dispatch/recording.py): database rows and the online search's model updates."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

from ireetune.core.records import CandidateRecord, CandidateStatus
from ireetune.core.run_dir import create_run_dir
from ireetune.executor.base import LocalExecutor
from ireetune.flows.dispatch.options import TuneOptions
from ireetune.flows.dispatch.recording import DatabaseRecording, learn_from_round
from ireetune.flows.dispatch.stages import compile_stage, specs_stage
from ireetune.flows.dispatch.start import generate_stage, open_run, start_run_folder
from ireetune.flows.sequence import named, run_sequence
from ireetune.report.progress import StageProgress
from ireetune.report.recorder import RunRecorder
from ireetune.search.learned_order import OnlineSearch, order_with_ranker
from ireetune.search.ranker_training import choose_ranker
from ireetune.targets import parse_target
from tests.search.test_learned_order import (
    POOL,
    PROBLEMS,
    TARGET_KEY,
    _database_rows,
    _features,
    _matmul,
    _request,
    _target,
)


def _compile_with(
    matmul_benchmark: Path, tmp_path: Path, with_database_callback: bool
) -> list[tuple[str, str]]:
    """Run the specs and compile stages of a real run; return the database's rows after."""
    options = TuneOptions(
        input_path=matmul_benchmark, target="cpu", num_candidates=2,
        output_dir=tmp_path / "runs", database_path=tmp_path / "tuning.sqlite",
        show_progress=False,
    )  # fmt: skip
    with open_run(options, parse_target("cpu"), LocalExecutor()) as run:
        run_sequence(run, named(generate_stage), ())
        start_run_folder(run, create_run_dir(options.output_dir, run.problem.signature))
        assert run.database is not None
        if with_database_callback:
            run.recorder.on_update.append(
                DatabaseRecording(run.database, run.result_key, run.recorder, "session", "rule")
            )
        with StageProgress(False) as progress:
            run.progress = progress
            run_sequence(run, named(specs_stage, compile_stage), ())
        compiled = sorted(r.status.value for r in run.recorder.records.values() if r.binary_hash)
        rows = sorted((row.status, row.session) for row in run.database.all_results())
    assert len(compiled) == 3
    return rows


def test_a_stage_run_without_the_database_callback_writes_no_row(
    matmul_benchmark: Path, tmp_path: Path
) -> None:
    assert _compile_with(matmul_benchmark, tmp_path, with_database_callback=False) == []


def test_the_database_callback_writes_every_compiled_candidate_at_once(
    matmul_benchmark: Path, tmp_path: Path
) -> None:
    rows = _compile_with(matmul_benchmark, tmp_path, with_database_callback=True)

    # The default and both candidates compiled (or one is a duplicate of another): one row each.
    assert len(rows) == 3
    assert {session for _, session in rows} == {"session"}
    assert {status for status, _ in rows} <= {"compiled", "duplicate", "not-applied"}


def measure_round_stage(run: SimpleNamespace) -> None:
    """Stands for the stage of that name: the round's timings are in the recorder already."""


def _search_after_a_round(tmp_path: Path) -> tuple[OnlineSearch, SimpleNamespace, list]:
    """An online search whose first round found one accumulator row fastest (the opposite of
    what the model learned from other problems), recorded as the measure stage records it."""
    choice = choose_ranker(
        _target(), _request(PROBLEMS[0]), _database_rows(PROBLEMS), TARGET_KEY, tmp_path
    )
    assert choice.ranker is not None
    problem = _matmul(512, 256, 256)
    ordered = order_with_ranker(_features(problem), choice.ranker, POOL, seed=0)
    search = OnlineSearch(_features(problem), choice.ranker, ordered, [4, 4, 8], seed=0)
    recorder = RunRecorder(tmp_path, {}, {0: CandidateRecord(0, None, CandidateStatus.MEASURED)})
    first = [k for k, _ in search.first_round]
    fast_rows = [k for k in POOL if dict(k)["vec_m"] == 1 and k not in first][:3]
    for candidate_id, knobs in enumerate([*first, *fast_rows], start=1):
        record = CandidateRecord(candidate_id, knobs, CandidateStatus.MEASURED)
        recorder.update(replace(record, speedup=1.0 / dict(knobs)["vec_m"]))
    run = SimpleNamespace(search=search, recorder=recorder)
    return search, run, ordered


def test_without_the_learning_callback_the_next_round_follows_the_offline_model(
    tmp_path: Path,
) -> None:
    search, run, ordered = _search_after_a_round(tmp_path)

    run_sequence(run, named(measure_round_stage), ())

    assert search.next_round() == ordered[4:8]


def test_the_learning_callback_updates_the_model_after_a_measured_round(
    tmp_path: Path,
) -> None:
    search, run, ordered = _search_after_a_round(tmp_path)

    run_sequence(run, named(measure_round_stage), (learn_from_round,))

    second = search.next_round()
    assert second != ordered[4:8]
    assert dict(second[0][0])["vec_m"] == 1
