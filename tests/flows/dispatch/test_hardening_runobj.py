"""The dispatch run as one object through stages (issue 23, part 3): the sequencer and the one
decide that the in-process flow and `finish` share."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from ireetune.flows.dispatch import decide as decide_module
from ireetune.flows.dispatch import tuner as dispatch_tuner
from ireetune.flows.dispatch.decide import DecidingRun, why_no_winner
from ireetune.flows.dispatch.options import References
from ireetune.flows.handoff.benchmark_folder import benchmark_folder
from ireetune.flows.handoff.finish import finish_run
from tests.conftest import compile_matmul_for_device_host


def test_finish_without_a_winner_writes_what_the_in_process_decide_writes(
    tmp_path: Path,
) -> None:
    # A threshold of 100x: no candidate's interval lies above it.
    run_dir = compile_matmul_for_device_host(
        tmp_path, num_candidates=2, repetitions=3, min_repetition_s=0.005, confirm_rounds=1,
        confirm_top=1, references=References.ALL, threshold=100.0,
    )  # fmt: skip
    benchmark_folder(run_dir, ["local-task"])

    result = finish_run(run_dir)

    # On the CPU real inputs decide: the dispatch-level leaders are checked and none clears 100x.
    assert result.decision is not None
    why = why_no_winner(result.decision)
    assert why.startswith("no contender passed every check (") and "does not clear 100x" in why
    written = json.loads((run_dir / "results.json").read_text())
    assert (written["outcome"], written["spec_written"], written["why"]) == (
        "no-improvement", False, why,
    )  # fmt: skip
    assert written["baseline_ms"] == result.baseline_ms
    assert result.notes[-1] == f"no spec written: {why}"
    assert result.best is None
    assert not (run_dir / "best_spec.mlir").exists()


def test_finish_continues_the_folder_at_the_in_process_flows_own_decide_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = compile_matmul_for_device_host(
        tmp_path, num_candidates=2, repetitions=3, min_repetition_s=0.005, confirm_rounds=1,
        confirm_top=1, references=References.ALL,
    )  # fmt: skip
    benchmark_folder(run_dir, ["local-task"])
    decided: list[str] = []
    own_decide = decide_module.decide_stage

    def watched_decide(run: DecidingRun) -> None:
        decided.append(type(run).__name__)
        own_decide(run)

    monkeypatch.setattr(decide_module, "decide_stage", watched_decide)

    result = finish_run(run_dir)

    assert decided == ["FinishRun"]
    assert own_decide in dispatch_tuner.dispatch_stages(SimpleNamespace(
        options=SimpleNamespace(stop_after=None), search=None,
    ))  # fmt: skip
    written = json.loads((run_dir / "results.json").read_text())
    assert (written["outcome"], written["spec_written"]) == (
        ("improved", True) if result.best is not None else ("no-improvement", False)
    )
