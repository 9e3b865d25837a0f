"""The end of a model run: the whole deployment's result, and the comparison with ONNX Runtime.

`report_deployment` is the model flow's last step. It sums up what the run kept (the split
import, flags, spec, runtime options) as one `Deployment` against the compiler's default
(report/deployment.py), times the tuned model, the default model and ONNX Runtime side by side
when the model is an ONNX file and onnxruntime is installed (model/ort_compare.py), and writes
both at the top of report.txt and into report.json (`deployment`, `onnxruntime`), where the HTML
report reads them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ireetune.core.files import write_text_atomically
from ireetune.decision.stats import SpeedupEstimate
from ireetune.executor import ExecutorKind
from ireetune.model.ort_compare import (
    IREE_DEFAULT,
    IREE_TUNED,
    OrtComparison,
    OrtComparisonRequest,
    OrtStatus,
    compare_with_onnxruntime,
    onnxruntime_version,
)
from ireetune.model.ort_worker import ONNXRUNTIME
from ireetune.model.prepare import ModelUnderTuning
from ireetune.report.deployment import (
    Deployment,
    DeploymentPart,
    OnnxRuntimeLine,
    Speedup,
    deployment_to_json,
    render_deployment_lines,
)

if TYPE_CHECKING:
    from ireetune.flows.model.options import ModelTuneOptions
    from ireetune.flows.model.run import ModelTuneResult

# Rounds of the comparison with ONNX Runtime, and how long the calls of one variant in one
# round should take at least (at most MAX_CALLS calls): about 3 x 15 x 0.2 s for a slow model.
ORT_ROUNDS = 15
ORT_ROUND_MS = 200.0
MAX_CALLS = 5
INSTALL_HINT = "pip install 'ireetune[ort]'"


@dataclass(frozen=True)
class DeploymentFacts:
    """What a finished model run kept and measured, as the deployment's summary needs it."""

    # The untouched default's median time (the compiler's defaults and the user's --flags).
    default_ms: float
    # The flag phase's winner (empty: none kept) and its speedup over the default flags.
    flags: tuple[str, ...]
    flags_estimate: SpeedupEstimate | None
    spec_path: Path | None
    # The spec's speedup over the model under the tuned flags, and why none was kept.
    spec_estimate: SpeedupEstimate | None
    spec_note: str
    # The untouched default against flags and spec together, side by side.
    combined: SpeedupEstimate | None
    runtime_flags: tuple[str, ...] = ()
    # The tuned model's binary where the run already compiled it (flags and spec as kept).
    tuned_vmfb: Path | None = None
    # The import with grouped convolutions split, when the run kept it: its speedup over the
    # model as given under the same flags, and the MLIR tuned.
    import_estimate: SpeedupEstimate | None = None
    import_mlir: Path | None = None
    # The kept runtime options' speedup on the flag phase's winner, timed with and without
    # them (None: none kept).
    runtime_estimate: SpeedupEstimate | None = None


def _speedup(estimate: SpeedupEstimate | None) -> Speedup | None:
    return None if estimate is None else Speedup(estimate.speedup, estimate.low, estimate.high)


def _whole(facts: DeploymentFacts) -> tuple[Speedup, float, float]:
    """Return the whole deployment's speedup over the default, the default's time and the tuned
    model's."""
    runtime = facts.runtime_estimate
    if facts.combined is not None:
        combined = facts.combined
        if runtime is None:
            whole = Speedup(combined.speedup, combined.low, combined.high)
            return whole, facts.default_ms, combined.candidate_ms
        # The combined check times both models under the runtime options (a process has one
        # set), so their own gain is measured apart: the product, without an interval, and the
        # default without them as that gain puts it.
        product = combined.speedup * runtime.speedup
        return Speedup(product), combined.candidate_ms * product, combined.candidate_ms
    kept = [
        estimate
        for estimate, is_kept in (
            (facts.import_estimate, facts.import_estimate is not None),
            (facts.flags_estimate, bool(facts.flags)),
            (facts.spec_estimate, facts.spec_path is not None),
            (runtime, runtime is not None),
        )
        if is_kept and estimate is not None
    ]
    if not kept:
        return Speedup(1.0), facts.default_ms, facts.default_ms
    if len(kept) == 1:
        whole = _speedup(kept[0]) or Speedup(1.0)
        return whole, facts.default_ms, facts.default_ms / kept[0].speedup
    # The parts were measured apart only (the combined check failed, or runtime options were
    # kept without a flag set): their product, without an interval.
    product = math.prod(estimate.speedup for estimate in kept)
    return Speedup(product), facts.default_ms, facts.default_ms / product


def build_deployment(facts: DeploymentFacts, ort: OrtComparison | None) -> Deployment:
    """Sum up the deployment: the whole speedup, each part, ONNX Runtime's comparison."""
    speedup, default_ms, tuned_ms = _whole(facts)
    # The import is a part only where the run measured and kept the split one.
    imported = (
        (DeploymentPart(
            "import", True, f"grouped convolutions split per group, strided ones of few input "
            f"channels as space-to-depth (those the model has): {facts.import_mlir}",
            _speedup(facts.import_estimate),
        ),)
        if facts.import_estimate is not None
        else ()
    )  # fmt: skip
    parts = (
        *imported,
        DeploymentPart(
            "flags",
            bool(facts.flags),
            " ".join(facts.flags),
            _speedup(facts.flags_estimate) if facts.flags else None,
        ),
        DeploymentPart(
            "spec",
            facts.spec_path is not None,
            str(facts.spec_path) if facts.spec_path is not None else facts.spec_note,
            _speedup(facts.spec_estimate) if facts.spec_path is not None else None,
        ),
        DeploymentPart(
            "runtime options",
            bool(facts.runtime_flags),
            " ".join(facts.runtime_flags),
            _speedup(facts.runtime_estimate),
        ),
    )
    return Deployment(default_ms, tuned_ms, speedup, parts, _ort_line(ort))


def _ratio(comparison: OrtComparison, name: str) -> Speedup | None:
    estimate = comparison.ratios.get(name)
    return None if estimate is None else Speedup(estimate.value, estimate.low, estimate.high)


def _ort_line(comparison: OrtComparison | None) -> OnnxRuntimeLine | None:
    if comparison is None:
        return None
    measured = comparison.status is OrtStatus.MEASURED
    default = _ratio(comparison, IREE_DEFAULT)
    return OnnxRuntimeLine(
        status=comparison.status.value,
        summary=comparison.describe(),
        onnxruntime_ms=comparison.medians[ONNXRUNTIME].value if measured else None,
        # Without a tuned variant, the tuned model is the default.
        tuned_ratio=_ratio(comparison, IREE_TUNED) or default,
        default_ratio=default,
        max_error=comparison.max_error,
    )


def calls_per_round(model_ms: float) -> int:
    """Return how many calls per round make one variant's turn last about ORT_ROUND_MS."""
    if model_ms <= 0:
        return MAX_CALLS
    return max(1, min(MAX_CALLS, math.ceil(ORT_ROUND_MS / model_ms)))


def compare_run_with_onnxruntime(
    model: ModelUnderTuning,
    options: ModelTuneOptions,
    default_vmfb: Path,
    facts: DeploymentFacts,
    work_dir: Path,
) -> OrtComparison:
    """Time the run's default and tuned models against ONNX Runtime, or say why not."""

    def not_run(reason: str) -> OrtComparison:
        return OrtComparison(OrtStatus.NOT_RUN, reason, runtime_flags=facts.runtime_flags)

    if not options.compare_onnxruntime:
        return not_run("turned off (--no-onnxruntime)")
    if options.model_path.suffix.lower() != ".onnx":
        return not_run("the model is not an .onnx file")
    if model.device != "local-task":
        return not_run(f"it runs on the CPU's local-task device; this run's is {model.device}")
    if options.executor is not ExecutorKind.LOCAL:
        return not_run("it runs on this host; this run measured with --executor ray")
    if onnxruntime_version() is None:
        return OrtComparison(
            OrtStatus.UNAVAILABLE, f"onnxruntime is not installed ({INSTALL_HINT})"
        )
    work_dir.mkdir(parents=True, exist_ok=True)
    variants = [(IREE_DEFAULT, default_vmfb)]
    tuned_vmfb = facts.tuned_vmfb
    tuned = facts.flags or facts.spec_path is not None or facts.import_estimate is not None
    if tuned and tuned_vmfb is None:
        # The model (the import tuned) and its target (the tuned flags) are the run's; the spec
        # is compiled in as the run kept it.
        tuned_vmfb = work_dir / "tuned.vmfb"
        error = model.compile(facts.spec_path, tuned_vmfb)
        if error:
            return OrtComparison(OrtStatus.FAILED, f"the tuned model did not compile: {error}")
    if tuned_vmfb is not None:
        variants.append((IREE_TUNED, tuned_vmfb))
    return compare_with_onnxruntime(
        OrtComparisonRequest(
            onnx_path=options.model_path,
            variants=variants,
            function=model.function,
            inputs_path=model.inputs_path,
            runtime_flags=facts.runtime_flags,
            rounds=ORT_ROUNDS,
            calls=calls_per_round(facts.default_ms),
        )
    )


def facts_of(result: ModelTuneResult, runtime_flags: Sequence[str]) -> DeploymentFacts:
    """Read what the deployment's summary needs from a model run's result."""
    search = result.flag_search
    flags_kept = search is not None and search.improved and search.estimate is not None
    flags_estimate = search.estimate if search is not None and flags_kept else None
    # The untouched default: what the combined check, else the flag phase, timed it at.
    if result.combined is not None:
        default_ms = result.combined.baseline_ms
    elif flags_estimate is not None:
        default_ms = flags_estimate.baseline_ms
    else:
        default_ms = result.default_ms
    switched = result.import_estimate is not None
    spec_note = next(
        (n for n in result.notes if _speaks_of_specs(n)), "no dispatch spec made the model faster"
    )
    return DeploymentFacts(
        default_ms=default_ms,
        flags=tuple(search.winner.flags) if search is not None and flags_kept else (),
        flags_estimate=flags_estimate,
        spec_path=result.tuned_spec_path,
        spec_estimate=result.estimate,
        spec_note=spec_note,
        combined=result.combined,
        runtime_flags=tuple(runtime_flags),
        tuned_vmfb=result.tuned_vmfb,
        import_estimate=result.import_estimate,
        import_mlir=result.mlir_path if switched else None,
        runtime_estimate=search.runtime_estimate if search is not None and runtime_flags else None,
    )


def _speaks_of_specs(note: str) -> bool:
    """Say whether a run's note is about its dispatch specs: the word outside any flag it quotes
    (the flag phase's notes name `--iree-preprocessing-transform-spec-filename=...`)."""
    return any("spec" in word for word in note.split() if not word.startswith("--"))


def report_deployment(
    model: ModelUnderTuning,
    options: ModelTuneOptions,
    default_vmfb: Path,
    result: ModelTuneResult,
    runtime_flags: Sequence[str] = (),
) -> Deployment:
    """Sum up the run's deployment, compare it with ONNX Runtime, and write both at the top of
    the run's report.txt and into its report.json. `default_vmfb` is the untouched default's
    binary; `model.target` carries the tuned flags; `runtime_flags` (`--flag=value` each)
    configure the IREE runtime device the tuned model is deployed with."""
    facts = facts_of(result, runtime_flags)
    comparison = compare_run_with_onnxruntime(
        model, options, default_vmfb, facts, result.run_dir / "onnxruntime"
    )
    deployment = build_deployment(facts, comparison)
    write_deployment(result.run_dir, deployment, comparison)
    return deployment


def write_deployment(run_dir: Path, deployment: Deployment, comparison: OrtComparison) -> None:
    """Put the deployment's lines first in report.txt and add it to report.json."""
    text_path, json_path = run_dir / "report.txt", run_dir / "report.json"
    lines = render_deployment_lines(deployment)
    write_text_atomically(text_path, "\n".join(lines) + "\n\n" + text_path.read_text())
    report = json.loads(json_path.read_text())
    report["deployment"] = deployment_to_json(deployment)
    report["onnxruntime"] = comparison.to_json()
    write_text_atomically(json_path, json.dumps(report, indent=2, default=str) + "\n")
