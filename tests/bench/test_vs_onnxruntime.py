"""bench/vs_onnxruntime.py: the rounds in which the machine ran at its slow speed are counted,
and the ratios to ONNX Runtime over the others are given beside those over every round (issue
39: on the 2-core development machine every variant slows for seconds at a time, by different
amounts)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ireetune.decision.medians import compare_side_by_side
from ireetune.decision.stats import Rounds
from ireetune.frontend.model_import import import_model
from ireetune.model.ort_compare import IREE_DEFAULT, IREE_TUNED, OrtComparison, OrtStatus
from ireetune.model.ort_worker import ONNXRUNTIME
from tests.conftest import REPOSITORY
from tests.frontend.test_onnx_groups import _grouped_model

sys.path.insert(0, str(REPOSITORY / "bench"))

import vs_onnxruntime as bench  # noqa: E402


def _rounds(medians: list[float]) -> Rounds:
    """Rounds of three calls each, around the given medians."""
    return tuple((ms * 0.99, ms, ms * 1.01) for ms in medians)


def _comparison(times: dict[str, Rounds]) -> OrtComparison:
    side = compare_side_by_side(times, ONNXRUNTIME)
    return OrtComparison(
        OrtStatus.MEASURED, medians=side.medians, ratios=side.ratios,
        median_over_fastest=side.median_over_fastest, times_ms=times,
        rounds=len(times[ONNXRUNTIME]), calls=3, settle=1,
    )  # fmt: skip


def test_the_slow_rounds_are_counted_and_the_others_give_their_own_ratios() -> None:
    # 12 fast rounds, then 4 slow ones: ONNX Runtime 1.18x slower there, the tuned model 1.58x.
    fast, slow = 12, 4
    times = {
        IREE_DEFAULT: _rounds([200.0] * fast + [208.0] * slow),
        IREE_TUNED: _rounds([24.0] * fast + [37.9] * slow),
        ONNXRUNTIME: _rounds([25.0] * fast + [29.5] * slow),
    }
    assert bench.fast_machine_rounds(times[ONNXRUNTIME]) == list(range(fast))

    record = bench.describe_times(_comparison(times), warmup=3)

    split = record["fast_machine"]
    assert split["rounds"] == fast
    assert split["ratio_to_onnxruntime"][IREE_TUNED]["value"] == 24.0 / 25.0
    # Over every round the slow ones pull the tuned model's ratio up; they stay reported.
    assert record["ratio_to_onnxruntime"][IREE_TUNED]["value"] > 24.0 / 25.0
    lines = bench.format_figures(record)
    assert (
        f"  the machine ran at its slow speed in {slow} of {fast + slow} rounds (ONNX Runtime's "
        f"median above 1.10x its fastest round's); over the other {fast}:"
    ) in lines
    assert "    iree_tuned / onnxruntime: 0.960x" in [line.split(" [")[0] for line in lines]


def test_each_variant_s_own_slow_rounds_are_counted() -> None:
    # IREE's tuned model slow in 5 rounds where ONNX Runtime runs at one speed (ZFNet-512's
    # measurement of 2026-12-07 had 8 of 15 such rounds).
    times = {
        IREE_DEFAULT: _rounds([200.0] * 16),
        IREE_TUNED: _rounds([31.0] * 6 + [32.0] * 5 + [41.0] * 5),
        ONNXRUNTIME: _rounds([40.0] * 16),
    }
    record = bench.describe_times(_comparison(times), warmup=3)
    assert record["slow_rounds"] == {IREE_DEFAULT: 0, IREE_TUNED: 5, ONNXRUNTIME: 0}
    assert (
        "  rounds in which each variant's median was above 1.10x its own fastest round's: "
        "iree_default 0, iree_tuned 5, onnxruntime 0"
    ) in bench.format_figures(record)


def test_a_machine_at_one_speed_or_too_few_fast_rounds_adds_nothing() -> None:
    steady = {name: _rounds([25.0] * 16) for name in (IREE_DEFAULT, IREE_TUNED, ONNXRUNTIME)}
    assert bench.fast_machine_rounds(steady[ONNXRUNTIME]) is None
    assert "fast_machine" not in bench.describe_times(_comparison(steady), warmup=3)

    mostly_slow = dict(steady, **{ONNXRUNTIME: _rounds([25.0] * 9 + [29.5] * 7)})
    assert bench.fast_machine_rounds(mostly_slow[ONNXRUNTIME]) == list(range(9))
    record = bench.describe_times(_comparison(mostly_slow), warmup=3)
    assert "fast_machine" not in record
    assert not [line for line in bench.format_figures(record) if "slow speed" in line]


def test_measure_compiles_the_tuned_variant_from_the_run_s_own_import(tmp_path: Path) -> None:
    """A run that split a model's grouped convolutions tuned its own import: `--tuned-mlir`
    times that one as the tuned variant (its outputs checked against ONNX Runtime's on the model
    as given), and the default stays the model's import."""
    model = tmp_path / "grouped.onnx"
    _grouped_model(model)
    split = import_model(model, tmp_path / "split", split_groups=True)
    work_dir = tmp_path / "work"
    argv = ["measure", str(model), "--tuned-mlir", str(split), "--rounds", "2", "--calls", "1",
            "--warmup", "0", "--work-dir", str(work_dir), "--json", str(tmp_path / "r.json")]  # fmt: skip
    assert bench.main(argv) == 0
    record = json.loads((tmp_path / "r.json").read_text())
    assert record["outputs_match"] and record["tuned_mlir"] == str(split)
    assert set(record["median_ms"]) == {IREE_DEFAULT, IREE_TUNED, ONNXRUNTIME}
    default, tuned = (work_dir / f"grouped_{kind}.vmfb" for kind in ("default", "tuned"))
    assert default.read_bytes() != tuned.read_bytes()
    # A tuned MLIR that is not there: one line, no traceback.
    missing = ["measure", str(model), "--tuned-mlir", str(tmp_path / "none.mlir")]
    assert bench.main(missing) == 1
