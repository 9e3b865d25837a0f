"""The model report's headline: the whole deployment against the default and ONNX Runtime."""

from __future__ import annotations

import html
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ireetune.core.flag_space import FlagSet
from ireetune.core.records import MODEL_REPORT_FORMAT
from ireetune.decision.medians import Estimate
from ireetune.decision.rules import DecisionRule
from ireetune.decision.stats import Basis, SpeedupEstimate
from ireetune.executor import ExecutorKind
from ireetune.flags.trials import FlagSearchResult
from ireetune.flows.model import deployment as deployment_module
from ireetune.flows.model.deployment import (
    build_deployment,
    compare_run_with_onnxruntime,
    facts_of,
    write_deployment,
)
from ireetune.flows.model.import_choice import SPLIT_DIR, judge_split_import, split_binary
from ireetune.flows.model.options import ModelTuneOptions
from ireetune.flows.model.tuner import ModelTuneResult
from ireetune.model.ort_compare import IREE_DEFAULT, IREE_TUNED, OrtComparison, OrtStatus
from ireetune.model.ort_worker import ONNXRUNTIME
from ireetune.model.prepare import ModelUnderTuning
from ireetune.model.timing import ModelRun
from ireetune.report.deployment import deployment_from_report, render_deployment_lines
from ireetune.report.html_report import render_html_report
from ireetune.report.run_view import read_model_run
from ireetune.targets import parse_target

FLAGS = ("--iree-opt-data-tiling", "--iree-llvmcpu-enable-ukernels=mmt4d")


def _estimate(speedup: float, baseline_ms: float) -> SpeedupEstimate:
    return SpeedupEstimate(
        speedup, speedup - 0.2, speedup + 0.2, 10, Basis.MODEL, baseline_ms, baseline_ms / speedup
    )


def _flags_only_result(run_dir: Path) -> ModelTuneResult:
    """The CNN 1 run of issue 25: the flags made the model 7.61x faster, no spec was kept."""
    search = FlagSearchResult(
        FlagSet(FLAGS), _estimate(7.61, 76.43), (), DecisionRule(1.01), run_dir / "trials.json"
    )
    return ModelTuneResult(
        run_dir=run_dir, default_ms=10.04, tuned_ms=10.04, tuned_spec_path=None, dispatches=(),
        notes=("no dispatch spec made the model faster; no tuned spec written",),
        estimate=None, flags=FLAGS, flag_search=search, combined=_estimate(7.61, 76.43),
    )  # fmt: skip


def _measured(tuned_over_ort: float) -> OrtComparison:
    return OrtComparison(
        OrtStatus.MEASURED, threads=2, max_error=1e-6,
        medians={ONNXRUNTIME: Estimate(7.2, 7.0, 7.5)},
        ratios={IREE_DEFAULT: Estimate(10.6, 10.0, 11.0), IREE_TUNED: Estimate(tuned_over_ort, 1.3, 1.5)},
        rounds=15, calls=5,
    )  # fmt: skip


def test_the_headline_is_the_flags_speedup_when_no_spec_is_kept(tmp_path: Path) -> None:
    deployment = build_deployment(facts_of(_flags_only_result(tmp_path), ()), _measured(1.39))
    lines = render_deployment_lines(deployment)
    assert lines[:4] == [
        "result: The tuned model (flags) runs 7.610x [7.410, 7.810] faster than the compiler's "
        "default: 76.430 ms -> 10.043 ms. ONNX Runtime takes 7.200 ms: the tuned model takes "
        "1.390x [1.300, 1.500] its time (above 1: slower).",
        f"  flags: kept (7.610x [7.410, 7.810] on its own): {' '.join(FLAGS)}",
        "  spec: none kept: no dispatch spec made the model faster; no tuned spec written",
        "  runtime options: none kept",
    ]
    assert lines[4] == (
        "  onnxruntime: median 7.20 ms [7.00, 7.50]; iree_default takes 10.600x [10.000, 11.000] "
        "its time, iree_tuned takes 1.390x [1.300, 1.500] its time (above 1: IREE slower; "
        "threads: 2 each; 15 interleaved rounds of 5 calls; 95% intervals)"
    )


def _timed(ms: float) -> ModelRun:
    return ModelRun(
        "m", (np.zeros(2, np.float32),), tuple(ms + 0.01 * (i % 3) for i in range(18)), ""
    )


def test_the_spec_part_says_why_not_with_the_note_about_specs(tmp_path: Path) -> None:
    """A flag phase's note that names a flag with "spec" in it (the channels-last windows
    transform spec) is not the reason no dispatch spec was kept."""
    flag_note = (
        "step 0: 13 seeds; moved to --iree-preprocessing-transform-spec-filename=/r/flags/"
        "channels_last_windows.mlir (2.637x)"
    )
    result = _flags_only_result(tmp_path)
    # Nor is the note of an import that split the model's grouped convolutions.
    split_note = judge_split_import(_timed(10.0), _timed(4.0), 3, tuned_flags=True)[1]
    assert split_note.startswith("3 grouped convolution(s) split per group at import")
    result = replace(result, notes=(flag_note, split_note, *result.notes))
    lines = render_deployment_lines(build_deployment(facts_of(result, ()), None))
    assert lines[2] == (
        "  spec: none kept: no dispatch spec made the model faster; no tuned spec written"
    )


def test_runtime_options_are_a_part_of_the_deployment(tmp_path: Path) -> None:
    flags = ("--task_topology_max_group_count=2",)
    deployment = build_deployment(facts_of(_flags_only_result(tmp_path), flags), None)
    assert render_deployment_lines(deployment)[3] == f"  runtime options: kept: {flags[0]}"


RUNTIME = ("--task_topology_max_group_count=1",)


def test_runtime_options_kept_alone_are_the_headline(tmp_path: Path) -> None:
    """An LSTM whose flag phase kept no set but one runtime option, 1.31x faster on its own:
    the headline is that option's speedup, not 1.000x."""
    search = FlagSearchResult(
        FlagSet(()), None, (), DecisionRule(1.01), tmp_path / "trials.json",
        runtime_flags=RUNTIME, runtime_estimate=_estimate(1.314, 0.915),
    )  # fmt: skip
    result = replace(_flags_only_result(tmp_path), flag_search=search, combined=None)
    lines = render_deployment_lines(build_deployment(facts_of(result, RUNTIME), None))
    assert lines == [
        "result: The tuned model (runtime options) runs 1.314x [1.114, 1.514] faster than the "
        "compiler's default: 10.040 ms -> 7.641 ms.",
        "  flags: none kept",
        "  spec: none kept: no dispatch spec made the model faster; no tuned spec written",
        f"  runtime options: kept (1.314x [1.114, 1.514] on its own): {RUNTIME[0]}",
    ]


def test_runtime_options_multiply_the_combined_check_timed_under_them(tmp_path: Path) -> None:
    """The combined check times the default and the tuned model both under the runtime options:
    their own gain, measured apart, multiplies it, and the default is the tuned time times that
    (no interval: two sessions)."""
    result = _flags_only_result(tmp_path)
    assert result.flag_search is not None
    search = replace(result.flag_search, runtime_flags=RUNTIME, runtime_estimate=_estimate(1.25, 8))
    result = replace(result, flag_search=search, combined=_estimate(4.0, 40.0))
    deployment = build_deployment(facts_of(result, RUNTIME), None)
    assert render_deployment_lines(deployment)[0] == (
        "result: The tuned model (flags + runtime options) runs 5.000x faster than the "
        "compiler's default: 50.000 ms -> 10.000 ms."
    )
    # Without runtime options the combined check is the headline, with its interval.
    plain = build_deployment(facts_of(result, ()), None)
    assert render_deployment_lines(plain)[0] == (
        "result: The tuned model (flags) runs 4.000x [3.800, 4.200] faster than the compiler's "
        "default: 40.000 ms -> 10.000 ms."
    )


def test_a_refused_comparison_reports_the_error_and_no_speed(tmp_path: Path) -> None:
    refused = OrtComparison(
        OrtStatus.REFUSED, "outputs differ", 2, (), 0.25, ("iree_tuned output 0: ...",)
    )
    deployment = build_deployment(facts_of(_flags_only_result(tmp_path), ()), refused)
    assert deployment.onnxruntime is not None
    assert (deployment.onnxruntime.tuned_ratio, deployment.onnxruntime.max_error) == (None, 0.25)
    assert render_deployment_lines(deployment)[0].endswith(
        "ONNX Runtime: refused: IREE's outputs differ from ONNX Runtime's (max abs error 0.25); "
        "no speed reported."
    )


def _write_report(run_dir: Path, report: dict[str, object]) -> None:
    run_dir.mkdir(exist_ok=True)
    (run_dir / "report.json").write_text(json.dumps({"format": MODEL_REPORT_FORMAT, **report}))


# What report.json of the CNN 1 run held before the deployment existed (the fields that matter).
LEGACY_FLAGS_ONLY = {
    "model": "cnn.onnx", "target": "cpu", "default_ms": 10.04, "tuned_ms": 10.04, "speedup": 1.0,
    "tuned_spec": None, "notes": ["no dispatch spec made the model faster; no tuned spec written"],
    "dispatches": [], "flag_search": {"winner": list(FLAGS)}, "combined_speedup": 7.61,
    "combined_low": 7.2, "combined_high": 8.0,
}  # fmt: skip


def test_the_html_headline_states_the_whole_deployment(tmp_path: Path) -> None:
    result = _flags_only_result(tmp_path)
    _write_report(tmp_path, LEGACY_FLAGS_ONLY)
    (tmp_path / "report.txt").write_text("model: cnn.onnx\n")
    write_deployment(
        tmp_path, build_deployment(facts_of(result, ()), _measured(1.39)), _measured(1.39)
    )
    page = render_html_report(read_model_run(tmp_path))
    assert "The tuned model (flags) runs 7.610x [7.410, 7.810] faster" in page
    assert "keeps the compiler&#39;s default" not in page
    assert "flags: kept (7.610x [7.410, 7.810] on its own)" in page
    assert (tmp_path / "report.txt").read_text().startswith("result: The tuned model (flags) runs")
    report = json.loads((tmp_path / "report.json").read_text())
    assert (report["onnxruntime"]["status"], report["speedup"]) == ("measured", 1.0)


def test_an_older_report_gets_its_whole_result_from_the_combined_speedup(tmp_path: Path) -> None:
    _write_report(tmp_path, LEGACY_FLAGS_ONLY)
    page = render_html_report(read_model_run(tmp_path))
    assert "The tuned model (flags) runs 7.610x [7.200, 8.000] faster than the compiler" in page
    assert deployment_from_report({"notes": []}) is None


# --- End to end ----------------------------------------------------------------------------------


def _write_chain(path: Path) -> Path:
    """Eight 512x512 matmuls (one problem, eight launches) and a tiny 512x1 one at the end."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array((rng.standard_normal((512, 512)) / 22).astype(np.float32), "w"),
        numpy_helper.from_array((rng.standard_normal((512, 1)) / 22).astype(np.float32), "v"),
    ]
    nodes, value = [], "x"
    for index in range(8):
        nodes += [
            helper.make_node("MatMul", [value, "w"], [f"m{index}"]),
            helper.make_node("Tanh", [f"m{index}"], [f"t{index}"]),
        ]
        value = f"t{index}"
    nodes.append(helper.make_node("MatMul", [value, "v"], ["z"]))
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [512, 512])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [512, 1])], weights,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_tune_an_onnx_model_gates_small_dispatches_and_compares_with_onnxruntime(
    tmp_path: Path,
) -> None:
    pytest.importorskip("onnxruntime")
    model = _write_chain(tmp_path / "chain.onnx")
    output = tmp_path / "out"
    result = subprocess.run(
        [
            sys.executable, "-m", "ireetune.cli", "tune", str(model), "--output-dir", str(output),
            "--num-candidates", "1", "--candidates-per-dispatch", "1", "--rounds", "2",
            "--no-flag-search", "--coverage", "1", "--no-db",
        ],
        capture_output=True, text=True, timeout=900, env=dict(os.environ),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (run_dir,) = output.iterdir()
    report = json.loads((run_dir / "report.json").read_text())
    notes = {d["problem"]: d["note"] for d in report["dispatches"]}
    # The tiny matmul is about 0.1% of the model: skipped, with why; the big one is tuned.
    assert notes["matmul_512x1x512_f32_f32_f32"].startswith(
        "not tuned: too small a share of the model ("
    )
    assert not notes["matmul_512x512x512_f32_f32_f32"].startswith("not tuned")
    assert len(list((run_dir / "tuning").iterdir())) == 1
    # The comparison ran on the same inputs and threads, and the outputs agreed.
    assert report["onnxruntime"]["status"] == "measured", report["onnxruntime"]
    # The tuned build is timed beside them when the run kept something (here only a spec can be
    # kept, and whether one beats the default is the machine's call).
    kept = [IREE_TUNED] if report["tuned_spec"] else []
    assert sorted(report["onnxruntime"]["median_ms"]) == sorted([IREE_DEFAULT, ONNXRUNTIME, *kept])
    assert report["onnxruntime"]["threads"] >= 1
    text = (run_dir / "report.txt").read_text()
    assert text.startswith("result: The tuned model")
    assert "ONNX Runtime takes" in text.splitlines()[0]
    # The page escapes the headline ("'" and "->" among others): compare it unescaped.
    assert report["deployment"]["headline"] in html.unescape((run_dir / "report.html").read_text())


def _model(device: str = "local-task") -> ModelUnderTuning:
    return ModelUnderTuning(
        Path("m.mlir"), "main", Path("inputs.npz"), parse_target("cpu"), False, device
    )


@pytest.mark.parametrize(
    ("options", "device", "installed", "line"),
    [
        (
            {"model_path": Path("m.onnx")}, "local-task", False,
            "unavailable: onnxruntime is not installed (pip install 'ireetune[ort]')",
        ),
        (
            {"model_path": Path("m.onnx"), "compare_onnxruntime": False}, "local-task", True,
            "not run: turned off (--no-onnxruntime)",
        ),
        ({"model_path": Path("m.mlir")}, "local-task", True, "not run: the model is not an .onnx file"),
        (
            {"model_path": Path("m.onnx")}, "local-sync", True,
            "not run: it runs on the CPU's local-task device; this run's is local-sync",
        ),
        (
            {"model_path": Path("m.onnx"), "executor": ExecutorKind.RAY}, "local-task", True,
            "not run: it runs on this host; this run measured with --executor ray",
        ),
    ],
)  # fmt: skip
def test_a_comparison_that_cannot_be_made_says_why_in_one_line(
    options: dict[str, object],
    device: str,
    installed: bool,
    line: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if not installed:
        monkeypatch.setattr(deployment_module, "onnxruntime_version", lambda: None)
    facts = facts_of(_flags_only_result(tmp_path), ())
    comparison = compare_run_with_onnxruntime(
        _model(device),
        ModelTuneOptions(**options),
        tmp_path / "d.vmfb",
        facts,
        tmp_path / "ort",  # type: ignore[arg-type]
    )
    assert comparison.describe() == line
    # Nothing was compiled or timed, and the report goes on with one line for it.
    assert not (tmp_path / "ort").exists()
    lines = render_deployment_lines(build_deployment(facts, comparison))
    assert lines[-1] == f"  onnxruntime: {line}"


def test_a_split_import_kept_alone_is_the_headline_and_a_part(tmp_path: Path) -> None:
    """No flag set won and no spec was kept, but the run measured the import with its grouped
    convolutions split faster and tuned it: the headline is the combined check's, the import is
    its part, and ONNX Runtime times the split import's binary."""
    split_mlir = tmp_path / SPLIT_DIR / "model.mlir"
    result = replace(
        _flags_only_result(tmp_path), flag_search=None, flags=(), combined=_estimate(4.5, 40.0),
        import_estimate=_estimate(4.4, 40.0), mlir_path=split_mlir,
        tuned_vmfb=split_binary(tmp_path),
    )  # fmt: skip
    facts = facts_of(result, ())
    assert facts.tuned_vmfb == tmp_path / SPLIT_DIR / "model.vmfb"
    lines = render_deployment_lines(build_deployment(facts, None))
    assert lines[:3] == [
        "result: The tuned model (import) runs 4.500x [4.300, 4.700] faster than the compiler's "
        "default: 40.000 ms -> 8.889 ms.",
        f"  import: kept (4.400x [4.200, 4.600] on its own): grouped convolutions split per "
        f"group, strided ones of few input channels as space-to-depth (those the model has): "
        f"{split_mlir}",
        "  flags: none kept",
    ]
    # Without the combined check (it failed): the parts' product; with a spec, the final
    # check's binary.
    with_spec = replace(
        result, combined=None, tuned_spec_path=tmp_path / "tuned_spec.mlir",
        estimate=_estimate(1.1, 9.0),
    )  # fmt: skip
    facts = facts_of(with_spec, ())
    deployment = build_deployment(facts, None)
    assert deployment.speedup.value == pytest.approx(4.4 * 1.1)
    assert [part.name for part in deployment.parts if part.kept] == ["import", "spec"]
    # The model as given: no import part.
    assert [
        p.name for p in build_deployment(facts_of(_flags_only_result(tmp_path), ()), None).parts
    ] == [
        "flags",
        "spec",
        "runtime options",
    ]


def test_the_comparison_reuses_the_tuned_binary_the_run_built(tmp_path: Path) -> None:
    """The run builds the tuned model whenever its default is not the untouched one (a flag
    set or the split import kept): that default's binary, or with a spec RUN/tuned.vmfb. A spec
    on the untouched default is compiled again for the comparison. The deployment reads the
    binary the run recorded."""
    from ireetune.executor import LocalExecutor
    from ireetune.flows.model.options import ModelTuneOptions
    from ireetune.flows.model.run import Mode, ModelTuningRun

    options = ModelTuneOptions(model_path=tmp_path / "model.mlir", output_dir=tmp_path)
    run = ModelTuningRun(Mode.IN_PROCESS, options, parse_target("cpu"), tmp_path, LocalExecutor())
    spec = tmp_path / "tuned_spec.mlir"
    run.default_vmfb = run.original_vmfb = tmp_path / "default.vmfb"
    assert run.tuned_binary(None) is None
    assert run.tuned_binary(spec) is None
    run.default_vmfb = tmp_path / "flags" / "winner.vmfb"
    assert run.tuned_binary(None) == tmp_path / "flags" / "winner.vmfb"
    assert run.tuned_binary(spec) == tmp_path / "tuned.vmfb"
    result = replace(_flags_only_result(tmp_path), tuned_vmfb=run.tuned_binary(None))
    assert facts_of(result, ()).tuned_vmfb == tmp_path / "flags" / "winner.vmfb"
