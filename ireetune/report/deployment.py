"""The headline of a model report: the tuned deployment's whole result, then its parts.

A model run tunes three parts of a deployment: the global compiler flags, a tuning spec and the
runtime options of the device (and, for an ONNX model with grouped convolutions, may import it
with them split: an "import" part). What a reader wants first is the result of all of them together:
how much faster the tuned model runs than the compiler's default, and, where it was measured,
against ONNX Runtime. Then each part and what it was worth. A run whose flags made the model
7.61x faster and whose dispatch phase kept no spec is a 7.61x run, not a "speedup 1.000x" one.

`Deployment` is written into report.json (`deployment`) and rendered into report.txt and the
HTML page from there; `deployment_from_report` also reads a report written before it existed,
from the fields such reports hold.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ireetune.database.store import as_number


@dataclass(frozen=True)
class Speedup:
    """A ratio with its 95% interval, where one was measured."""

    value: float
    low: float | None = None
    high: float | None = None

    def describe(self) -> str:
        """Render as `7.610x [7.220, 8.010]`, or `1.000x` without an interval."""
        if self.low is None or self.high is None:
            return f"{self.value:.3f}x"
        return f"{self.value:.3f}x [{self.low:.3f}, {self.high:.3f}]"


@dataclass(frozen=True)
class DeploymentPart:
    """One part of the deployment (import, flags, spec or runtime options) and what it was worth.

    `speedup` is the part's own contribution where the run measured it (the split import over
    the model as given, the flags over the default flags; the spec over the model under the
    tuned flags).
    """

    name: str
    kept: bool
    detail: str
    speedup: Speedup | None = None


@dataclass(frozen=True)
class OnnxRuntimeLine:
    """The comparison with ONNX Runtime: its status, and the tuned model's time over ORT's."""

    status: str
    summary: str
    onnxruntime_ms: float | None = None
    # Tuned IREE's median time over ONNX Runtime's (above 1: IREE is slower), and the default's.
    tuned_ratio: Speedup | None = None
    default_ratio: Speedup | None = None
    max_error: float | None = None


@dataclass(frozen=True)
class Deployment:
    """The whole tuned deployment against the compiler's default, its parts and ONNX Runtime."""

    default_ms: float | None
    tuned_ms: float | None
    # Default time over tuned time, all parts together (1.0 when nothing was kept).
    speedup: Speedup
    parts: tuple[DeploymentPart, ...]
    onnxruntime: OnnxRuntimeLine | None = None

    @property
    def anything_kept(self) -> bool:
        return any(part.kept for part in self.parts)


def _ms(value: float | None) -> str:
    return "?" if value is None else f"{value:.3f} ms"


def describe_headline(deployment: Deployment) -> str:
    """Say in one sentence what the tuned deployment gained over the default (and ORT)."""
    if deployment.anything_kept:
        kept = " + ".join(part.name for part in deployment.parts if part.kept)
        times = (
            f": {_ms(deployment.default_ms)} -> {_ms(deployment.tuned_ms)}"
            if deployment.default_ms is not None and deployment.tuned_ms is not None
            else ""
        )
        text = (
            f"The tuned model ({kept}) runs {deployment.speedup.describe()} faster than the "
            f"compiler's default{times}."
        )
    else:
        text = (
            f"The tuned model is the compiler's default ({_ms(deployment.default_ms)}): no flag "
            "set, spec or runtime option made it faster."
        )
    ort = deployment.onnxruntime
    if ort is not None and ort.tuned_ratio is not None:
        text += (
            f" ONNX Runtime takes {_ms(ort.onnxruntime_ms)}: the tuned model takes "
            f"{ort.tuned_ratio.describe()} its time (above 1: slower)."
        )
    elif ort is not None:
        text += f" ONNX Runtime: {ort.summary}."
    return text


def describe_part(part: DeploymentPart) -> str:
    """Render one part as a line: kept or not, what it is, what it was worth."""
    worth = f" ({part.speedup.describe()} on its own)" if part.speedup is not None else ""
    state = "kept" if part.kept else "none kept"
    return f"{part.name}: {state}{worth}" + (f": {part.detail}" if part.detail else "")


def render_deployment_lines(deployment: Deployment) -> list[str]:
    """Render the headline, then one line per part and the ONNX Runtime comparison."""
    lines = [f"result: {describe_headline(deployment)}"]
    lines.extend(f"  {describe_part(part)}" for part in deployment.parts)
    if deployment.onnxruntime is not None:
        lines.append(f"  onnxruntime: {deployment.onnxruntime.summary}")
    return lines


# --- report.json ----------------------------------------------------------------------------------


def deployment_to_json(deployment: Deployment) -> dict[str, Any]:
    """Return the deployment as report.json's `deployment` object: the headline, then the
    records' fields by name (a speedup as `value`, `low` and `high`); an ONNX Runtime error that
    is not finite is null."""
    ort = deployment.onnxruntime
    return {
        "headline": describe_headline(deployment),
        "default_ms": deployment.default_ms,
        "tuned_ms": deployment.tuned_ms,
        "speedup": asdict(deployment.speedup),
        "parts": [asdict(part) for part in deployment.parts],
        "onnxruntime": None
        if ort is None
        else {
            **asdict(ort),
            "max_error": ort.max_error
            if ort.max_error is None or math.isfinite(ort.max_error)
            else None,
        },
    }


def _read_speedup(value: object) -> Speedup | None:
    if not isinstance(value, Mapping):
        return None
    point = as_number(value.get("value"))
    return (
        None
        if point is None
        else Speedup(point, as_number(value.get("low")), as_number(value.get("high")))
    )


def _read_ort(value: object) -> OnnxRuntimeLine | None:
    if not isinstance(value, Mapping):
        return None
    return OnnxRuntimeLine(
        status=str(value.get("status") or ""),
        summary=str(value.get("summary") or ""),
        onnxruntime_ms=as_number(value.get("onnxruntime_ms")),
        tuned_ratio=_read_speedup(value.get("tuned_ratio")),
        default_ratio=_read_speedup(value.get("default_ratio")),
        max_error=as_number(value.get("max_error")),
    )


def _read_deployment(value: Mapping[str, Any]) -> Deployment | None:
    speedup = _read_speedup(value.get("speedup"))
    if speedup is None:
        return None
    parts = tuple(
        DeploymentPart(
            name=str(p.get("name") or ""),
            kept=p.get("kept") is True,
            detail=str(p.get("detail") or ""),
            speedup=_read_speedup(p.get("speedup")),
        )
        for p in value.get("parts") or ()
        if isinstance(p, Mapping)
    )
    return Deployment(
        default_ms=as_number(value.get("default_ms")),
        tuned_ms=as_number(value.get("tuned_ms")),
        speedup=speedup,
        parts=parts,
        onnxruntime=_read_ort(value.get("onnxruntime")),
    )


def _legacy_deployment(report: Mapping[str, Any]) -> Deployment | None:
    """Rebuild the deployment of a report written before `deployment` existed (or by the split
    flow): the combined speedup when flags were tuned, else the spec's."""
    flag_search = report.get("flag_search")
    winner = flag_search.get("winner") if isinstance(flag_search, Mapping) else None
    flags_kept = bool(winner)
    spec = report.get("tuned_spec")
    combined = as_number(report.get("combined_speedup"))
    spec_speedup = as_number(report.get("speedup"))
    if combined is not None:
        whole = Speedup(
            combined, as_number(report.get("combined_low")), as_number(report.get("combined_high"))
        )
    elif spec and spec_speedup is not None:
        whole = Speedup(
            spec_speedup,
            as_number(report.get("speedup_low")),
            as_number(report.get("speedup_high")),
        )
    elif spec_speedup is not None:
        whole = Speedup(1.0)
    else:
        return None
    default_ms = as_number(report.get("default_ms"))
    tuned_ms = default_ms / whole.value if default_ms is not None and combined is None else None
    flags = " ".join(str(f) for f in winner) if isinstance(winner, Sequence) else ""
    return Deployment(
        default_ms=default_ms if combined is None else None,
        tuned_ms=tuned_ms,
        speedup=whole,
        parts=(
            DeploymentPart("flags", flags_kept, flags),
            DeploymentPart("spec", bool(spec), str(spec or "")),
        ),
    )


def deployment_from_report(report: Mapping[str, Any]) -> Deployment | None:
    """Read a model report.json's deployment (or rebuild it from an older report's fields)."""
    value = report.get("deployment")
    if isinstance(value, Mapping):
        return _read_deployment(value)
    return _legacy_deployment(report)
