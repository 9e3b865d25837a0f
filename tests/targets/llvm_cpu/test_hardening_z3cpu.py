"""Issue 22, area z3cpu: a space that fails to build is one dispatch's failure, not the run's."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import z3

from ireetune.core.candidate import Knobs
from ireetune.flows.model.tuner import ModelTuneOptions, tune_model
from ireetune.targets.llvm_cpu import space as cpu_space
from ireetune.targets.llvm_cpu.common import CpuFacts
from tests.conftest import REPOSITORY, TEST_TARGET

EXAMPLES = REPOSITORY / "examples"


@pytest.mark.parametrize("fails", ["build", "order"])
def test_a_space_that_fails_to_build_is_that_dispatchs_recorded_failure(
    fails: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The MLP's first matmul (N = 1024) gets a space whose build fails the way z3 5 refused an
    # empty domain, or whose ordering divides by zero the way a default's untiled loop read as a
    # tile of 0 did (AlexNet at default flags, 2026-12-06); the second (N = 256) is tuned as
    # usual.
    real_enumerate, real_score = (
        cpu_space.enumerate_space,
        cpu_space.CpuContractionSpace.family.score,
    )

    def enumerate_or_fail(
        sizes: cpu_space.CpuProblemSizes,
        facts: CpuFacts,
        seed: int,
        excluded: Knobs | None = None,
        known: Sequence[Knobs] = (),
    ) -> Iterator[Knobs]:
        if sizes.n == 1024 and fails == "build":
            raise z3.Z3Exception("Value cannot be converted into a Z3 Boolean value")
        yield from real_enumerate(sizes, facts, seed, excluded, known)

    def score_or_fail(
        sizes: cpu_space.CpuProblemSizes, facts: CpuFacts, knobs: Knobs, default: Knobs | None
    ) -> float:
        if sizes.n == 1024 and fails == "order":
            return 1 / 0
        return real_score(sizes, facts, knobs, default)

    family = dataclasses.replace(
        cpu_space.CpuContractionSpace.family,
        enumerate_space=enumerate_or_fail,
        score=score_or_fail,
    )
    monkeypatch.setattr(cpu_space.CpuContractionSpace, "family", family)
    result = tune_model(
        ModelTuneOptions(
            model_path=EXAMPLES / "mlp.mlir", target=TEST_TARGET, output_dir=tmp_path,
            num_candidates=2, candidates_per_dispatch=1, rounds=2, max_dispatches=2,
            use_database=False, search_flags=False,
        )
    )  # fmt: skip
    report = json.loads((result.run_dir / "report.json").read_text())
    notes = {d["problem"]: d["note"] for d in report["dispatches"]}
    why = {
        "build": "could not be built: Z3Exception: Value cannot be converted into a Z3 Boolean "
        "value",
        "order": "could not be ordered (auto): ZeroDivisionError: division by zero",
    }[fails]
    assert notes["matmul_256x1024x512_f32_f32_f32"] == (
        f"not tuned: the search space of matmul_256x1024x512_f32_f32_f32 on {TEST_TARGET} {why}"
    )
    # The other dispatch was tuned: its own tuning session exists and finished.
    (tuning_run,) = (result.run_dir / "tuning").iterdir()
    assert tuning_run.name.startswith("matmul_256x256x1024_f32_f32_f32_")
    assert json.loads((tuning_run / "results.json").read_text())["outcome"] != "failed"
    assert why.split(":")[0] in (result.run_dir / "report.txt").read_text()
