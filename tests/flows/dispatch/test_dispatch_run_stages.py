"""The dispatch run's stages when outputs cannot be compared or differ (flows/dispatch/stages.py):
a run whose candidates' reference programs drop the config times them on the dispatch
benchmark instead, and calls them unverified, never wrong; a run whose outputs really differ
calls them wrong."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest

from ireetune.cli import main
from ireetune.core.records import CandidateStatus
from ireetune.database.exchange import read_results_file
from ireetune.database.store import TuningDatabase, config_key
from ireetune.executor import LocalExecutor
from ireetune.flows.dispatch.stages import REFERENCE_IGNORES_CONFIGS
from ireetune.flows.dispatch.tuner import TuneOptions, tune_dispatch
from ireetune.report.html_report import render_html_report
from ireetune.report.plots import STATUS_COLOURS
from ireetune.report.result import TuneResult
from ireetune.report.run_view import read_dispatch_run
from ireetune.verify.compare import CONFIG_NOT_APPLIED
from ireetune.verify.runner import ReferenceBatch, ReferenceRun
from tests.conftest import TEST_TARGET


@pytest.fixture(scope="module")
def data_tiled_run(matmul_benchmark: Path, tmp_path_factory: pytest.TempPathFactory) -> TuneResult:
    """The matmul was dumped without data tiling; tuned under `--iree-opt-data-tiling`, its
    reference program alone is data-tiled, and the llvm-cpu target materialises the encodings
    first (MATERIALIZE_FIRST): the candidate's matmul configuration matches nothing there, and
    each reference compiles to the default's own binary (before issue 39 each compile failed),
    while the dispatch benchmark takes them. Its rows go to a database of its own
    (`tuning.sqlite` beside the run folders)."""
    folder = tmp_path_factory.mktemp("data_tiled")
    return tune_dispatch(
        TuneOptions(
            input_path=matmul_benchmark, target=TEST_TARGET, num_candidates=3,
            output_dir=folder / "runs", repetitions=3, min_repetition_s=0.005, confirm_rounds=1,
            database_path=folder / "tuning.sqlite", show_progress=False,
            extra_flags=("--iree-opt-data-tiling",),
        )
    )  # fmt: skip


def test_candidates_are_timed_on_the_dispatch_when_their_reference_programs_drop_the_config(
    data_tiled_run: TuneResult,
) -> None:
    """The run compiles the candidates again from the dispatch benchmark and times them there,
    with a note, instead of ending with "no candidate compiled"."""
    result = data_tiled_run
    prefix = REFERENCE_IGNORES_CONFIGS.split("{counts}")[0]
    assert [note for note in result.notes if note.startswith(prefix)] == [
        REFERENCE_IGNORES_CONFIGS.format(counts="3 not-applied")
    ]
    info = json.loads((result.run_dir / "results.json").read_text())
    assert info["timing_basis"] == "dispatch"
    baseline, *candidates = result.records
    assert baseline.status is CandidateStatus.MEASURED
    # Each binary is the dispatch benchmark's under its own configuration, timed there.
    assert len({baseline.binary_hash, *(r.binary_hash for r in candidates)}) == 4
    assert all(r.median_ms is not None for r in candidates)


# What every contender of the data-tiled run is refused for.
IGNORED = f"outputs not compared with the default's: {CONFIG_NOT_APPLIED}"


def test_contenders_whose_reference_ignored_the_config_are_unverified_not_wrong(
    data_tiled_run: TuneResult,
) -> None:
    """Their outputs were never compared: summary.txt, results.json and candidates.csv call
    them unverified, with the reason, count none as wrong, and no spec is written."""
    run_dir = data_tiled_run.run_dir
    info = json.loads((run_dir / "results.json").read_text())
    contenders = sorted(int(cid) for cid in info["decision"]["judgements"])
    assert contenders, "the data-tiled run checked no contender"
    assert info["decision"]["winner"] is None and info["spec_written"] is False
    assert info["why"].startswith(f"no contender passed every check ({IGNORED}")
    judged = {c["candidate_id"]: c for c in info["candidates"] if c["candidate_id"] in contenders}
    assert {cid: (c["status"], c["outputs_match"], c["verdict"]) for cid, c in judged.items()} == {
        cid: ("unverified", None, "rejected") for cid in contenders
    }
    assert all(c["reason"].startswith(IGNORED) for c in judged.values())
    statuses = [c["status"] for c in info["candidates"]]
    assert "wrong" not in statuses

    with (run_dir / "candidates.csv").open(newline="") as stream:
        rows = {int(row["candidate_id"]): row for row in csv.DictReader(stream)}
    assert {cid: (rows[cid]["status"], rows[cid]["outputs_match"]) for cid in contenders} == {
        cid: ("unverified", "") for cid in contenders
    }
    assert "wrong" not in {row["status"] for row in rows.values()}

    summary = (run_dir / "summary.txt").read_text()
    assert summary == data_tiled_run.summary
    counts = summary.splitlines()[1]
    assert f"unverified: {len(contenders)}" in counts and "wrong" not in counts
    (line,) = [s for s in summary.splitlines() if s.startswith("unverified: ")]
    ids = ", ".join(map(str, contenders))
    assert line.startswith(f"unverified: candidates {ids} were not picked: {IGNORED}")
    assert not (run_dir / "best_spec.mlir").exists()
    # The HTML report tables and counts them in their own colour, never as wrong.
    page = render_html_report(read_dispatch_run(run_dir))
    chip = f'<span class="chip" style="background:{STATUS_COLOURS["unverified"]}">unverified</span>'
    assert page.count(chip) == len(contenders) + 1  # Each row, and the counts.
    assert ">wrong</span>" not in page


class PlantedWrongOutputs(LocalExecutor):
    """Compile and run for real; add 1 to every candidate's output but the default's, as a
    miscompiled kernel would return (no candidate of a small matmul computes it wrongly)."""

    def run_reference_programs(self, batch: ReferenceBatch) -> dict[int, ReferenceRun]:
        runs = super().run_reference_programs(batch)
        return {
            cid: run if cid == 0 or run.output is None else replace(run, output=run.output + 1)
            for cid, run in runs.items()
        }


def test_contenders_whose_outputs_differ_are_wrong(matmul_benchmark: Path, tmp_path: Path) -> None:
    """Outputs compared and different stay `wrong`, in every file, and are never unverified."""
    result = tune_dispatch(
        TuneOptions(
            input_path=matmul_benchmark, target=TEST_TARGET, num_candidates=3,
            output_dir=tmp_path / "runs", repetitions=3, min_repetition_s=0.005,
            confirm_rounds=1, use_database=False, show_progress=False,
            # Every candidate is confirmed and none is stopped early, however loaded the machine:
            # every one is a contender, and its outputs are checked.
            threshold=0.0, confirm_top=3, hopeless_factor=1000.0,
        ),
        PlantedWrongOutputs(),
    )  # fmt: skip
    info = json.loads((result.run_dir / "results.json").read_text())
    contenders = sorted(int(cid) for cid in info["decision"]["judgements"])
    assert contenders, "no candidate was checked"
    # Every element of the 64x128 result is off by 1.
    differ = "outputs differ from the default's: 8192 of 8192 elements"
    judged = {c["candidate_id"]: c for c in info["candidates"] if c["candidate_id"] in contenders}
    assert {
        cid: (c["status"], c["outputs_match"], c["verdict"], c["reason"])
        for cid, c in judged.items()
    } == {cid: ("wrong", False, "rejected", differ) for cid in contenders}
    with (result.run_dir / "candidates.csv").open(newline="") as stream:
        rows = {int(row["candidate_id"]): row for row in csv.DictReader(stream)}
    assert {cid: (rows[cid]["status"], rows[cid]["outputs_match"]) for cid in contenders} == {
        cid: ("wrong", "false") for cid in contenders
    }
    summary = (result.run_dir / "summary.txt").read_text()
    assert f"wrong: {len(contenders)}" in summary.splitlines()[1]
    assert "unverified" not in summary


def test_the_database_stores_unverified_candidates_as_unverified(
    data_tiled_run: TuneResult, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The rows say `unverified` with no output check (not `wrong`, not a failed comparison);
    `db show` prints them so, and an export imports with them unchanged."""
    database_path = data_tiled_run.run_dir.parent.parent / "tuning.sqlite"
    info = json.loads((data_tiled_run.run_dir / "results.json").read_text())
    contenders = {int(cid) for cid in info["decision"]["judgements"]}
    configs = {config_key(r.knobs) for r in data_tiled_run.records if r.candidate_id in contenders}
    assert contenders and len(configs) == len(contenders)
    with TuningDatabase(database_path) as database:
        rows = list(database.all_results())
    judged = {(r.config, r.status, r.outputs_match, r.verdict) for r in rows if r.config in configs}
    assert judged == {(config, "unverified", None, "rejected") for config in configs}
    assert "wrong" not in {r.status for r in rows}

    assert main(["db", "--db", str(database_path), "show", "matmul"]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert sorted(line.split()[2:4] for line in shown if "rejected" in line) == [
        ["unverified", "rejected"]
    ] * len(contenders)

    exported = tmp_path / "export.json"
    export = ["db", "--db", str(database_path), "export", "--format", "json", "-o", str(exported)]
    assert main(export) == 0
    with TuningDatabase(tmp_path / "other.sqlite") as other:
        assert other.import_results(read_results_file(exported, "now")) == len(rows)
        imported = {(r.config, r.status, r.outputs_match) for r in other.all_results()}
    assert {row for row in imported if row[0] in configs} == {
        (config, "unverified", None) for config in configs
    }
