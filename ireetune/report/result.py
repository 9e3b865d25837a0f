"""What a dispatch tuning run hands back: the same record from every flow."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ireetune.core.records import CandidateRecord
from ireetune.decision.rules import Decision
from ireetune.problem.root_op import Problem


@dataclass(frozen=True)
class TuneResult:
    """What a run produced; `best_spec_path` is None when nothing beat the default."""

    run_dir: Path
    problem: Problem
    records: tuple[CandidateRecord, ...]
    baseline_ms: float
    best: CandidateRecord | None
    best_spec_path: Path | None
    compile_success_rate: float
    notes: tuple[str, ...] = field(default_factory=tuple)
    reused: bool = False
    decision: Decision | None = None
    summary: str = ""
