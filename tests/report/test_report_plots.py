"""The report's plots: what each draws, read back from the Matplotlib figure."""

from __future__ import annotations

from ireetune.core.records import CandidateStatus
from ireetune.report.plots import (
    MAX_CANDIDATE_ROWS,
    OTHER_COLOUR,
    KnobPoint,
    plot_candidate_times,
    plot_convergence,
    plot_knob_effects,
    render_svg,
    status_colour,
)
from ireetune.report.run_view import CandidateView


def _candidate(
    candidate_id: int, median_ms: float | None, status: str = "measured"
) -> CandidateView:
    speedup = None if median_ms is None else 10.0 / median_ms
    return CandidateView(
        candidate_id=candidate_id, status=status, knobs=(("tile", candidate_id),), reason="",
        median_ms=median_ms, min_ms=median_ms, max_ms=median_ms, spread=0.0, speedup=speedup,
        speedup_low=None, speedup_high=None, verdict="",
    )  # fmt: skip


def test_every_candidate_status_has_a_colour_of_its_own() -> None:
    """A status added to the records gets its own colour in the report, not the fallback."""
    colours = {status: status_colour(status.value) for status in CandidateStatus}
    assert [status for status, colour in colours.items() if colour == OTHER_COLOUR] == []
    assert len(set(colours.values())) == len(colours)


def test_convergence_draws_the_best_so_far_in_the_order_tried() -> None:
    candidates = [_candidate(0, 10.0), _candidate(1, 8.0), _candidate(2, None, "compile-failed"),
                  _candidate(3, 12.5), _candidate(4, 5.0)]  # fmt: skip
    figure = plot_convergence(candidates, winner=4)
    assert figure is not None
    (best_line,) = [
        line for line in figure.axes[0].get_lines() if line.get_label() == "best so far"
    ]
    assert list(best_line.get_ydata()) == [1.25, 1.25, 2.0]
    assert render_svg(figure).startswith("<svg")


def test_nothing_measured_draws_nothing() -> None:
    only_failures = [_candidate(0, 10.0), _candidate(1, None, "compile-failed")]
    assert plot_convergence(only_failures) is None
    assert plot_candidate_times(only_failures) is None
    assert plot_knob_effects([KnobPoint((("tile", 4),), 1.0, "measured")], "x") is None


def test_many_candidates_draw_the_fastest_and_the_winner() -> None:
    candidates = [_candidate(0, 10.0)] + [_candidate(i, float(i)) for i in range(1, 101)]
    figure = plot_candidate_times(candidates, winner=100)
    assert figure is not None
    labels = [label.get_text() for label in figure.axes[0].get_yticklabels()]
    assert labels == [f"#{i}" for i in range(1, MAX_CANDIDATE_ROWS + 1)] + ["#100 (chosen)"]
