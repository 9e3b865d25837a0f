"""The dispatch run's compile stage when the reference program does not carry the configurations
(dispatch_run/stages.py): the run times its candidates on the dispatch benchmark instead."""

from __future__ import annotations

import json
from pathlib import Path

from ireetune.core.records import CandidateStatus
from ireetune.dispatch_run.stages import REFERENCE_IGNORES_CONFIGS
from ireetune.dispatch_tuner import TuneOptions, tune_dispatch
from tests.conftest import TEST_TARGET


def test_candidates_are_timed_on_the_dispatch_when_their_reference_programs_drop_the_config(
    matmul_benchmark: Path, tmp_path: Path
) -> None:
    """The matmul was dumped without data tiling; tuned under `--iree-opt-data-tiling`, its
    reference program alone is data-tiled and every candidate's configuration is lost there (each
    compile fails), while the dispatch benchmark takes them. The run compiles the candidates
    again from the dispatch benchmark and times them there, with a note, instead of ending with
    "no candidate compiled"."""
    result = tune_dispatch(
        TuneOptions(
            input_path=matmul_benchmark, target=TEST_TARGET, num_candidates=3,
            output_dir=tmp_path / "runs", repetitions=3, min_repetition_s=0.005,
            confirm_rounds=1, use_database=False, show_progress=False,
            extra_flags=("--iree-opt-data-tiling",),
        )
    )  # fmt: skip
    prefix = REFERENCE_IGNORES_CONFIGS.split("{counts}")[0]
    assert [note for note in result.notes if note.startswith(prefix)] == [
        REFERENCE_IGNORES_CONFIGS.format(counts="3 compile-failed")
    ]
    info = json.loads((result.run_dir / "results.json").read_text())
    assert info["timing_basis"] == "dispatch"
    baseline, *candidates = result.records
    assert baseline.status is CandidateStatus.MEASURED
    # Each binary is the dispatch benchmark's under its own configuration, timed there.
    assert len({baseline.binary_hash, *(r.binary_hash for r in candidates)}) == 4
    assert all(r.median_ms is not None for r in candidates)
