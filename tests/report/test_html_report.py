"""The HTML report: real runs of the three kinds, opened in headless Chromium; pages from records."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from html.parser import HTMLParser
from pathlib import Path

import pytest

from ireetune.cli import main
from ireetune.core.records import CandidateRecord, CandidateStatus, write_results
from ireetune.database.store import ResultKey, StoredResult, TuningDatabase
from ireetune.model.profile import ENCODED_MMT4D_NOTE
from ireetune.report.html_page import Chip
from ireetune.report.html_report import (
    build_profile_page,
    render_html_report,
    try_write_html_report,
    write_html_report,
)
from ireetune.report.plots import STATUS_COLOURS, ShareSegment, compute_model_shares
from ireetune.report.run_view import (
    Decision,
    ModelDispatchView,
    ModelRunView,
    ProfileRowView,
    ProfileRunView,
    read_dispatch_run,
    read_model_run,
)
from tests.browser import find_chromium, inspect_page
from tests.conftest import MATMUL_MODEL, dump_benchmarks

# A matmul (tunable) beside an arg-max (not tunable: a generic of two results, which no op
# family covers): the model report then has both a tuned dispatch and an untuned share with its
# reason.
MATMUL_AND_ARGMAX_MODEL = """
func.func @main(%lhs: tensor<64x96xf32>, %rhs: tensor<96x128xf32>, %a: tensor<256x256xf32>)
    -> (tensor<64x128xf32>, tensor<256xi32>) {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<64x128xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<64x128xf32>) -> tensor<64x128xf32>
  %r = linalg.matmul ins(%lhs, %rhs : tensor<64x96xf32>, tensor<96x128xf32>)
                     outs(%init : tensor<64x128xf32>) -> tensor<64x128xf32>
  %low = arith.constant -3.0e+38 : f32
  %z = arith.constant 0 : i32
  %ev = tensor.empty() : tensor<256xf32>
  %ei = tensor.empty() : tensor<256xi32>
  %v = linalg.fill ins(%low : f32) outs(%ev : tensor<256xf32>) -> tensor<256xf32>
  %i = linalg.fill ins(%z : i32) outs(%ei : tensor<256xi32>) -> tensor<256xi32>
  %m:2 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]}
      ins(%a : tensor<256x256xf32>) outs(%v, %i : tensor<256xf32>, tensor<256xi32>) {
    ^bb0(%in: f32, %best: f32, %at: i32):
      %k = linalg.index 1 : index
      %ki = arith.index_cast %k : index to i32
      %gt = arith.cmpf ogt, %in, %best : f32
      %nb = arith.select %gt, %in, %best : f32
      %na = arith.select %gt, %ki, %at : i32
      linalg.yield %nb, %na : f32, i32
  } -> (tensor<256xf32>, tensor<256xi32>)
  return %r, %m#1 : tensor<64x128xf32>, tensor<256xi32>
}
"""


@dataclass(frozen=True)
class ProducedRun:
    """A run made by the real command line, and what that command printed."""

    run_dir: Path
    stdout: str
    stderr: str


def _ireetune(*arguments: str) -> subprocess.CompletedProcess[str]:
    completed = subprocess.run(
        [sys.executable, "-m", "ireetune.cli", *arguments],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr
    return completed


def _only_child(folder: Path) -> Path:
    (child,) = [path for path in folder.iterdir() if path.is_dir()]
    return child


@pytest.fixture(scope="session")
def produced_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ProducedRun]:
    """Make one tiny run of each kind with the real tools (under a minute on two cores)."""
    root = tmp_path_factory.mktemp("report_runs")
    (benchmark,) = dump_benchmarks(MATMUL_MODEL, root / "dumps")
    common = ("--no-db", "--no-progress", "--jobs", "2")
    dispatch = _ireetune(
        "tune-dispatch", str(benchmark), "--num-candidates", "3", "--repetitions", "2",
        "--confirm-rounds", "1", "--output-dir", str(root / "dispatch"), *common,
    )  # fmt: skip
    model_path = root / "model.mlir"
    model_path.write_text(MATMUL_AND_ARGMAX_MODEL)
    model = _ireetune(
        "tune", str(model_path), "--num-candidates", "2", "--candidates-per-dispatch", "1",
        "--rounds", "1", "--coverage", "1.0", "--output-dir", str(root / "model"), *common,
    )  # fmt: skip
    profile = _ireetune(
        "profile", "matmul", "--m", "32,64", "--n", "64", "--k", "64", "--configs", "default,2",
        "--repetitions", "2", "--no-vendor", "--peak-gflops", "100", "--format", "csv",
        "--generated-dir", str(root / "profile"), "--no-progress", "--jobs", "2",
    )  # fmt: skip
    return {
        "dispatch": ProducedRun(_only_child(root / "dispatch"), dispatch.stdout, dispatch.stderr),
        "model": ProducedRun(_only_child(root / "model"), model.stdout, model.stderr),
        "profile": ProducedRun(root / "profile", profile.stdout, profile.stderr),
    }


# The smallest text a page may show, in CSS pixels.
READABLE_PX = 11

# Per kind: the fewest plots the page must show, and words its verdict section must hold.
EXPECTED_PAGES = {
    "dispatch": (3, ("compiler's default", "Spec written:", "Is the search converging?")),
    "model": (4, ("Where the model's time goes", "not tunable: root op 'linalg.generic'")),
    "profile": (2, ("2 shapes, 6 dispatches profiled", "GFLOP/s per shape")),
}


@pytest.mark.parametrize("kind", sorted(EXPECTED_PAGES))
def test_the_report_renders_in_chromium_without_errors(
    kind: str, produced_runs: dict[str, ProducedRun], tmp_path: Path
) -> None:
    if find_chromium() is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium; .ci/run does)")
    produced = produced_runs[kind]
    page = produced.run_dir / "report.html"
    # The command wrote the report itself and said where (on stderr for profile: its stdout is CSV).
    printed = produced.stderr if kind == "profile" else produced.stdout
    assert f"html report: {page}" in printed
    inspection = inspect_page(page)
    (tmp_path / f"{kind}.png").write_bytes(inspection.screenshot_png)

    minimum_plots, phrases = EXPECTED_PAGES[kind]
    assert inspection.console_errors == ()
    assert inspection.external_requests == ()
    assert len(inspection.plots) >= minimum_plots
    assert len(inspection.plots) == page.read_text().count('<figure class="plot">')
    assert [p for p in inspection.plots if p.width < 200 or p.height < 100 or p.marks < 10] == []
    assert [phrase for phrase in phrases if phrase not in inspection.text] == []
    if kind == "model":
        # Where the time goes: the legend names a not-tunable dispatch by its long reason.
        assert (inspection.plots[0].legend_font_px or 0) >= READABLE_PX
    assert inspection.screenshot_png.startswith(b"\x89PNG") and len(inspection.screenshot_png) > (
        20_000
    )


def test_report_command_writes_where_asked_and_refuses_a_foreign_folder(
    produced_runs: dict[str, ProducedRun], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "elsewhere.html"
    assert main(["report", str(produced_runs["dispatch"].run_dir), "-o", str(output)]) == 0
    assert output.read_text().startswith("<!DOCTYPE html>")
    assert capsys.readouterr().out == f"html report: {output}\n"

    assert main(["report", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("ireetune: error: ") and error.count("\n") == 1
    assert "not a tune-dispatch, tune or profile run folder" in error


def test_model_report_reads_the_untuned_share_and_the_tuning_runs(
    produced_runs: dict[str, ProducedRun],
) -> None:
    run = read_model_run(produced_runs["model"].run_dir)
    report = json.loads((run.run_dir / "report.json").read_text())
    assert [d.name for d in run.dispatches] == [d["name"] for d in report["dispatches"]]
    assert [r.problem for r in run.tuning_runs] == ["matmul_64x128x96_f32_f32_f32"]
    untunable = [d for d in run.dispatches if d.problem.startswith("not tunable")]
    assert [d.in_tuned_spec for d in untunable] == [False]
    shares = compute_model_shares(run)
    assert sum(s.before for s in shares) == pytest.approx(1.0)
    assert sum(s.after for s in shares) == pytest.approx(1.0)


def _write_dispatch_run(run_dir: Path, run_info: dict[str, object]) -> None:
    """Write a results.json with the real writer: a default, a winner, a failure and a wrong one."""
    knobs = (("dist_m", 64), ("vec_m", 8))
    records = [
        CandidateRecord(0, knobs, CandidateStatus.MEASURED, median_ms=2.0, min_ms=1.9,
                        max_ms=2.2, speedup=1.0),
        CandidateRecord(1, (("dist_m", 128), ("vec_m", 4)), CandidateStatus.VERIFIED,
                        median_ms=1.6, min_ms=1.5, max_ms=1.7, speedup=1.25),
        CandidateRecord(2, (("dist_m", 32), ("vec_m", 16)), CandidateStatus.COMPILE_FAILED,
                        reason="error: 'vector.contract' op failed to verify"),
        CandidateRecord(3, (("dist_m", 16), ("vec_m", 2)), CandidateStatus.WRONG,
                        median_ms=1.2, min_ms=1.1, max_ms=1.3, speedup=1.66),
    ]  # fmt: skip
    run_dir.mkdir()
    write_results(run_dir / "results.json", run_info, records)


def test_a_recorded_decision_shows_its_interval_replay_and_why(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    replay = "ireetune replay RUN --candidate 1"
    _write_dispatch_run(
        run_dir,
        {
            "problem": "matmul_256x256x256_f32_f32_f32",
            "target": "cpu",
            "outcome": "no-improvement",
            "best_candidate": 1,
            "best_speedup": 1.25,
            "decision": {
                "rule": "lower bound of the interval above 1.02",
                "winner": 1,
                "speedup": 1.25,
                "low": 1.1,
                "high": 1.4,
                "basis": "real-input",
                "replay": replay,
            },
            "spec_written": False,
            "why": "the interval reaches below the threshold",
        },
    )
    run = read_dispatch_run(run_dir)
    assert run.decision == Decision(
        "lower bound of the interval above 1.02", 1, 1.25, 1.1, 1.4, "real-input", replay
    )
    page = render_html_report(run)
    assert (
        "1.250× faster than the compiler&#39;s default (interval 1.100×–1.400×): candidate 1, "
        "decided on real inputs, timed side by side with the default" in page
    )
    assert f"<pre>{replay}</pre>" in page
    assert "Spec written: <b>no</b>. The interval reaches below the threshold" in page
    assert "compile-failed: 1 without a time" in page
    # The wrong candidate is plotted and tabled in its own colour.
    assert page.count("#e7298a") >= 2


def test_an_old_results_file_without_decision_still_reports(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    _write_dispatch_run(run_dir, {"problem": "p", "outcome": "improved", "best_candidate": 1,
                                  "best_speedup": 1.25})  # fmt: skip
    (run_dir / "best_spec.mlir").write_text("module {}\n")
    run = read_dispatch_run(run_dir)
    assert (run.decision, run.spec_written, run.spec_why) == (
        None,
        True,
        "candidate 1 was verified and beat the default",
    )
    page = render_html_report(run)
    assert "1.250× faster than the compiler&#39;s default: candidate 1" in page
    assert "interval" not in page.split("<h2>")[0]
    assert "<pre>" not in page


def test_a_run_with_no_measured_candidate_says_so_instead_of_plotting(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "results.json").write_text(json.dumps({"outcome": "failed", "candidates": []}))
    page = write_html_report(run_dir).read_text()
    assert "<svg" not in page
    assert "The run failed before it found a winner" in page
    assert "No candidate was measured." in page


def test_a_report_that_cannot_be_drawn_is_a_warning_not_a_failure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "results.json").write_text("{ half a file")
    with caplog.at_level(logging.WARNING):
        assert try_write_html_report(run_dir) is None
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "could not write the HTML report" in caplog.records[0].getMessage()
    assert not (run_dir / "report.html").exists()


def _model_dispatch(
    name: str, default_ms: float, tuned_ms: float, in_spec: bool
) -> ModelDispatchView:
    return ModelDispatchView(
        name=name, problem=f"{name}_problem", invocations=2, share=0.0, default_ms=default_ms,
        tuned_ms=tuned_ms, kept_spec="spec.mlir" if in_spec else None, selected=True, note="",
        in_tuned_spec=in_spec,
    )  # fmt: skip


def test_model_shares_after_tuning_use_only_specs_in_the_final_spec() -> None:
    run = ModelRunView(
        run_dir=Path("run"), model="m.mlir", target="cpu", default_ms=10.0, tuned_ms=8.0,
        speedup=1.25, tuned_spec="tuned_spec.mlir", decision=None, notes=(), model_ms=10.0,
        explained_ms=8.0,
        dispatches=(
            _model_dispatch("a", 3.0, 1.0, in_spec=True),
            _model_dispatch("b", 1.0, 0.5, in_spec=False),
        ),
        tuning_runs=(),
    )  # fmt: skip
    # Before: a 6 ms, b 2 ms, outside 2 ms of 10. After: a 2 ms (tuned), b 2 ms, outside 2 ms of 6.
    assert compute_model_shares(run) == [
        ShareSegment("a (a_problem)", 0.6, pytest.approx(2 / 6), kept_default=False),
        ShareSegment("b (b_problem)", 0.2, pytest.approx(2 / 6), kept_default=True),
        ShareSegment("outside dispatches (launches, copies)", 0.2, pytest.approx(2 / 6), False),
    ]


# A value that a run folder or an imported database row may hold (a problem or dispatch name, a
# compiler message, a note): every page must show it as text, never as markup.
HOSTILE = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'


class _ParsedPage(HTMLParser):
    """The elements of a page and its text, as a browser's parser reads them."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.text = ""
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)

    def handle_data(self, data: str) -> None:
        self.text += data


def _hostile_dispatch_page(tmp_path: Path) -> tuple[str, list[str]]:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    records = [
        CandidateRecord(0, (("tile", "8"),), CandidateStatus.MEASURED, median_ms=2.0, min_ms=1.9,
                        max_ms=2.1, speedup=1.0),
        CandidateRecord(1, (("tile", HOSTILE),), CandidateStatus.VERIFIED, median_ms=1.6,
                        min_ms=1.5, max_ms=1.7, speedup=1.25),
        CandidateRecord(2, (("tile", "4"),), CandidateStatus.COMPILE_FAILED, reason=HOSTILE),
    ]  # fmt: skip
    decision = {"rule": HOSTILE, "winner": 1, "speedup": 1.25, "low": 1.1, "high": 1.4,
                "basis": HOSTILE, "replay": HOSTILE}  # fmt: skip
    run_info = {"problem": HOSTILE, "target": HOSTILE, "outcome": "improved", "best_candidate": 1,
                "decision": decision, "spec_written": False, "why": HOSTILE}  # fmt: skip
    write_results(run_dir / "results.json", run_info, records)
    page = write_html_report(run_dir).read_text()
    return page, [
        f"ireetune: {HOSTILE}",
        f"candidate 1, decided on {HOSTILE}",
        f"Spec written: no. {HOSTILE}",
        f"Rule: {HOSTILE}",
        f"Replay the decision:{HOSTILE}",
        f"Winning knobs: tile={HOSTILE}",
        f"tile=4{HOSTILE}",
    ]


def _hostile_model_page(tmp_path: Path) -> tuple[str, list[str]]:
    hostile_dispatch = ModelDispatchView(
        name=HOSTILE, problem=HOSTILE, invocations=1, share=0.5, default_ms=1.0, tuned_ms=None,
        kept_spec=None, selected=True, note=HOSTILE, in_tuned_spec=False,
    )  # fmt: skip
    run = ModelRunView(
        run_dir=tmp_path, model="m.mlir", target=HOSTILE, default_ms=4.0, tuned_ms=2.0,
        speedup=2.0, tuned_spec=HOSTILE,
        decision=Decision(HOSTILE, None, 2.0, 1.5, 2.5, "real-input", HOSTILE),
        notes=(HOSTILE,), model_ms=4.0, explained_ms=2.0,
        dispatches=(hostile_dispatch, _model_dispatch("a", 1.0, 0.5, in_spec=True)),
        tuning_runs=(),
    )  # fmt: skip
    return render_html_report(run), [
        f"(target {HOSTILE})",
        f"Spec written: yes ({HOSTILE}).",
        f"Rule: {HOSTILE}",
        f"{HOSTILE}50.0%",
        f"{HOSTILE}{HOSTILE}150.0%",
    ]


def test_a_profiled_output_not_checked_is_not_counted_as_wrong(tmp_path: Path) -> None:
    """The profiler's FAILED (compared, different) is a wrong result; its "Not verified" (never
    compared) is counted apart and drawn in its own colour."""

    def row(configuration: str, verification: str) -> ProfileRowView:
        return ProfileRowView(
            dispatch=f"d_{configuration}", operation="matmul_64x128x96", configuration=configuration,
            knobs=() if configuration == "default" else (("tile", configuration),),
            status="profiled", verification=verification, runtime_ms=1.0, gflops=2.0,
            peak_gflops=None, speedup_vs_default=None if configuration == "default" else 1.1,
            vendor_library="", vendor_gflops=None, vendor_note="", reason="",
        )  # fmt: skip

    rows = (row("default", "SUCCESS"), row("a", "SUCCESS"), row("b", "FAILED"), row("c", "Not verified"))  # fmt: skip
    page = build_profile_page(ProfileRunView(tmp_path, "cpu", "local-task", rows))
    assert page.verdict.headline == (
        "1 shapes, 4 dispatches profiled; 1 gave wrong results; 1 not checked"
    )
    assert [r.verification for r in page.rows] == [
        Chip("verified", STATUS_COLOURS["verified"]),
        Chip("verified", STATUS_COLOURS["verified"]),
        Chip("wrong", STATUS_COLOURS["wrong"]),
        Chip("unverified", STATUS_COLOURS["unverified"]),
    ]


def _hostile_profile_page(tmp_path: Path) -> tuple[str, list[str]]:
    row = ProfileRowView(
        dispatch=HOSTILE, operation=HOSTILE, configuration=HOSTILE, knobs=(("tile", HOSTILE),),
        status=HOSTILE, verification="SUCCESS", runtime_ms=1.0, gflops=2.0, peak_gflops=None,
        speedup_vs_default=1.5, vendor_library=HOSTILE, vendor_gflops=None, vendor_note=HOSTILE,
        reason=HOSTILE,
    )  # fmt: skip
    page = render_html_report(ProfileRunView(tmp_path, HOSTILE, HOSTILE, (row,)))
    return page, [
        f"(target {HOSTILE}, device {HOSTILE})",
        f"{HOSTILE}: best {HOSTILE} 1.500× vs the default",
        f"– {HOSTILE}{HOSTILE}",
    ]


def _hostile_database_page(tmp_path: Path) -> tuple[str, list[str]]:
    path = tmp_path / "tuning.sqlite"
    key = ResultKey(HOSTILE, HOSTILE, HOSTILE, "key", HOSTILE)
    with TuningDatabase(path) as database:
        database.write(
            StoredResult(
                key, "{}", "", "verified", "", (1.0,), 1.0, 1.0, 1.0, 0.0, 1.0, 1.5, "run-1", "now"
            )  # fmt: skip
        )
    output = tmp_path / "db.html"
    assert main(["db", "--db", str(path), "report", "-o", str(output)]) == 0
    return output.read_text(), [
        f"{HOSTILE}{HOSTILE}{HOSTILE}{HOSTILE}11 / 11.500x",
        f"{HOSTILE} on {HOSTILE}111.500×",
    ]


@pytest.mark.parametrize(
    "build_page",
    [_hostile_dispatch_page, _hostile_model_page, _hostile_profile_page, _hostile_database_page],
)
def test_a_hostile_value_is_text_on_every_page(
    build_page: Callable[[Path], tuple[str, list[str]]], tmp_path: Path
) -> None:
    page, phrases = build_page(tmp_path)
    parsed = _ParsedPage(page)
    # The value's tags never became elements: the page holds no script and no image at all.
    assert parsed.tags & {"script", "img"} == set()
    assert HOSTILE not in page
    # It is shown, whole, where the page names it.
    assert [phrase for phrase in phrases if phrase not in parsed.text] == []


class _TableCells(HTMLParser):
    """The text of each cell of a page's first table, row by row (a cell's nested elements
    included)."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: list[list[str]] = []
        self.tables = 0
        self.in_cell = False
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tables += tag == "table"
        if self.tables == 1 and tag == "tr":
            self.rows.append([])
        if self.tables == 1 and tag in ("td", "th"):
            self.rows[-1].append("")
            self.in_cell = True

    def handle_endtag(self, tag: str) -> None:
        self.in_cell = self.in_cell and tag not in ("td", "th")
        self.tables += 1 if tag == "table" else 0

    def handle_data(self, data: str) -> None:
        if self.in_cell:
            self.rows[-1][-1] += data


def _untuned_dispatch(
    name: str, problem: str, share: float, selected: bool = True
) -> ModelDispatchView:
    return ModelDispatchView(
        name=name, problem=problem, invocations=1, share=share, default_ms=1.0, tuned_ms=None,
        kept_spec=None, selected=selected, note="", in_tuned_spec=False,
    )  # fmt: skip


def _mmt4d_signature(index: int) -> str:
    return f"mmt4d_{index + 1}x64x48x16x16x1_f32_f32_f32"


# A model whose time the dispatch phase left alone: 19 data-tiled matmuls, each with a reason
# that names its problem, a window sum, and two dispatches below the coverage.
_WINDOW_SUM = "not tunable: a 1-D window with a 1-D kernel and no channels is not tuned on the CPU"
_UNTUNED_DISPATCHES = (
    *(
        _untuned_dispatch(
            f"main_dispatch_{i}", f"not tunable: {_mmt4d_signature(i)} {ENCODED_MMT4D_NOTE}", 0.01
        )
        for i in range(19)
    ),
    _untuned_dispatch("main_dispatch_30", _WINDOW_SUM, 0.15),
    _untuned_dispatch("main_dispatch_20", "matmul_8x8x8_f32_f32_f32", 0.05, selected=False),
    _untuned_dispatch("main_dispatch_21", "matmul_4x8x8_f32_f32_f32", 0.03, selected=False),
)


def _untuned_model_run(run_dir: Path) -> ModelRunView:
    return ModelRunView(
        run_dir=run_dir, model="m.onnx", target="cpu", default_ms=10.0, tuned_ms=None,
        speedup=None, tuned_spec=None, decision=None, notes=(), model_ms=10.0, explained_ms=9.0,
        dispatches=_UNTUNED_DISPATCHES, tuning_runs=(),
    )  # fmt: skip


def test_reasons_that_differ_only_in_the_problem_share_one_row() -> None:
    rows = _TableCells(render_html_report(_untuned_model_run(Path("run")))).rows
    mmt4d = ", ".join(f"main_dispatch_{i} {_mmt4d_signature(i)}" for i in range(19))
    assert rows == [
        ["reason", "share of model time", "dispatches"],
        [f"not tunable: … {ENCODED_MMT4D_NOTE}", "19.0%", f"19 dispatches{mmt4d}"],
        [_WINDOW_SUM, "15.0%", "main_dispatch_30"],
        [
            "not selected: below the coverage or past --max-dispatches", "8.0%",
            "2 dispatchesmain_dispatch_20, main_dispatch_21",
        ],
    ]  # fmt: skip


def test_a_dispatch_the_hot_set_weighed_out_says_so_in_one_row() -> None:
    """Dispatches a hot set weighed by headroom left out carry the model flow's note
    (flows/model/report.NOT_SELECTED and its reason), one row for all of them."""
    weighed = (
        "not selected: others were expected to gain more (the hot set weighs each dispatch's "
        "time by how far it ran from the model's fastest dispatches)"
    )
    dispatches = tuple(
        replace(_untuned_dispatch(f"main_dispatch_{i}", f"conv_{i}x8", 0.04, False), note=weighed)
        for i in range(2)
    )
    run = replace(_untuned_model_run(Path("run")), dispatches=dispatches)
    rows = _TableCells(render_html_report(run)).rows
    assert rows[1:] == [[weighed, "8.0%", "2 dispatchesmain_dispatch_0, main_dispatch_1"]]


def test_the_shares_legend_is_readable_at_the_size_the_page_shows_it(tmp_path: Path) -> None:
    if find_chromium() is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium; .ci/run does)")
    page = tmp_path / "report.html"
    page.write_text(render_html_report(_untuned_model_run(tmp_path)))
    (shares,) = inspect_page(page).plots
    # Each legend entry names a dispatch and its 400-character reason; the page may not shrink
    # the figure to fit them.
    assert shares.legend_font_px is not None and shares.legend_font_px >= READABLE_PX
